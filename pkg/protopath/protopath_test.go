package protopath

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The subject is descriptor.proto's FieldDescriptorProto and FileDescriptorProto,
// dynamic: nested messages, enums, repeated strings and ints of both widths.

func TestSetThenReadBack(t *testing.T) {
	f := dynamicpb.NewMessage((&descriptorpb.FileDescriptorProto{}).ProtoReflect().Descriptor())
	if Set(f, "options.no_such_field", "x") || f.Has(f.Descriptor().Fields().ByName("options")) {
		t.Fatal("a path the schema lacks must set nothing, not even its parent")
	}
	SetFirst(f, "pkg.proto", "file_name", "name") // the first path is absent: the second takes it
	SetFirst(f, "", "package")                    // zero: stays unset
	Set(f, "options.java_package", "dev.rollbook")
	Set(f, "dependency", []string{"a.proto", "b.proto"})
	Set(f, "options.cc_enable_arenas", true)
	Set(f, "options.optimize_for", EnumSuffix("SIZE")) // CODE_SIZE
	if got := String(f, "missing", "name"); got != "pkg.proto" {
		t.Errorf("String = %q", got)
	}
	if f.Has(f.Descriptor().Fields().ByName("package")) {
		t.Error("SetFirst of a zero value set the field")
	}
	if got := String(f, "options.java_package"); got != "dev.rollbook" {
		t.Errorf("nested String = %q", got)
	}
	if got := Strings(f, "dependency"); len(got) != 2 || got[1] != "b.proto" {
		t.Errorf("Strings = %q", got)
	}
	if got := Strings(f, "name"); len(got) != 1 || got[0] != "pkg.proto" {
		t.Errorf("Strings of a single string = %q", got)
	}
	if !Bool(f, "options.cc_enable_arenas") {
		t.Error("Bool = false")
	}
	if got := EnumName(f, "options.optimize_for"); got != "CODE_SIZE" {
		t.Errorf("EnumName = %q", got)
	}
	if Message(f, "source_code_info") != nil || Message(f, "options") == nil {
		t.Error("Message: unset must be nil, set must not")
	}
	if String(f, "source_code_info.location") != "" {
		t.Error("a path through an unset message must read as absent")
	}
}

func TestIntsAndLists(t *testing.T) {
	md := (&descriptorpb.DescriptorProto{}).ProtoReflect().Descriptor()
	m := dynamicpb.NewMessage(md)
	fld := m.Mutable(md.Fields().ByName("field")).List()
	for _, n := range []int32{7, 9} {
		e := fld.NewElement().Message()
		Set(e, "number", int64(n)) // int64 into an int32 field
		fld.Append(protoreflect.ValueOfMessage(e))
	}
	items := List(m, "field")
	if len(items) != 2 || Int(items[1], "number") != 9 {
		t.Fatalf("List/Int: %d items", len(items))
	}
	if Int(items[0], "missing", "number") != 7 {
		t.Error("Int does not fall through to the next path")
	}
	if !Has(md, "options.map_entry") || Has(md, "options.nope") || Has(md, "name.deeper") {
		t.Error("Has")
	}
	if First(md, "nope", "options", "name") != "options" {
		t.Error("First")
	}
}
