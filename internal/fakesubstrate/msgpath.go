package fakesubstrate

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Field access by dotted proto-name path ("status.worker_assignment.node_name").
// Every era is read and written through these, so a path absent in an era's
// schema is simply skipped: that is how one state model serves all eras.

// enumSuffix asks setPath to pick the enum value whose name ends in "_"+suffix
// (or equals it), so "DRAINING" becomes STATE_DRAINING or WORKER_STATE_DRAINING.
type enumSuffix string

// walk returns the message holding the last path segment and that field,
// creating intermediate messages when create is set.
func walk(m protoreflect.Message, path string, create bool) (protoreflect.Message, protoreflect.FieldDescriptor) {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			return nil, nil
		}
		if i == len(parts)-1 {
			return m, fd
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return nil, nil
		}
		if !create && !m.Has(fd) {
			return nil, nil
		}
		if create {
			m = m.Mutable(fd).Message()
		} else {
			m = m.Get(fd).Message()
		}
	}
	return nil, nil
}

// hasPath reports whether the schema has the path, regardless of values.
func hasPath(md protoreflect.MessageDescriptor, path string) bool {
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

// setFirst sets v on the first path the schema has; zero values are skipped
// so unset facts stay absent on the wire, as on the real server.
func setFirst(m protoreflect.Message, v any, paths ...string) {
	if isZero(v) {
		return
	}
	for _, p := range paths {
		if hasPath(m.Descriptor(), p) && setPath(m, p, v) {
			return
		}
	}
}

func isZero(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case enumSuffix:
		return x == ""
	case int64:
		return x == 0
	case int:
		return x == 0
	case bool:
		return !x
	case []string:
		return len(x) == 0
	case map[string]string:
		return len(x) == 0
	}
	return v == nil
}

func setPath(m protoreflect.Message, path string, v any) bool {
	parent, fd := walk(m, path, true)
	if fd == nil {
		return false
	}
	switch x := v.(type) {
	case string:
		if fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			parent.Set(fd, protoreflect.ValueOfString(x))
			return true
		}
		if fd.Kind() == protoreflect.StringKind && fd.IsList() {
			parent.Mutable(fd).List().Append(protoreflect.ValueOfString(x))
			return true
		}
	case []string:
		if fd.Kind() == protoreflect.StringKind && fd.IsList() {
			l := parent.Mutable(fd).List()
			for _, s := range x {
				l.Append(protoreflect.ValueOfString(s))
			}
			return true
		}
		if fd.Kind() == protoreflect.StringKind && len(x) > 0 {
			parent.Set(fd, protoreflect.ValueOfString(x[0]))
			return true
		}
	case int64:
		return setInt(parent, fd, x)
	case int:
		return setInt(parent, fd, int64(x))
	case bool:
		if fd.Kind() == protoreflect.BoolKind {
			parent.Set(fd, protoreflect.ValueOfBool(x))
			return true
		}
	case enumSuffix:
		if fd.Kind() != protoreflect.EnumKind {
			return false
		}
		vals := fd.Enum().Values()
		for i := 0; i < vals.Len(); i++ {
			n := string(vals.Get(i).Name())
			if n == string(x) || strings.HasSuffix(n, "_"+string(x)) {
				parent.Set(fd, protoreflect.ValueOfEnum(vals.Get(i).Number()))
				return true
			}
		}
	case map[string]string:
		if fd.IsMap() {
			mp := parent.Mutable(fd).Map()
			for k, val := range x {
				mp.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(val))
			}
			return true
		}
	}
	return false
}

func setInt(m protoreflect.Message, fd protoreflect.FieldDescriptor, v int64) bool {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		m.Set(fd, protoreflect.ValueOfInt64(v))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		m.Set(fd, protoreflect.ValueOfInt32(int32(v)))
	default:
		return false
	}
	return true
}

// getString returns the first non-empty string among the paths.
func getString(m protoreflect.Message, paths ...string) string {
	for _, p := range paths {
		parent, fd := walk(m, p, false)
		if fd != nil && fd.Kind() == protoreflect.StringKind && !fd.IsList() {
			if s := parent.Get(fd).String(); s != "" {
				return s
			}
		}
	}
	return ""
}

// getInt returns an integer field and whether the schema has it.
func getInt(m protoreflect.Message, path string) (int64, bool) {
	parent, fd := walk(m, path, false)
	if fd == nil {
		return 0, hasPath(m.Descriptor(), path)
	}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind,
		protoreflect.Sint64Kind, protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		return parent.Get(fd).Int(), true
	}
	return 0, false
}

// firstPresent returns the first of paths that the schema has.
func firstPresent(md protoreflect.MessageDescriptor, paths ...string) string {
	for _, p := range paths {
		if hasPath(md, p) {
			return p
		}
	}
	return ""
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
