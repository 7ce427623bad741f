package kmodule

import (
	"bytes"
	"debug/elf"
	"fmt"
	"strings"
)

// Info is what a module's .modinfo says about it (modinfo -F FIELD).
type Info struct {
	Name    string
	Version string
	// Vermagic is the kernel release and the build options the module was
	// built for ("6.1.0-28-amd64 SMP preempt mod_unload modversions "); the
	// kernel refuses a module whose vermagic is not its own.
	Vermagic   string
	SrcVersion string
}

// Release is the kernel release Vermagic names (its first word).
func (i Info) Release() string {
	if f := strings.Fields(i.Vermagic); len(f) > 0 {
		return f[0]
	}
	return ""
}

// MaxModinfo bounds the .modinfo section read (tt-kmd's is under 1 KiB).
const MaxModinfo = 64 << 10

// ReadInfo parses ko's .modinfo, ignoring an appended signature. A file
// that is not an ELF object with a .modinfo section is not a module.
func ReadInfo(ko []byte) (Info, error) {
	content, _, _, err := Split(ko)
	if err != nil {
		return Info{}, err
	}
	f, err := elf.NewFile(bytes.NewReader(content))
	if err != nil {
		return Info{}, fmt.Errorf("not a kernel module (ELF): %v", err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return Info{}, fmt.Errorf("not a kernel module: no .modinfo section")
	}
	if sec.Size > MaxModinfo {
		return Info{}, fmt.Errorf(".modinfo is %d bytes, more than %d", sec.Size, MaxModinfo)
	}
	raw, err := sec.Data()
	if err != nil {
		return Info{}, fmt.Errorf(".modinfo: %v", err)
	}
	var info Info
	seen := map[string]bool{}
	for _, kv := range bytes.Split(raw, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		var dst *string
		switch k {
		case "name":
			dst = &info.Name
		case "version":
			dst = &info.Version
		case "vermagic":
			dst = &info.Vermagic
		case "srcversion":
			dst = &info.SrcVersion
		default:
			continue
		}
		// A field the module states twice could be read one way here and
		// another way by the kernel or modinfo: not a module we accept.
		if seen[k] {
			return Info{}, fmt.Errorf(".modinfo states %s twice", k)
		}
		seen[k] = true
		*dst = v
	}
	return info, nil
}
