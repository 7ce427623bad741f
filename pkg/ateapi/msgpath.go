package ateapi

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Reading and writing dynamic messages by dotted proto-name path. Readers
// take several paths and use the first one present, which is how one decoder
// covers every era's shape (brief §2.4).

// lookup returns the message holding the path's last field and that field,
// or nils when the schema lacks the path or an intermediate message is unset.
func lookup(m protoreflect.Message, path string) (protoreflect.Message, protoreflect.FieldDescriptor) {
	// strings.Cut, not Split: decoding 50,000 actors calls this a million times.
	for {
		p, rest, more := strings.Cut(path, ".")
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			return nil, nil
		}
		if !more {
			return m, fd
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return nil, nil
		}
		if w, ok := m.(*wireMessage); ok { // one look-up for Has and Get
			if m = w.present(fd); m == nil {
				return nil, nil
			}
			path = rest
			continue
		}
		if !m.Has(fd) {
			return nil, nil
		}
		m, path = m.Get(fd).Message(), rest
	}
}

// schemaHas reports whether a descriptor has the path.
func schemaHas(md protoreflect.MessageDescriptor, path string) bool {
	for _, p := range strings.Split(path, ".") {
		if md == nil {
			return false
		}
		fd := md.Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			return false
		}
		md = fd.Message()
	}
	return true
}

func getStr(m protoreflect.Message, paths ...string) string {
	for _, p := range paths {
		if parent, fd := lookup(m, p); fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			if s := parent.Get(fd).String(); s != "" {
				return s
			}
		}
	}
	return ""
}

// getStrs reads a repeated string, or a single string as a one-element list
// (Worker.ip became repeated ips).
func getStrs(m protoreflect.Message, paths ...string) []string {
	for _, p := range paths {
		parent, fd := lookup(m, p)
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

func getInt(m protoreflect.Message, paths ...string) int64 {
	for _, p := range paths {
		parent, fd := lookup(m, p)
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

// getEnum returns the enum value name at the first enum-typed path.
func getEnum(m protoreflect.Message, paths ...string) string {
	for _, p := range paths {
		parent, fd := lookup(m, p)
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

func getMsg(m protoreflect.Message, path string) protoreflect.Message {
	parent, fd := lookup(m, path)
	if fd == nil || fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() || !parent.Has(fd) {
		return nil
	}
	return parent.Get(fd).Message()
}

func getStrMap(m protoreflect.Message, path string) map[string]string {
	parent, fd := lookup(m, path)
	if fd == nil || !fd.IsMap() || fd.MapValue().Kind() != protoreflect.StringKind {
		return nil
	}
	if w, ok := parent.(*wireMessage); ok {
		return w.strMap(fd)
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

func getList(m protoreflect.Message, field string) []protoreflect.Message {
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

// setStr sets a string at path, creating parent messages; false if the
// schema lacks it.
func setStr(m protoreflect.Message, path, v string) bool {
	parent, fd := mutablePath(m, path)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return false
	}
	parent.Set(fd, protoreflect.ValueOfString(v))
	return true
}

func setInt32(m protoreflect.Message, path string, v int32) bool {
	parent, fd := mutablePath(m, path)
	if fd == nil || fd.IsList() {
		return false
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		parent.Set(fd, protoreflect.ValueOfInt32(v))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		parent.Set(fd, protoreflect.ValueOfInt64(int64(v)))
	default:
		return false
	}
	return true
}

func mutablePath(m protoreflect.Message, path string) (protoreflect.Message, protoreflect.FieldDescriptor) {
	if !schemaHas(m.Descriptor(), path) {
		return nil, nil
	}
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(p))
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return nil, nil
		}
		m = m.Mutable(fd).Message()
	}
	return m, m.Descriptor().Fields().ByName(protoreflect.Name(parts[len(parts)-1]))
}
