package apicall

import (
	"testing"

	"github.com/jhump/protoreflect/desc" //nolint:staticcheck // apicall speaks these descriptor types
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// fileWith is a file of package pkg with service svc and one method per
// entry of methods (name → idempotency level, nil for none).
func fileWith(t *testing.T, pkg, svc string, methods map[string]*descriptorpb.MethodOptions_IdempotencyLevel) *desc.FileDescriptor {
	t.Helper()
	sd := &descriptorpb.ServiceDescriptorProto{Name: proto.String(svc)}
	for name, lvl := range methods {
		m := &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String("." + pkg + ".Msg"),
			OutputType: proto.String("." + pkg + ".Msg")}
		if lvl != nil {
			m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: lvl}
		}
		sd.Method = append(sd.Method, m)
	}
	fd, err := desc.CreateFileDescriptor(&descriptorpb.FileDescriptorProto{Name: proto.String(pkg + ".proto"),
		Package: proto.String(pkg), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Msg")}}, Service: []*descriptorpb.ServiceDescriptorProto{sd}})
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// Read-only comes from the descriptor or the substrate's known list; a
// name that merely looks like a read is a mutation.
func TestReadOnlyFromTheDescriptor(t *testing.T) {
	none := descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()
	idem := descriptorpb.MethodOptions_IDEMPOTENT.Enum()
	ate := fileWith(t, "ateapi", "Control", map[string]*descriptorpb.MethodOptions_IdempotencyLevel{
		"ListWorkers": nil, "GetActor": nil, "SuspendActor": nil, "ListAndPurgeActors": nil, "GetOrCreateActor": nil,
		"DescribeThing": nil, "Peek": none, "DrainWorker": idem,
	})
	other := fileWith(t, "evil", "Control", map[string]*descriptorpb.MethodOptions_IdempotencyLevel{"ListWorkers": nil})
	for _, tc := range []struct {
		fd   *desc.FileDescriptor
		name string
		want bool
	}{
		{ate, "ListWorkers", true}, {ate, "GetActor", true}, {ate, "Peek", true},
		{ate, "SuspendActor", false}, {ate, "ListAndPurgeActors", false}, {ate, "GetOrCreateActor", false},
		{ate, "DescribeThing", false}, {ate, "DrainWorker", false}, {other, "ListWorkers", false},
	} {
		md := tc.fd.GetServices()[0].FindMethodByName(tc.name)
		if got := ReadOnly(md); got != tc.want {
			t.Errorf("%s/%s: read-only %v, want %v", tc.fd.GetPackage(), tc.name, got, tc.want)
		}
	}
}

func TestSimilar(t *testing.T) {
	for _, tc := range []struct {
		method, name string
		want         bool
	}{
		{"ListWorkers", "ListWorkerz", true},
		{"ListWorkers", "listworkers", true},
		{"ListWorkers", "Workers", true},
		{"GetActor", "GetActr", true},
		{"ListWorkers", "SuspendActor", false},
		{"ListWorkers", "", false},
	} {
		if got := similar(tc.method, tc.name); got != tc.want {
			t.Errorf("similar(%q, %q) = %v, want %v", tc.method, tc.name, got, tc.want)
		}
	}
}
