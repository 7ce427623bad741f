// Package fakesubstrate is an in-process fake of the Agent Substrate control
// API (ateapi.Control) for tests and the simulated cluster.
//
// It serves one API era at a time from the .proto files under protos/<era>,
// parsed at start-up into dynamic messages (no generated code), with gRPC
// server reflection, TLS and bearer-token authentication. The protos are
// embedded here rather than kept in testdata/ because go:embed cannot reach
// parent directories and the sim/ module must compile them into its binary;
// testdata/ateapi/README.md points here.
//
// State is era-independent (workers and actors with typed states); each RPC
// reads its request and writes its response by field name, so one state
// model serves every era. Exported methods let the simulator's pool
// controller, worker syncer and traffic simulator drive that state.
package fakesubstrate
