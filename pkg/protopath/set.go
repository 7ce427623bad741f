package protopath

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// EnumSuffix asks Set for the enum value named so or ending in "_"+suffix
// (proto's prefixing convention): "DRAINING" sets STATE_DRAINING or
// WORKER_STATE_DRAINING, whichever the schema has.
type EnumSuffix string

// Set sets v at path, creating parent messages, and reports whether the
// schema has a field there that takes v. v is a string (set, or appended to
// a repeated string), []string (appended, or its first item into a single
// string), an int, int32 or int64 (into any signed integer kind), a bool,
// an EnumSuffix, or a map[string]string (entries added).
func Set(m protoreflect.Message, path string, v any) bool {
	parent, fd := mutable(m, path)
	if fd == nil {
		return false
	}
	switch x := v.(type) {
	case string:
		if fd.Kind() != protoreflect.StringKind {
			return false
		}
		if fd.IsList() {
			parent.Mutable(fd).List().Append(protoreflect.ValueOfString(x))
		} else {
			parent.Set(fd, protoreflect.ValueOfString(x))
		}
		return true
	case []string:
		switch {
		case fd.Kind() != protoreflect.StringKind:
			return false
		case fd.IsList():
			l := parent.Mutable(fd).List()
			for _, s := range x {
				l.Append(protoreflect.ValueOfString(s))
			}
			return true
		case len(x) > 0:
			parent.Set(fd, protoreflect.ValueOfString(x[0]))
			return true
		}
	case int:
		return setInt(parent, fd, int64(x))
	case int32:
		return setInt(parent, fd, int64(x))
	case int64:
		return setInt(parent, fd, x)
	case bool:
		if fd.Kind() == protoreflect.BoolKind && !fd.IsList() {
			parent.Set(fd, protoreflect.ValueOfBool(x))
			return true
		}
	case EnumSuffix:
		if fd.Kind() != protoreflect.EnumKind || fd.IsList() {
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
		if fd.IsMap() && fd.MapKey().Kind() == protoreflect.StringKind && fd.MapValue().Kind() == protoreflect.StringKind {
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
	if fd.IsList() {
		return false
	}
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

// SetFirst sets v at the first of paths that takes it. A zero v sets
// nothing, so an unset fact stays absent on the wire, as proto3 encodes it.
func SetFirst(m protoreflect.Message, v any, paths ...string) {
	if isZero(v) {
		return
	}
	for _, p := range paths {
		if Set(m, p, v) {
			return
		}
	}
}

func isZero(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case EnumSuffix:
		return x == ""
	case int:
		return x == 0
	case int32:
		return x == 0
	case int64:
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
