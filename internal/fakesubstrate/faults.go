package fakesubstrate

import (
	"context"
	"path"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// faults holds injected failures and latencies per method short name.
type faults struct {
	mu      sync.Mutex
	queue   map[string][]*status.Status
	latency map[string]time.Duration
}

func newFaults() *faults {
	return &faults{queue: map[string][]*status.Status{}, latency: map[string]time.Duration{}}
}

// faultMessages are the upstream texts for the codes callers retry on.
var faultMessages = map[codes.Code]string{
	codes.Aborted:     "another operation is in progress for this actor",
	codes.Unavailable: "connection to the control plane store was lost",
}

// InjectFault makes the next n calls of method (short name, e.g.
// "SuspendActor") fail with code, after authentication. Faults queue up
// in order.
func (s *Server) InjectFault(method string, code codes.Code, n int) {
	msg := faultMessages[code]
	if msg == "" {
		msg = "injected " + code.String()
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	for range n {
		s.faults.queue[method] = append(s.faults.queue[method], status.New(code, msg))
	}
}

// SetLatency delays every call of method by d (0 removes it), to exercise
// polling and deadlines.
func (s *Server) SetLatency(method string, d time.Duration) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.latency[method] = d
}

func (f *faults) take(method string) (*status.Status, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.latency[method]
	q := f.queue[method]
	if len(q) == 0 {
		return nil, d
	}
	f.queue[method] = q[1:]
	return q[0], d
}

func (s *Server) countAndFault(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	s.mu.Lock()
	s.calls[method]++
	s.mu.Unlock()
	st, delay := s.faults.take(method)
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if st != nil {
		return nil, st.Err()
	}
	return h(ctx, req)
}

// rejectUnknownFields emulates upstream's RejectUnknownFieldsUnaryInterceptor:
// a client that encodes from the wrong descriptor gets InvalidArgument.
func rejectUnknownFields(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if m, ok := req.(interface{ ProtoReflect() protoreflect.Message }); ok && hasUnknown(m.ProtoReflect()) {
		return nil, status.Error(codes.InvalidArgument, "request contains unknown fields")
	}
	return h(ctx, req)
}

// hasUnknown reports unknown fields anywhere in m, like upstream's
// RejectUnknownFieldsUnaryInterceptor.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len() && !found; i++ {
				found = hasUnknown(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = hasUnknown(mv.Message())
				return !found
			})
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}
