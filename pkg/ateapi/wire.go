package ateapi

import (
	"math"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/runtime/protoiface"
	"google.golang.org/protobuf/types/dynamicpb"
)

// List pages are read straight from their encoding: building a dynamic
// message for each of 50,000 actors costs most of a status run's time and
// memory, while the decoders read a dozen fields of each. wireMessage is a
// read-only protoreflect.Message over encoded bytes that finds a field when
// it is read, by the number the server's own descriptor (from reflection)
// gives it.

// rawPage is a List response kept encoded.
type rawPage struct{ b []byte }

// rawCodec receives rawPage responses as bytes and otherwise marshals and
// unmarshals as grpc's proto codec does. Its name is "proto", so the wire
// content type does not change.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if p, ok := v.(*rawPage); ok {
		p.b = data.Materialize()
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), v.(proto.Message))
}

var _ encoding.CodecV2 = rawCodec{}

// wireMessage reads fields of an encoded message on demand. Has and Get
// cover what the decoders use; anything else works on a dynamic message
// decoded from the same bytes.
type wireMessage struct {
	md   protoreflect.MessageDescriptor
	b    []byte
	full *dynamicpb.Message // decoded on first need by the slow path

	indexed bool
	fields  []wireField
	arena   *wireArena // where sub-messages and indexes come from; nil: the heap
}

func newWireMessage(md protoreflect.MessageDescriptor, b []byte) *wireMessage {
	return &wireMessage{md: md, b: b}
}

// wireField is one occurrence of a field: its number (varint, fixed) or,
// length-delimited, where its value bytes lie in the message (off, n).
type wireField struct {
	num protowire.Number
	typ protowire.Type
	off uint32
	n   uint64
	sub *wireMessage // a message field's value, once read
}

// index scans the message once; the decoders read a field by several era
// paths, so every later read is a look-up in this short list.
func (m *wireMessage) index() []wireField {
	if m.indexed {
		return m.fields
	}
	m.indexed = true
	m.fields = m.arena.fields(countFields(m.b))
	b := m.b
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return m.fields
		}
		b = b[l:]
		f := wireField{num: num, typ: typ}
		var v []byte
		switch typ {
		case protowire.VarintType:
			f.n, l = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, l = protowire.ConsumeFixed32(b)
			f.n = uint64(x)
		case protowire.Fixed64Type:
			f.n, l = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
			f.off, f.n = uint32(len(m.b)-len(b)+l-len(v)), uint64(len(v))
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			// Malformed: the dynamic decoder would reject it; what was
			// read so far stands.
			return m.fields
		}
		b = b[l:]
		m.fields = append(m.fields, f)
	}
	return m.fields
}

// countFields counts the fields of b, so that the index is allocated once.
func countFields(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		if l2 := protowire.ConsumeFieldValue(num, typ, b[l:]); l2 >= 0 {
			b = b[l+l2:]
		} else {
			return n
		}
		n++
	}
	return n
}

// occurrences calls f with each occurrence of field num, in order.
func (m *wireMessage) occurrences(num protowire.Number, f func(typ protowire.Type, v []byte, n uint64)) {
	for _, x := range m.index() {
		if x.num != num {
			continue
		}
		if x.typ == protowire.BytesType {
			f(x.typ, m.b[x.off:uint64(x.off)+x.n], 0)
		} else {
			f(x.typ, nil, x.n)
		}
	}
}

func (m *wireMessage) Descriptor() protoreflect.MessageDescriptor { return m.md }

// Has follows proto3 presence: a message field is present when it occurs;
// a scalar without explicit presence when it is not its zero value.
func (m *wireMessage) Has(fd protoreflect.FieldDescriptor) bool {
	if fd.IsList() {
		return m.Get(fd).List().Len() > 0
	}
	if fd.IsMap() {
		return m.slow().Has(fd)
	}
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind || fd.HasPresence() {
		found := false
		m.occurrences(fd.Number(), func(protowire.Type, []byte, uint64) { found = true })
		return found
	}
	v := m.Get(fd)
	if fd.Kind() == protoreflect.BytesKind {
		return len(v.Bytes()) > 0
	}
	return v.Interface() != fd.Default().Interface()
}

