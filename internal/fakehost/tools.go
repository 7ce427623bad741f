package fakehost

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// RootEnv names the environment variable that points the fake tools at
// their host root. They refuse to run without it, so a fake tool reached by
// accident can never touch the real machine.
const RootEnv = "FAKEHOST_ROOT"

// Tools are the names Main answers to.
var Tools = []string{"rmmod", "insmod", "modinfo", "modprobe", "depmod", "make", "git", "tt-smi", "tt-flash", "kill", "chroot"}

// IsTool reports whether name (a basename) is one of the fake tools, for
// multi-call binaries that dispatch on os.Args[0].
func IsTool(name string) bool { return slices.Contains(Tools, name) }

// InstallTools creates one symlink per tool in dir, each pointing at exe (a
// multi-call binary that calls Main when invoked under a tool name).
func InstallTools(dir, exe string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, t := range Tools {
		link := filepath.Join(dir, t)
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Symlink(exe, link); err != nil {
			return err
		}
	}
	return nil
}

// Main runs the fake tool named by filepath.Base(args[0]) against the root
// in $FAKEHOST_ROOT and returns its exit code.
func Main(args []string) int {
	return run(args, os.Getenv(RootEnv), os.Stdout, os.Stderr)
}

type toolFunc func(t *tool) int

var toolFuncs = map[string]toolFunc{
	"rmmod":    rmmod,
	"insmod":   insmod,
	"modinfo":  modinfo,
	"modprobe": modprobe,
	"depmod":   depmod,
	"make":     makeModules,
	"git":      git,
	"tt-smi":   ttSMI,
	"tt-flash": ttFlash,
	"kill":     kill,
	// Reached only as the headers' scripts/sign-file inside the chroot.
	"sign-file": signFile,
}

// chroot dispatches to the other tools, so it joins the table at init.
func init() { toolFuncs["chroot"] = chroot }

// tool is one invocation of a fake tool.
type tool struct {
	name   string
	args   []string
	root   string
	stdout io.Writer
	stderr io.Writer
	// chrooted: the tool runs inside the host root, so absolute paths are
	// the host's (chroot ROOT tool …).
	chrooted bool
	// binary is the host's tt-smi file the fake chroot runs, nil for the
	// helper image's own tt-smi.
	binary *smiBinary
}

// smiBinary is a fake tt-smi file: its version and the glibc it needs.
type smiBinary struct{ path, version, glibc string }

// path is where p, as the tool was given it, lives on disk. Inside the
// chroot, symlinks resolve as the host sees them (absolute targets are the
// host's paths).
func (t *tool) path(p string) (string, error) {
	if !t.chrooted {
		return t.inRoot(p)
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %s is relative inside the chroot", p)
	}
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		next := filepath.Join(cur, rest[0])
		rest = rest[1:]
		target, err := os.Readlink(filepath.Join(t.root, next))
		if err != nil { // not a symlink (or missing): keep walking
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("too many levels of symbolic links in %s", p)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(cur, target)
		}
		rest = append(strings.Split(strings.TrimPrefix(filepath.Clean(target), "/"), "/"), rest...)
		cur = "/"
	}
	return filepath.Join(t.root, cur), nil
}

// chroot NEWROOT TOOL ARGS…: runs a fake tool inside the host root, as the
// host's own binary (which must exist there) would run.
func chroot(t *tool) int {
	if len(t.args) < 2 {
		return t.errorf(125, "missing operand")
	}
	if filepath.Clean(t.args[0]) != t.root {
		return t.errorf(125, "fake chroot only enters its host root %s, not %s", t.root, t.args[0])
	}
	name := t.args[1]
	if filepath.IsAbs(name) {
		// A tt-smi binary under any name runs as tt-smi, with the host's libc.
		if v, need := ttsmiBinary(filepath.Join(t.root, name)); v != "" {
			logCall(t.root, append([]string{filepath.Base(name)}, t.args[2:]...))
			return ttSMI(&tool{name: filepath.Base(name), args: t.args[2:], root: t.root, stdout: t.stdout, stderr: t.stderr,
				chrooted: true, binary: &smiBinary{path: name, version: v, glibc: need}})
		}
	}
	fn, ok := toolFuncs[filepath.Base(name)]
	if !ok || name == "chroot" {
		return t.errorf(127, "failed to run command '%s': No such file or directory", name)
	}
	if !filepath.IsAbs(name) {
		name = "/usr/bin/" + name
	}
	if p, err := (&tool{root: t.root, chrooted: true}).path(name); filepath.Base(name) == "sign-file" && (err != nil || !exists(p)) {
		return t.errorf(127, "failed to run command '%s': No such file or directory", t.args[1])
	}
	if _, err := os.Stat(filepath.Join(t.root, name)); err != nil && filepath.Base(name) == "make" {
		return t.errorf(127, "failed to run command '%s': No such file or directory", t.args[1])
	}
	logCall(t.root, append([]string{filepath.Base(name)}, t.args[2:]...))
	return fn(&tool{name: filepath.Base(name), args: t.args[2:], root: t.root, stdout: t.stdout, stderr: t.stderr, chrooted: true})
}

func (t *tool) errorf(code int, format string, a ...any) int {
	fmt.Fprintf(t.stderr, t.name+": "+format+"\n", a...)
	return code
}

// inRoot rejects paths outside the fake root, so fake tools never write to
// the machine they run on.
func (t *tool) inRoot(p string) (string, error) {
	if !filepath.IsAbs(p) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		p = abs
	}
	p = filepath.Clean(p)
	if p != t.root && !strings.HasPrefix(p, t.root+string(filepath.Separator)) {
		return "", fmt.Errorf("path %s is outside the fake host root %s", p, t.root)
	}
	return p, nil
}

func run(args []string, root string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "fakehost: no argv[0]")
		return 2
	}
	name := filepath.Base(args[0])
	fn, ok := toolFuncs[name]
	if !ok {
		fmt.Fprintf(stderr, "fakehost: unknown tool %q\n", name)
		return 127
	}
	if err := checkRoot(root); err != nil {
		fmt.Fprintf(stderr, "%s (fakehost): %v\n", name, err)
		return 126
	}
	root = filepath.Clean(root)
	if _, err := os.Stat(statePath(root)); err != nil {
		fmt.Fprintf(stderr, "%s (fakehost): %s is not a fake host root (no %s)\n", name, root, statePath(root))
		return 126
	}
	logCall(root, append([]string{name}, args[1:]...))
	return fn(&tool{name: name, args: args[1:], root: root, stdout: stdout, stderr: stderr})
}

func checkRoot(root string) error {
	if root == "" {
		return fmt.Errorf("%s is not set", RootEnv)
	}
	if !filepath.IsAbs(root) {
		return fmt.Errorf("fake host root %q must be absolute", root)
	}
	if filepath.Clean(root) == "/" {
		return fmt.Errorf("refusing to use / as a fake host root")
	}
	return nil
}

func callLogPath(root string) string { return filepath.Join(root, stateDir, "calls.log") }

func logCall(root string, argv []string) { _ = appendLine(callLogPath(root), argv) }

// Calls returns the argv (tool name first) of every fake tool run against
// root, in order.
func Calls(root string) ([][]string, error) { return readLines[[]string](callLogPath(root), 0) }
