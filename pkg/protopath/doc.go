// Package protopath reads and writes dynamic protobuf messages by dotted
// proto-name path ("status.worker_assignment.node_name"). The substrate
// client (pkg/ateapi) decodes every schema era through it and the fake
// substrate (internal/fakesubstrate) encodes every era through it: a path
// the era's schema lacks is skipped, which is how one model serves all eras.
// Readers take several paths and use the first one present.
package protopath
