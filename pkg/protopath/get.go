package protopath

import "google.golang.org/protobuf/reflect/protoreflect"

// StringMapper is a message that reads a map<string, string> field more
// cheaply than through its protoreflect.Map (pkg/ateapi's wire messages).
type StringMapper interface {
	// StringMap returns the map field's entries, nil when there are none.
	StringMap(fd protoreflect.FieldDescriptor) map[string]string
}

// String returns the first non-empty singular string among the paths.
func String(m protoreflect.Message, paths ...string) string {
	for _, p := range paths {
		if parent, fd := Lookup(m, p); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			if s := parent.Get(fd).String(); s != "" {
				return s
			}
		}
	}
	return ""
}

// Strings reads the first non-empty repeated string among the paths, or a
// single string as a one-element list (a field that became repeated).
func Strings(m protoreflect.Message, paths ...string) []string {
	for _, p := range paths {
		parent, fd := Lookup(m, p)
		if fd == nil || fd.Kind() != protoreflect.StringKind {
			continue
		}
		if !fd.IsList() {
			if s := parent.Get(fd).String(); s != "" {
				return []string{s}
			}
			continue
		}
		l := parent.Get(fd).List()
		if l.Len() == 0 {
			continue
		}
		out := make([]string, 0, l.Len())
		for i := 0; i < l.Len(); i++ {
			out = append(out, l.Get(i).String())
		}
		return out
	}
	return nil
}

// Int returns the first non-zero singular integer among the paths, of any
// integer kind.
func Int(m protoreflect.Message, paths ...string) int64 {
	for _, p := range paths {
		parent, fd := Lookup(m, p)
		if fd == nil || fd.IsList() {
			continue
		}
		switch fd.Kind() {
		case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind,
			protoreflect.Sint64Kind, protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
			if v := parent.Get(fd).Int(); v != 0 {
				return v
			}
		case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
			if v := parent.Get(fd).Uint(); v != 0 {
				return int64(v)
			}
		}
	}
	return 0
}

// Bool returns the singular bool at path (false when absent).
func Bool(m protoreflect.Message, path string) bool {
	parent, fd := Lookup(m, path)
	return fd != nil && fd.Kind() == protoreflect.BoolKind && !fd.IsList() && parent.Get(fd).Bool()
}

// EnumName returns the value name of the first enum-typed path.
func EnumName(m protoreflect.Message, paths ...string) string {
	for _, p := range paths {
		parent, fd := Lookup(m, p)
		if fd == nil || fd.Kind() != protoreflect.EnumKind || fd.IsList() {
			continue
		}
		num := parent.Get(fd).Enum()
		if ev := fd.Enum().Values().ByNumber(num); ev != nil {
			return string(ev.Name())
		}
	}
	return ""
}

// Message returns the singular message set at path, else nil.
func Message(m protoreflect.Message, path string) protoreflect.Message {
	parent, fd := Lookup(m, path)
	if fd == nil || fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() || !parent.Has(fd) {
		return nil
	}
	return parent.Get(fd).Message()
}

// StringMap reads the map<string, string> at path, nil when empty.
func StringMap(m protoreflect.Message, path string) map[string]string {
	parent, fd := Lookup(m, path)
	if fd == nil || !fd.IsMap() || fd.MapValue().Kind() != protoreflect.StringKind {
		return nil
	}
	if sm, ok := parent.(StringMapper); ok {
		return sm.StringMap(fd)
	}
	mp := parent.Get(fd).Map()
	if mp.Len() == 0 {
		return nil
	}
	out := make(map[string]string, mp.Len())
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		out[k.String()] = v.String()
		return true
	})
	return out
}

// List returns the items of m's repeated message field.
func List(m protoreflect.Message, field string) []protoreflect.Message {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(field))
	if fd == nil || !fd.IsList() || fd.Kind() != protoreflect.MessageKind {
		return nil
	}
	l := m.Get(fd).List()
	out := make([]protoreflect.Message, 0, l.Len())
	for i := 0; i < l.Len(); i++ {
		out = append(out, l.Get(i).Message())
	}
	return out
}
