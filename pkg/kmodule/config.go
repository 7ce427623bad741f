package kmodule

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"slices"
	"strings"
)

// ConfigDigest names a kernel configuration: the SHA-256 (16 hex digits)
// of its CONFIG_ assignments, sorted. Two kernels of one release and build
// whose configs differ lay out struct module and export symbols with other
// CRCs: the loader refuses a module built for the other ("disagrees about
// version of symbol module_layout", kernel/module/version.c), although the
// vermagic matches. The same kernel's /boot/config-<release>, its headers'
// .config and include/config/auto.conf assign the same options: auto.conf
// leaves out the "# … is not set" comments and writes strings unquoted
// (scripts/kconfig/confdata.c, conf_write_autoconf), so values are read
// unquoted and each file gives the same digest. "" when r assigns nothing.
func ConfigDigest(r io.Reader) (string, error) {
	var set []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, value, ok := strings.Cut(line, "="); ok && strings.HasPrefix(name, "CONFIG_") {
			set = append(set, name+"="+unquote(value))
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if len(set) == 0 {
		return "", nil
	}
	slices.Sort(set)
	sum := sha256.Sum256([]byte(strings.Join(set, "\n")))
	return hex.EncodeToString(sum[:8]), nil
}

// unquote reads a .config string value ("a \"b\"") as auto.conf writes it.
func unquote(v string) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	return strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
}
