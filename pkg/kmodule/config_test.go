package kmodule_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost/realhost"
	"github.com/rollbook/rollbook/pkg/kmodule"
)

const dotConfig = `#
# Automatically generated file; DO NOT EDIT.
# Linux/x86 6.1.0 Kernel Configuration
#
CONFIG_CC_VERSION_TEXT="gcc-12 (Debian 12.2.0-14) 12.2.0"
CONFIG_MODULES=y
CONFIG_MODVERSIONS=y
# CONFIG_MODULE_FORCE_LOAD is not set
CONFIG_MODULE_SIG_HASH="sha256"
CONFIG_NR_CPUS=8192
`

func digest(t *testing.T, s string) string {
	t.Helper()
	d, err := kmodule.ConfigDigest(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// One config reads the same from /boot's .config and from auto.conf
// (its assignments in another order, without comments); any assignment
// changed, added or removed names another config.
func TestConfigDigest(t *testing.T) {
	want := digest(t, dotConfig)
	if len(want) != 16 {
		t.Fatalf("digest %q: want 16 hex digits", want)
	}
	var assigned []string
	for _, l := range strings.Split(dotConfig, "\n") {
		if strings.HasPrefix(l, "CONFIG_") {
			assigned = append(assigned, l)
		}
	}
	// auto.conf: another order, no comments, strings unquoted.
	unquoted := func(l string) string { return strings.ReplaceAll(l, `"`, "") }
	autoConf := strings.Join([]string{assigned[4], unquoted(assigned[0]), unquoted(assigned[3]), assigned[2], assigned[1]}, "\n") + "\n"
	if got := digest(t, autoConf); got != want {
		t.Errorf("auto.conf's order and no comments: %s, want %s", got, want)
	}
	for i, l := range assigned {
		name, value, _ := strings.Cut(l, "=")
		for what, repl := range map[string]string{
			"changed": name + "=" + value + "0",
			"removed": "",
			"unset":   "# " + name + " is not set",
			"renamed": name + "X=" + value,
		} {
			if got := digest(t, strings.Replace(dotConfig, l+"\n", repl+"\n", 1)); got == want {
				t.Errorf("assignment %d (%s) %s: the digest stayed %s", i, name, what, got)
			}
		}
	}
	if got := digest(t, dotConfig+"CONFIG_RANDSTRUCT=y\n"); got == want {
		t.Error("an assignment added: the digest stayed the same")
	}
	if got := digest(t, "# nothing set\n"); got != "" {
		t.Errorf("a config that assigns nothing: %q, want \"\"", got)
	}
}

// Debian's real headers: .config and include/config/auto.conf, the two
// files a host without /boot/config-<release> is read from, give one
// digest.
func TestContractConfigDigestOfRealHeaders(t *testing.T) {
	rootfs := realhost.Rootfs(t)
	kver := realhost.KernelRelease(t, rootfs)
	// The build link is absolute, as Debian's: resolved in the rootfs.
	build, err := os.Readlink(filepath.Join(rootfs, "lib/modules", kver, "build"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(rootfs, build, name))
		if err != nil {
			t.Fatal(err)
		}
		return digest(t, string(b))
	}
	config, auto := read(".config"), read("include/config/auto.conf")
	if config == "" || config != auto {
		t.Errorf("%s's .config reads %q, its auto.conf %q: want one digest", build, config, auto)
	}
}