// Get reads a field. Repeated messages and strings, singular messages and
// scalars are read from the bytes; maps and packed lists take the slow path.
func (m *wireMessage) Get(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch {
	case fd.IsMap():
		return m.slow().Get(fd)
	case fd.IsList():
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.StringKind {
			return m.slow().Get(fd)
		}
		l := &wireList{fd: fd}
		m.occurrences(fd.Number(), func(typ protowire.Type, v []byte, _ uint64) {
			if typ == protowire.BytesType {
				l.items = append(l.items, v)
			}
		})
		return protoreflect.ValueOfList(l)
	case fd.Kind() == protoreflect.MessageKind:
		return protoreflect.ValueOfMessage(m.message(fd))
	case fd.Kind() == protoreflect.GroupKind:
		return m.slow().Get(fd)
	}
	v, ok := fd.Default(), false
	m.occurrences(fd.Number(), func(typ protowire.Type, b []byte, n uint64) {
		if x, good := scalar(fd, typ, b, n); good { // the last occurrence wins
			v, ok = x, true
		}
	})
	if !ok {
		return fd.Default()
	}
	return v
}

// PresentMessage returns a singular message field when it occurs, else nil (a
// nil *wireMessage would not compare equal to a nil interface).
func (m *wireMessage) PresentMessage(fd protoreflect.FieldDescriptor) protoreflect.Message {
	for _, f := range m.index() {
		if f.num == fd.Number() && f.typ == protowire.BytesType {
			return m.message(fd)
		}
	}
	return nil
}

// message reads a singular message field. Occurrences of a message field
// merge, which is what decoding their concatenation does; the usual single
// occurrence is kept in the index, so later reads share it.
func (m *wireMessage) message(fd protoreflect.FieldDescriptor) *wireMessage {
	var only *wireField
	var parts [][]byte
	fields := m.index()
	for i := range fields {
		f := &fields[i]
		if f.num != fd.Number() || f.typ != protowire.BytesType {
			continue
		}
		if only == nil && parts == nil {
			only = f
			continue
		}
		if only != nil {
			parts, only = append(parts, m.b[only.off:uint64(only.off)+only.n]), nil
		}
		parts = append(parts, m.b[f.off:uint64(f.off)+f.n])
	}
	switch {
	case only != nil:
		if only.sub == nil {
			only.sub = m.arena.message(fd.Message(), m.b[only.off:uint64(only.off)+only.n])
		}
		return only.sub
	case parts != nil:
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return m.arena.message(fd.Message(), b)
	}
	return m.arena.message(fd.Message(), nil)
}

// StringMap reads a map<string, string> field: repeated entries of key (1)
// and value (2), a later key overriding an earlier one.
func (m *wireMessage) StringMap(fd protoreflect.FieldDescriptor) map[string]string {
	var out map[string]string
	m.occurrences(fd.Number(), func(typ protowire.Type, v []byte, _ uint64) {
		if typ != protowire.BytesType {
			return
		}
		e := newWireMessage(fd.Message(), v)
		if out == nil {
			out = map[string]string{}
		}
		out[e.Get(fd.MapKey()).String()] = e.Get(fd.MapValue()).String()
	})
	return out
}

// scalar converts one occurrence of a singular scalar field.
func scalar(fd protoreflect.FieldDescriptor, typ protowire.Type, b []byte, n uint64) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(b)), typ == protowire.BytesType
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(append([]byte(nil), b...)), typ == protowire.BytesType
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(n != 0), typ == protowire.VarintType
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(n))), typ == protowire.VarintType
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(n)), typ == protowire.VarintType
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(n)), typ == protowire.VarintType
	case protoreflect.Sint32Kind:
		return protoreflect.ValueOfInt32(int32(protowire.DecodeZigZag(n & math.MaxUint32))), typ == protowire.VarintType
	case protoreflect.Sint64Kind:
		return protoreflect.ValueOfInt64(protowire.DecodeZigZag(n)), typ == protowire.VarintType
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(n)), typ == protowire.VarintType
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(n), typ == protowire.VarintType
	case protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n)), typ == protowire.Fixed32Type
	case protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n)), typ == protowire.Fixed32Type
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(math.Float32frombits(uint32(n))), typ == protowire.Fixed32Type
	case protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n)), typ == protowire.Fixed64Type
	case protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(n), typ == protowire.Fixed64Type
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(math.Float64frombits(n)), typ == protowire.Fixed64Type
	}
	return protoreflect.Value{}, false
}

