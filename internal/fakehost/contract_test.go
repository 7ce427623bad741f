package fakehost

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost/realhost"
)

// Contract tests: each fake tool and the real one (git of this machine,
// kbuild and kmod of the real-host rootfs) get the same inputs, and what
// the node agent would observe — exit code, the output it parses, the
// files it then reads — must match. They skip, saying why, without root
// or without the real-host rootfs (hack/realhost-rootfs.sh).

// world is one host root with its tools: the fake one or the real one.
type world struct {
	name  string
	root  string
	tools string // real: PATH dir; fake: ""
}

type outcome struct {
	code   int
	stdout string
	output string // stdout and stderr
}

// run gives argv to the world's tool; HOST in argv stands for the root.
func (w world) run(t *testing.T, argv ...string) outcome {
	t.Helper()
	argv = append([]string(nil), argv...)
	for i, a := range argv {
		argv[i] = strings.ReplaceAll(a, "HOST", w.root)
	}
	if w.tools == "" {
		var out, errb bytes.Buffer
		code := run(argv, w.root, &out, &errb)
		return outcome{code: code, stdout: out.String(), output: out.String() + errb.String()}
	}
	cmd := exec.Command(filepath.Join(w.tools, argv[0]), argv[1:]...)
	// As the agent runs tools: programs inside the host root get its PATH.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "GIT_TERMINAL_PROMPT=0",
		"HOME=" + t.TempDir(), realhost.HostEnv(w.root)}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v", w.name, argv, err)
		}
		code = ee.ExitCode()
	}
	return outcome{code: code, stdout: out.String(), output: out.String() + errb.String()}
}

// worlds returns a fake host and an overlay of the real-host rootfs with
// the same kernel, Debian's split headers and gcc-12.
func worlds(t *testing.T) (fake, real world, kver string) {
	t.Helper()
	rootfs := realhost.Rootfs(t)
	kver = realhost.KernelRelease(t, rootfs)
	fakeRoot := t.TempDir()
	if err := Create(fakeRoot, Spec{Kernel: kver, LoadedKMD: "", KernelHeaders: true, DebianHeaders: true}); err != nil {
		t.Fatal(err)
	}
	return world{"fake", fakeRoot, ""}, world{"real", realhost.Host(t, rootfs), realhost.Tools(t, rootfs)}, kver
}

func both(fake, real world, f func(w world)) { f(fake); f(real) }

func sameCode(t *testing.T, what string, fo, ro outcome) {
	t.Helper()
	if fo.code != ro.code {
		t.Errorf("%s: fake exits %d, real exits %d\nfake: %s\nreal: %s", what, fo.code, ro.code, fo.output, ro.output)
	}
}

var sourceVersionRE = regexp.MustCompile(`MODULE_VERSION\("([^"]+)"\)`)

// sourceVersion is the MODULE_VERSION of the cloned tree, as make will see it.
func sourceVersion(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.c"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := sourceVersionRE.FindSubmatch(b); m != nil {
			return string(m[1])
		}
	}
	return ""
}

