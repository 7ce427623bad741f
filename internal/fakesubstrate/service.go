package fakesubstrate

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rollbook/rollbook/pkg/atestate"
	"github.com/rollbook/rollbook/pkg/protopath"
)

// serviceDesc builds a grpc.ServiceDesc from the era's descriptor, so the
// methods served are exactly those in the era's proto.
func (s *Server) serviceDesc() *grpc.ServiceDesc {
	sd := &grpc.ServiceDesc{
		ServiceName: string(s.schema.service.FullName()),
		HandlerType: (*any)(nil),
		Metadata:    s.schema.file.Path(),
	}
	methods := s.schema.service.Methods()
	for i := 0; i < methods.Len(); i++ {
		md := methods.Get(i)
		sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: string(md.Name()), Handler: s.handler(md)})
	}
	return sd
}

func (s *Server) handler(md protoreflect.MethodDescriptor) grpc.MethodHandler {
	full := "/" + string(s.schema.service.FullName()) + "/" + string(md.Name())
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		req := dynamicpb.NewMessage(md.Input())
		if err := dec(req); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, r any) (any, error) {
			return s.dispatch(ctx, md, r.(*dynamicpb.Message))
		}
		if ic == nil {
			return call(ctx, req)
		}
		return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, call)
	}
}

func (s *Server) dispatch(ctx context.Context, md protoreflect.MethodDescriptor, req *dynamicpb.Message) (proto.Message, error) {
	out, err := s.dispatchLocked(ctx, md, req)
	if err != nil || md.Name() != "SuspendActor" || !s.opts.SyncSuspend {
		return out, err
	}
	return s.awaitSuspended(ctx, md, req)
}

// awaitSuspended answers a SuspendActor once the actor has left SUSPENDING,
// as upstream's workflow_suspend.go does: the call checkpoints and uploads
// before it returns the SUSPENDED actor, so a client's concurrency bounds
// how many suspends run at once.
func (s *Server) awaitSuspended(ctx context.Context, md protoreflect.MethodDescriptor, req *dynamicpb.Message) (proto.Message, error) {
	for {
		s.mu.Lock()
		a, err := s.findActorLocked(actorRef(req))
		if err != nil || a.State != atestate.ActorSuspending {
			defer s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			if a.State == atestate.ActorCrashed { // its worker went mid-suspend
				return nil, status.Errorf(codes.DataLoss, "actor %s crashed", a.key())
			}
			out := dynamicpb.NewMessage(md.Output())
			s.encodeActor(actorTarget(out), a)
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(20 * time.Millisecond): // the transition's timer has no subscribers to tell
		}
	}
}

func (s *Server) dispatchLocked(ctx context.Context, md protoreflect.MethodDescriptor, req *dynamicpb.Message) (proto.Message, error) {
	out := dynamicpb.NewMessage(md.Output())
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.authorizeAtespace(ctx, md.Name(), req); err != nil {
		return nil, err
	}
	var err error
	switch md.Name() {
	case "ListWorkers":
		err = s.listWorkers(req, out)
	case "GetWorker":
		err = s.getWorker(req, out)
	case "DrainWorker":
		err = s.drainWorker(req, out)
	case "ListWorkerActorAssignments":
		err = s.listAssignments(req, out)
	case "ListActors":
		err = s.listActors(req, out, s.hiddenFrom(PrincipalFrom(ctx)))
	case "ListAtespaces":
		s.listAtespaces(out)
	case "GetActor":
		err = s.actorCall(req, out, nil)
	case "SuspendActor":
		err = s.actorCall(req, out, s.suspendLocked)
	case "RevertActor":
		err = s.actorCall(req, out, s.revertLocked)
	case "ResumeActor":
		err = s.resumeActor(req, out)
	default:
		err = status.Errorf(codes.Unimplemented, "method %s not implemented", md.Name())
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// workerName reads and validates a worker reference; workers are global, so
// an atespace is refused as upstream does.
func workerName(req protoreflect.Message) (string, error) {
	if protopath.String(req, "worker.atespace") != "" {
		return "", status.Error(codes.InvalidArgument, "worker.atespace must be empty: workers are global")
	}
	name := protopath.String(req, "worker.name")
	if name == "" {
		return "", status.Error(codes.InvalidArgument, "worker.name is required")
	}
	return name, nil
}

func (s *Server) workerLocked(req protoreflect.Message) (*Worker, error) {
	name, err := workerName(req)
	if err != nil {
		return nil, err
	}
	w, ok := s.workers[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Worker %s not found", name)
	}
	return w, nil
}

func (s *Server) getWorker(req, out *dynamicpb.Message) error {
	w, err := s.workerLocked(req)
	if err != nil {
		return err
	}
	s.encodeWorker(out, w)
	return nil
}

func (s *Server) drainWorker(req, out *dynamicpb.Message) error {
	if s.era == EraCStub {
		return status.Error(codes.Unimplemented, "DrainWorker is not implemented yet")
	}
	w, err := s.workerLocked(req)
	if err != nil {
		return err
	}
	s.drainLocked(w)
	s.encodeWorker(out, w)
	return nil
}

// actorTarget is where an actor goes in a response: the response itself
// when the RPC returns a bare Actor, else its "actor" field.
func actorTarget(out protoreflect.Message) protoreflect.Message {
	if out.Descriptor().Name() == "Actor" {
		return out
	}
	return out.Mutable(out.Descriptor().Fields().ByName("actor")).Message()
}

func actorRef(req protoreflect.Message) (string, string) {
	return protopath.String(req, "actor.atespace", "actor_ref.atespace", "atespace"),
		protopath.String(req, "actor.name", "actor_ref.name", "actor_id")
}

func (s *Server) actorCall(req, out *dynamicpb.Message, op func(*Actor) error) error {
	a, err := s.findActorLocked(actorRef(req))
	if err != nil {
		return err
	}
	if op != nil {
		if err := op(a); err != nil {
			return err
		}
	}
	s.encodeActor(actorTarget(out), a)
	return nil
}

func (s *Server) resumeActor(req, out *dynamicpb.Message) error {
	a, err := s.findActorLocked(actorRef(req))
	if err != nil {
		return err
	}
	resumed, err := s.resumeLocked(a)
	if err != nil {
		return err
	}
	s.encodeActor(actorTarget(out), a)
	protopath.SetFirst(out, resumed, "resumed")
	return nil
}