// slow decodes the whole message into a dynamic message, once.
func (m *wireMessage) slow() *dynamicpb.Message {
	if m.full == nil {
		m.full = dynamicpb.NewMessage(m.md)
		_ = proto.UnmarshalOptions{Merge: true}.Unmarshal(m.b, m.full)
	}
	return m.full
}

// The rest of protoreflect.Message, on the decoded message.

func (m *wireMessage) Type() protoreflect.MessageType { return m.slow().Type() }
func (m *wireMessage) New() protoreflect.Message      { return m.slow().New() }
func (m *wireMessage) Interface() protoreflect.ProtoMessage {
	return m.slow().Interface()
}
func (m *wireMessage) Range(f func(protoreflect.FieldDescriptor, protoreflect.Value) bool) {
	m.slow().Range(f)
}
func (m *wireMessage) Clear(fd protoreflect.FieldDescriptor) { m.slow().Clear(fd) }
func (m *wireMessage) Set(fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	m.slow().Set(fd, v)
}
func (m *wireMessage) Mutable(fd protoreflect.FieldDescriptor) protoreflect.Value {
	return m.slow().Mutable(fd)
}
func (m *wireMessage) NewField(fd protoreflect.FieldDescriptor) protoreflect.Value {
	return m.slow().NewField(fd)
}
func (m *wireMessage) WhichOneof(od protoreflect.OneofDescriptor) protoreflect.FieldDescriptor {
	return m.slow().WhichOneof(od)
}
func (m *wireMessage) GetUnknown() protoreflect.RawFields  { return m.slow().GetUnknown() }
func (m *wireMessage) SetUnknown(r protoreflect.RawFields) { m.slow().SetUnknown(r) }
func (m *wireMessage) IsValid() bool                       { return true }

// ProtoMethods is nil: the proto package then works through reflection.
func (m *wireMessage) ProtoMethods() *protoiface.Methods { return nil }

// wireList is a repeated message or string field read from its encoding.
type wireList struct {
	fd    protoreflect.FieldDescriptor
	items [][]byte
}

func (l *wireList) Len() int { return len(l.items) }

func (l *wireList) Get(i int) protoreflect.Value {
	if l.fd.Kind() == protoreflect.MessageKind {
		return protoreflect.ValueOfMessage(newWireMessage(l.fd.Message(), l.items[i]))
	}
	return protoreflect.ValueOfString(string(l.items[i]))
}

func (l *wireList) Set(int, protoreflect.Value) {
	panic("ateapi: a list read from the wire is read-only")
}
func (l *wireList) Append(protoreflect.Value) {
	panic("ateapi: a list read from the wire is read-only")
}
func (l *wireList) AppendMutable() protoreflect.Value {
	panic("ateapi: a list read from the wire is read-only")
}
func (l *wireList) Truncate(int) { panic("ateapi: a list read from the wire is read-only") }
func (l *wireList) NewElement() protoreflect.Value {
	panic("ateapi: a list read from the wire is read-only")
}
func (l *wireList) IsValid() bool { return true }

// wireArena hands out the messages and indexes of one list item; reset
// recycles them for the next item. Decoding 50,000 actors thus allocates
// little besides what the decoders keep. A nil arena allocates each.
type wireArena struct {
	msgs  []wireMessage
	slots []wireField
}

func (a *wireArena) message(md protoreflect.MessageDescriptor, b []byte) *wireMessage {
	if a == nil {
		return newWireMessage(md, b)
	}
	if len(a.msgs) == cap(a.msgs) {
		// A new slab: messages handed out from the old one stay valid.
		a.msgs = make([]wireMessage, 0, max(16, 2*cap(a.msgs)))
	}
	a.msgs = append(a.msgs, wireMessage{md: md, b: b, arena: a})
	return &a.msgs[len(a.msgs)-1]
}

// fields returns an empty index with room for n fields.
func (a *wireArena) fields(n int) []wireField {
	if a == nil {
		return make([]wireField, 0, n)
	}
	if cap(a.slots)-len(a.slots) < n {
		a.slots = make([]wireField, 0, max(64, 2*cap(a.slots), n))
	}
	l := len(a.slots)
	a.slots = a.slots[:l+n]
	return a.slots[l : l : l+n]
}

// reset makes everything handed out reusable; nothing may still use it.
func (a *wireArena) reset() {
	a.msgs, a.slots = a.msgs[:0], a.slots[:0]
}