// The kmd path, tool by tool: git clone, chroot make, modinfo, depmod,
// modprobe --show-depends.
func TestContractKMDTools(t *testing.T) {
	fake, real, kver := worlds(t)
	url := realhost.ModuleRepo(t, "2.8.0", "2.9.0")
	src := "/var/cache/tt-kmd/build/tt-kmd"

	// git clone of an existing tag: exit 0, the tag's source.
	var fo, ro outcome
	fo = fake.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-2.9.0", url, "HOST"+src)
	ro = real.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-2.9.0", url, "HOST"+src)
	sameCode(t, "git clone ttkmd-2.9.0", fo, ro)
	both(fake, real, func(w world) {
		if v := sourceVersion(t, w.root+src); v != "2.9.0" {
			t.Errorf("%s git: cloned MODULE_VERSION %q, want 2.9.0", w.name, v)
		}
	})
	// rev-parse HEAD of the clone: exit 0 and one full commit ID, which
	// the agent records and checks against a pin.
	fo = fake.run(t, "git", "-C", "HOST"+src, "rev-parse", "HEAD")
	ro = real.run(t, "git", "-C", "HOST"+src, "rev-parse", "HEAD")
	sameCode(t, "git rev-parse HEAD", fo, ro)
	for _, o := range []outcome{fo, ro} {
		if !regexp.MustCompile(`^[0-9a-f]{40}\n$`).MatchString(o.stdout) {
			t.Errorf("git rev-parse HEAD printed %q, want one commit ID", o.stdout)
		}
	}
	// ls-remote of the tag (what the probe runs): exit 0 and one line naming
	// the commit the clone checked out; of a missing tag, exit 0 and nothing.
	heads := map[string]string{"fake": fo.stdout, "real": ro.stdout}
	lsRemote := []string{"git", "ls-remote", url, "refs/tags/ttkmd-2.9.0", "refs/tags/ttkmd-2.9.0^{}"}
	fo, ro = fake.run(t, lsRemote...), real.run(t, lsRemote...)
	sameCode(t, "git ls-remote of a tag", fo, ro)
	for name, o := range map[string]outcome{"fake": fo, "real": ro} {
		if want := strings.TrimSpace(heads[name]) + "\trefs/tags/ttkmd-2.9.0\n"; o.stdout != want {
			t.Errorf("%s git ls-remote printed %q, want %q", name, o.stdout, want)
		}
	}
	fo, ro = fake.run(t, "git", "ls-remote", url, "refs/tags/ttkmd-99.0.0"), real.run(t, "git", "ls-remote", url, "refs/tags/ttkmd-99.0.0")
	sameCode(t, "git ls-remote of a missing tag", fo, ro)
	if fo.code != 0 || fo.stdout != "" || ro.stdout != "" {
		t.Errorf("git ls-remote of a missing tag: fake %d %q, real %d %q", fo.code, fo.stdout, ro.code, ro.stdout)
	}
	// Outside a clone: 128.
	fo = fake.run(t, "git", "-C", "HOST/tmp", "rev-parse", "HEAD")
	ro = real.run(t, "git", "-C", "HOST/tmp", "rev-parse", "HEAD")
	sameCode(t, "git rev-parse HEAD outside a repository", fo, ro)
	// git clone into the non-empty directory: 128, nothing changed.
	fo = fake.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-2.8.0", url, "HOST"+src)
	ro = real.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-2.8.0", url, "HOST"+src)
	sameCode(t, "git clone into a non-empty dir", fo, ro)
	if ro.code != 128 || !strings.Contains(fo.output, "already exists") || !strings.Contains(ro.output, "already exists") {
		t.Errorf("git clone into a non-empty dir: fake %d %q, real %d %q", fo.code, fo.output, ro.code, ro.output)
	}
	// A tag the remote lacks: 128 and "not found".
	fo = fake.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-99.0.0", url, "HOST/tmp/missing")
	ro = real.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-99.0.0", url, "HOST/tmp/missing")
	sameCode(t, "git clone of a missing tag", fo, ro)
	if !strings.Contains(fo.output, "not found") || !strings.Contains(ro.output, "not found") {
		t.Errorf("git clone of a missing tag: fake %q, real %q", fo.output, ro.output)
	}

	// The agent's kbuild command inside the host root.
	build := []string{"chroot", "HOST", "make", "-j2", "-C", "/lib/modules/" + kver + "/build", "M=" + src, "modules"}
	fo, ro = fake.run(t, build...), real.run(t, build...)
	sameCode(t, "chroot make modules", fo, ro)
	ko := src + "/tenstorrent.ko"
	both(fake, real, func(w world) {
		if _, err := os.Stat(w.root + ko); err != nil {
			t.Errorf("%s make: %v", w.name, err)
		}
	})

	// modinfo: the agent reads the first field of version and vermagic.
	for _, f := range []struct{ field, want string }{{"version", "2.9.0"}, {"vermagic", kver}} {
		fo, ro = fake.run(t, "modinfo", "-F", f.field, "HOST"+ko), real.run(t, "modinfo", "-F", f.field, "HOST"+ko)
		sameCode(t, "modinfo -F "+f.field, fo, ro)
		fv, rv := strings.Fields(fo.stdout), strings.Fields(ro.stdout)
		if len(fv) == 0 || len(rv) == 0 || fv[0] != f.want || rv[0] != f.want {
			t.Errorf("modinfo -F %s: fake %q, real %q, want first field %q", f.field, fo.stdout, ro.stdout, f.want)
		}
		if f.field == "vermagic" && fo.stdout != ro.stdout {
			t.Errorf("modinfo -F vermagic: fake %q, real %q", fo.stdout, ro.stdout)
		}
	}
	fo, ro = fake.run(t, "modinfo", "-F", "version", "HOST/nonexistent.ko"), real.run(t, "modinfo", "-F", "version", "HOST/nonexistent.ko")
	sameCode(t, "modinfo of a missing file", fo, ro)
	// A module file by a name not ending in .ko is looked up as a module
	// name, and not found (the agent once checked a shared module so).
	both(fake, real, func(w world) {
		b, err := os.ReadFile(w.root + ko)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(w.root+ko+".shared", b, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	fo, ro = fake.run(t, "modinfo", "-F", "version", "HOST"+ko+".shared"), real.run(t, "modinfo", "-F", "version", "HOST"+ko+".shared")
	sameCode(t, "modinfo of a file not named .ko", fo, ro)
	if ro.code == 0 || !strings.Contains(fo.output, "not found") || !strings.Contains(ro.output, "not found") {
		t.Errorf("modinfo of a file not named .ko: fake %d %q, real %d %q", fo.code, fo.output, ro.code, ro.output)
	}

	// Before depmod nothing resolves.
	show := []string{"modprobe", "-d", "HOST", "-S", kver, "--show-depends", "tenstorrent"}
	fo, ro = fake.run(t, show...), real.run(t, show...)
	sameCode(t, "modprobe --show-depends before depmod", fo, ro)
	if ro.code == 0 {
		t.Errorf("real modprobe resolved an unindexed module: %s", ro.output)
	}

	// The persisted copy in updates/ wins over a DKMS-style copy in extra/.
	both(fake, real, func(w world) {
		b, err := os.ReadFile(w.root + ko)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"updates", "extra"} {
			dst := filepath.Join(w.root, "lib/modules", kver, d, "tenstorrent.ko")
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	dep := []string{"depmod", "-a", "-b", "HOST", kver}
	fo, ro = fake.run(t, dep...), real.run(t, dep...)
	sameCode(t, "depmod -a -b", fo, ro)
	both(fake, real, func(w world) {
		b, err := os.ReadFile(filepath.Join(w.root, "lib/modules", kver, "modules.dep"))
		if err != nil || !regexp.MustCompile(`(?m)^updates/tenstorrent\.ko:`).Match(b) {
			t.Errorf("%s depmod: modules.dep %q (%v), want updates/tenstorrent.ko first", w.name, b, err)
		}
	})
	fo, ro = fake.run(t, show...), real.run(t, show...)
	sameCode(t, "modprobe --show-depends", fo, ro)
	want := "/lib/modules/" + kver + "/updates/tenstorrent.ko"
	both(fake, real, func(w world) {
		o := fo
		if w.name == "real" {
			o = ro
		}
		if strings.TrimSpace(o.stdout) != "insmod "+w.root+want {
			t.Errorf("%s modprobe --show-depends: %q, want %q", w.name, o.stdout, "insmod "+w.root+want)
		}
	})
}

// cloneBoth clones tag ttkmd-2.8.0 of url to src on both hosts.
func cloneBoth(t *testing.T, fake, real world, url, src string) {
	t.Helper()
	both(fake, real, func(w world) {
		if o := w.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-2.8.0", url, "HOST"+src); o.code != 0 {
			t.Fatalf("%s git clone: %s", w.name, o.output)
		}
	})
}

// kbuild against Debian's headers needs the compiler they name (gcc-12),
// and fails without the headers.
func TestContractKbuildNeedsTheHeadersCompilerAndTree(t *testing.T) {
	fake, real, kver := worlds(t)
	url := realhost.ModuleRepo(t, "2.8.0")
	src := "/var/cache/tt-kmd/build/tt-kmd"
	cloneBoth(t, fake, real, url, src)
	build := []string{"chroot", "HOST", "make", "-j2", "-C", "/lib/modules/" + kver + "/build", "M=" + src, "modules"}
	both(fake, real, func(w world) {
		if err := os.Remove(filepath.Join(w.root, "usr/bin/gcc-12")); err != nil {
			t.Fatal(err)
		}
	})
	fo, ro := fake.run(t, build...), real.run(t, build...)
	sameCode(t, "make without gcc-12", fo, ro)
	if ro.code == 0 || !strings.Contains(fo.output, "gcc-12: not found") || !strings.Contains(ro.output, "gcc-12: not found") {
		t.Errorf("make without gcc-12: fake %d %q\nreal %d %q", fo.code, fo.output, ro.code, ro.output)
	}
	both(fake, real, func(w world) {
		if err := os.Remove(filepath.Join(w.root, "lib/modules", kver, "build")); err != nil {
			t.Fatal(err)
		}
	})
	fo, ro = fake.run(t, build...), real.run(t, build...)
	sameCode(t, "make without the build tree", fo, ro)
}

// Headers that name their compiler only in the kernel config (Ubuntu's;
// here Debian's without .kernelvariables): kbuild runs its Makefile's
// "gcc", whatever the host has under that name, unless CC= names the
// kernel's own; the same compiler under another name builds.
func TestContractKbuildRunsTheCompilerCCNames(t *testing.T) {
	fake, real, kver := worlds(t)
	url := realhost.ModuleRepo(t, "2.8.0")
	src := "/var/cache/tt-kmd/build/tt-kmd"
	cloneBoth(t, fake, real, url, src)
	both(fake, real, func(w world) {
		for _, f := range []string{"usr/src/linux-headers-" + kver + "/.kernelvariables", "usr/bin/gcc"} {
			if err := os.Remove(filepath.Join(w.root, f)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	})
	build := func(extra ...string) []string {
		cmd := []string{"chroot", "HOST", "make", "-j2", "-C", "/lib/modules/" + kver + "/build", "M=" + src}
		return append(append(cmd, extra...), "modules")
	}
	fo, ro := fake.run(t, build()...), real.run(t, build()...)
	sameCode(t, "make with no gcc and no CC=", fo, ro)
	if ro.code == 0 || !strings.Contains(fo.output, "gcc: not found") || !strings.Contains(ro.output, "gcc: not found") {
		t.Errorf("make with no gcc: fake %d %q\nreal %d %q", fo.code, fo.output, ro.code, ro.output)
	}
	fo, ro = fake.run(t, build("CC=gcc-12")...), real.run(t, build("CC=gcc-12")...)
	sameCode(t, "make CC=gcc-12", fo, ro)
	if ro.code != 0 {
		t.Errorf("make CC=gcc-12: real %q", ro.output)
	}
	both(fake, real, func(w world) {
		if err := os.Symlink("gcc-12", filepath.Join(w.root, "usr/bin/gcc")); err != nil {
			t.Fatal(err)
		}
	})
	fo, ro = fake.run(t, build()...), real.run(t, build()...)
	sameCode(t, "make with gcc linking to gcc-12", fo, ro)
	if ro.code != 0 {
		t.Errorf("make with gcc linking to gcc-12: real %q", ro.output)
	}
}

// depmod and modprobe run inside the host root (chroot) read the host's own
// configuration: a host whose depmod.d searches extra/ before updates/ (a
// DKMS-style layout) boots the extra/ copy, until the agent's override
// names updates/ for tenstorrent.
func TestContractDepmodReadsTheHostsConfiguration(t *testing.T) {
	fake, real, kver := worlds(t)
	url := realhost.ModuleRepo(t, "2.8.0")
	src := "/var/cache/tt-kmd/build/tt-kmd"
	build := []string{"chroot", "HOST", "make", "-j2", "-C", "/lib/modules/" + kver + "/build", "M=" + src, "modules"}
	both(fake, real, func(w world) {
		if o := w.run(t, "git", "clone", "--depth", "1", "--branch", "ttkmd-2.8.0", url, "HOST"+src); o.code != 0 {
			t.Fatalf("%s git clone: %s", w.name, o.output)
		}
		if o := w.run(t, build...); o.code != 0 {
			t.Fatalf("%s build: %s", w.name, o.output)
		}
		b, err := os.ReadFile(w.root + src + "/tenstorrent.ko")
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"updates", "extra"} {
			dst := filepath.Join(w.root, "lib/modules", kver, d, "tenstorrent.ko")
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		conf := filepath.Join(w.root, "etc/depmod.d/dkms-first.conf")
		if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conf, []byte("# the host's own order\nsearch extra updates built-in\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	dep := []string{"chroot", "HOST", "depmod", "-a", kver}
	show := []string{"chroot", "HOST", "modprobe", "-S", kver, "--show-depends", "tenstorrent"}
	resolves := func(what, dir string) {
		t.Helper()
		fo, ro := fake.run(t, dep...), real.run(t, dep...)
		sameCode(t, what+": chroot depmod -a", fo, ro)
		fo, ro = fake.run(t, show...), real.run(t, show...)
		sameCode(t, what+": chroot modprobe --show-depends", fo, ro)
		want := "insmod /lib/modules/" + kver + "/" + dir + "/tenstorrent.ko"
		if strings.TrimSpace(fo.stdout) != want || strings.TrimSpace(ro.stdout) != want {
			t.Errorf("%s: fake %q, real %q, want %q", what, fo.output, ro.output, want)
		}
	}
	resolves("host searches extra first", "extra")
	both(fake, real, func(w world) {
		conf := filepath.Join(w.root, "etc/depmod.d/tenstorrent-rollbook.conf")
		if err := os.WriteFile(conf, []byte("override tenstorrent * updates\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	resolves("with the override for tenstorrent", "updates")
}

// The host's module options (modprobe.d), as `modprobe -c` inside its root
// prints them: what the agent passes to insmod, so the driver it loads now
// runs as the one the host boots.
func TestContractModprobeShowsTheHostsOptions(t *testing.T) {
	fake, real, _ := worlds(t)
	options := func(w world, o outcome) []string {
		var out []string
		for _, l := range strings.Split(o.stdout, "\n") {
			if strings.HasPrefix(l, "options tenstorrent ") {
				out = append(out, l)
			}
		}
		return out
	}
	cfg := []string{"chroot", "HOST", "modprobe", "-c"}
	fo, ro := fake.run(t, cfg...), real.run(t, cfg...)
	sameCode(t, "modprobe -c without options", fo, ro)
	if f, r := options(fake, fo), options(real, ro); len(f) != 0 || len(r) != 0 {
		t.Errorf("modprobe -c without options: fake %q, real %q", f, r)
	}
	both(fake, real, func(w world) {
		dir := filepath.Join(w.root, "etc/modprobe.d")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		conf := "# the admin's\noptions tenstorrent max_devices=32\noptions tenstorrent  reset_limit=5\noptions other x=1\n"
		if err := os.WriteFile(filepath.Join(dir, "tenstorrent.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	fo, ro = fake.run(t, cfg...), real.run(t, cfg...)
	sameCode(t, "modprobe -c", fo, ro)
	f, r := options(fake, fo), options(real, ro)
	if strings.Join(f, "|") != strings.Join(r, "|") || len(r) == 0 {
		t.Errorf("modprobe -c: fake %q, real %q", f, r)
	}
	t.Logf("real: %q", r)
}

// The fake build's module is an ELF object the real modinfo reads as the
// fake one does: every field the agent and the CLI read (version, name,
// vermagic), signed or not.
func TestContractFakeModuleReadsAsAModule(t *testing.T) {
	fake, real, kver := worlds(t)
	ko := KernelObject("2.9.0", kver)
	both(fake, real, func(w world) { put(t, w.root+"/m/tenstorrent.ko", ko) })
	for _, field := range []string{"version", "name", "vermagic", "srcversion", "license"} {
		fo := fake.run(t, "modinfo", "-F", field, "HOST/m/tenstorrent.ko")
		ro := real.run(t, "modinfo", "-F", field, "HOST/m/tenstorrent.ko")
		sameCode(t, "modinfo -F "+field, fo, ro)
		if ro.code != 0 || ro.stdout == "\n" || (field != "srcversion" && fo.stdout != ro.stdout) {
			t.Errorf("modinfo -F %s: fake %q, real %q (exit %d: %s)", field, fo.stdout, ro.stdout, ro.code, ro.output)
		}
	}
}
