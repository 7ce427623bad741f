// Package ateapi is an era-independent client for the Agent Substrate control
// API (ateapi.Control).
//
// The API changed shape several times (flat Worker, resource-style
// metadata/status, assignments as a subresource, renamed snapshot fields,
// renumbered request fields). The client therefore never uses generated code
// or field numbers: it learns the server's schema through gRPC server
// reflection, builds requests from the server's own descriptors, and reads
// responses by field name, probing the known paths of each fact in order.
// Callers get the typed Worker and Actor model and typed errors.
package ateapi
