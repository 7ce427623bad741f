package ateapi

import (
	"context"
	"fmt"
	"slices"

	"github.com/jhump/protoreflect/grpcreflect"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollbook/rollbook/pkg/protopath"
)

// ServiceName is the control API's gRPC service.
const ServiceName = "ateapi.Control"

// Era is the API shape family the server speaks; each era's protos are in
// internal/fakesubstrate/protos (testdata/ateapi/README.md says how they
// were written).
type Era string

// Eras, oldest first.
const (
	EraA Era = "A" // flat Worker without state: read-only support
	EraB Era = "B" // flat Worker with assignment and state
	EraC Era = "C" // Worker metadata/status with status.assignment
	EraD Era = "D" // multi-actor: assignments are a subresource
)

// Capabilities is what the connected server serves.
type Capabilities struct {
	Service string
	Methods []string // short names, sorted
	Era     Era
	// DrainImplemented is false when DrainWorker is missing or answers
	// Unimplemented; either way the runbook needs a fresh install.
	DrainImplemented bool
}

// Has reports whether the server lists a method.
func (c Capabilities) Has(method string) bool {
	_, ok := slices.BinarySearch(c.Methods, method)
	return ok
}

// discover resolves the service through server reflection (v1, falling
// back to v1alpha) and keeps its descriptors for building requests.
func discover(ctx context.Context, conn grpc.ClientConnInterface, service string) (protoreflect.ServiceDescriptor, error) {
	rc := grpcreflect.NewClientAuto(ctx, conn)
	defer rc.Reset()
	names, err := rc.ListServices()
	if err != nil {
		return nil, err
	}
	if !slices.Contains(names, service) {
		return nil, fmt.Errorf("ateapi: the server does not serve %s (it serves %v)", service, names)
	}
	sd, err := rc.ResolveService(service)
	if err != nil {
		return nil, err
	}
	return sd.UnwrapService(), nil
}

// detectEra classifies the server by its Worker message and methods.
func detectEra(svc protoreflect.ServiceDescriptor) Era {
	if svc.Methods().ByName("ListWorkerActorAssignments") != nil {
		return EraD
	}
	lw := svc.Methods().ByName("ListWorkers")
	if lw == nil {
		return EraA
	}
	wf := lw.Output().Fields().ByName("workers")
	if wf == nil || wf.Message() == nil {
		return EraA
	}
	worker := wf.Message()
	switch {
	case protopath.Has(worker, "status.capacity"):
		return EraD
	case protopath.Has(worker, "status.state"):
		return EraC
	case protopath.Has(worker, "state"):
		return EraB
	}
	return EraA
}

func methodNames(svc protoreflect.ServiceDescriptor) []string {
	var out []string
	for i := 0; i < svc.Methods().Len(); i++ {
		out = append(out, string(svc.Methods().Get(i).Name()))
	}
	slices.Sort(out)
	return out
}
