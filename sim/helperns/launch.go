// Package helperns starts one container of a helper pod inside the
// node-agent image's root filesystem, in a mount namespace of its own: the
// sim's stand-in for a container runtime. The runner (sim/tthost) writes a
// Spec and starts `sim-tools __helper-launch SPEC` with CLONE_NEWNS; Launch
// then builds the container's file system and execs the command. Nothing it
// mounts is visible outside the namespace, which dies with the container's
// last process, so there is nothing to unmount afterwards.
//
// Linux only; needs root (CAP_SYS_ADMIN, CAP_SYS_CHROOT).
package helperns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Subcommand is argv[1] of the launcher binary (sim-tools).
const Subcommand = "__helper-launch"

// Spec is one container's file system and process.
type Spec struct {
	// Layers are the image's unpacked layers, topmost first: the
	// overlay's read-only lower layers (containers never write them).
	Layers []string `json:"layers"`
	// Scratch is a directory of the pod's own; a tmpfs mounted on it inside
	// the namespace holds the overlay's upper layer (the container's
	// writes, gone with the container).
	Scratch string `json:"scratch"`
	// Mounts are made in order after the overlay.
	Mounts []Mount `json:"mounts"`
	// Overrides bind a file over one the image HAS; a target the image
	// lacks is left missing (the container then fails as it would on a
	// node), never created.
	Overrides []Override `json:"overrides"`
	// Private binds files at sim-private paths the image does not have
	// (created in the upper layer, off PATH).
	Private []Override `json:"private,omitempty"`
	Env     []string   `json:"env"`
	Argv    []string   `json:"argv"`
	Dir     string     `json:"dir,omitempty"`
	// TerminationLog is the host-side file a failure to start is written
	// to, as a kubelet reports a container that could not start.
	TerminationLog string `json:"terminationLog"`
}

// Mount kinds.
const (
	KindBind  = "bind"  // Source (a directory or file outside) at Target
	KindTmpfs = "tmpfs" // an empty tmpfs
	KindProc  = "proc"
	KindDev   = "dev" // a tmpfs with the usual character devices bound in
)

// Mount is one mount inside the container.
type Mount struct {
	Kind     string `json:"kind"`
	Source   string `json:"source,omitempty"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Override is a file bound at Target (a path inside the container).
type Override struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Exit codes of a container that did not start.
const (
	ExitSetup    = 128 // the file system could not be built
	ExitNotFound = 127 // the command is not in the image
)

// Main runs the launcher: args are [SPEC]. It returns only on failure.
func Main(args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "%s SPEC\n", Subcommand)
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim helper launcher: %v\n", err)
		return ExitSetup
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		fmt.Fprintf(os.Stderr, "sim helper launcher: %s: %v\n", args[0], err)
		return ExitSetup
	}
	// Opened before the chroot, which hides it (closed on exec).
	var term *os.File
	if s.TerminationLog != "" {
		term, _ = os.OpenFile(s.TerminationLog, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	code, err := launch(&s)
	msg := fmt.Sprintf("sim: container did not start inside the node-agent image: %v", err)
	fmt.Fprintln(os.Stderr, msg)
	if term != nil {
		_, _ = term.WriteString(msg)
	}
	return code
}

func launch(s *Spec) (int, error) {
	if len(s.Argv) == 0 {
		return ExitSetup, errors.New("empty command")
	}
	// Nothing mounted here may reach the sim's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return ExitSetup, fmt.Errorf("make / private: %w", err)
	}
	if err := syscall.Mount("scratch", s.Scratch, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
		return ExitSetup, fmt.Errorf("tmpfs on %s: %w", s.Scratch, err)
	}
	upper, work, root := filepath.Join(s.Scratch, "upper"), filepath.Join(s.Scratch, "work"), filepath.Join(s.Scratch, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return ExitSetup, err
		}
	}
	if len(s.Layers) == 0 {
		return ExitSetup, errors.New("an image with no layers")
	}
	for _, l := range s.Layers {
		if strings.ContainsAny(l, ":,") {
			return ExitSetup, fmt.Errorf("layer path %q: overlay options cannot hold ':' or ','", l)
		}
	}
	opts := "lowerdir=" + strings.Join(s.Layers, ":") + ",upperdir=" + upper + ",workdir=" + work
	if err := syscall.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return ExitSetup, fmt.Errorf("overlay of the image's layers %v: %w", s.Layers, err)
	}
	for _, o := range s.Overrides {
		if err := override(root, o, false); err != nil {
			return ExitSetup, err
		}
	}
	for _, o := range s.Private {
		if err := override(root, o, true); err != nil {
			return ExitSetup, err
		}
	}
	for _, m := range s.Mounts {
		if err := mount(root, m); err != nil {
			return ExitSetup, fmt.Errorf("mount %s at %s: %w", m.Kind, m.Target, err)
		}
	}
	if err := syscall.Chroot(root); err != nil {
		return ExitSetup, fmt.Errorf("chroot: %w", err)
	}
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return ExitSetup, fmt.Errorf("working directory %s: %w", dir, err)
	}
	prog, err := lookPath(s.Argv[0], s.Env)
	if err != nil {
		return ExitNotFound, err
	}
	err = syscall.Exec(prog, s.Argv, s.Env)
	return ExitSetup, fmt.Errorf("exec %s: %w", prog, err)
}

// override binds o.Source over o.Target inside root. A symlink there (kmod's
// tools all link to kmod) is replaced, in the upper layer, by a file of its
// own, so only that one name is overridden.
func override(root string, o Override, create bool) error {
	t := filepath.Join(root, o.Target)
	fi, err := os.Lstat(t)
	switch {
	case errors.Is(err, fs.ErrNotExist) && create:
		if err := os.MkdirAll(filepath.Dir(t), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(t, nil, 0o755); err != nil {
			return err
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil // the image lacks it: so does the container
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0 || !fi.Mode().IsRegular():
		if err := os.Remove(t); err != nil {
			return fmt.Errorf("replace %s: %w", o.Target, err)
		}
		if err := os.WriteFile(t, nil, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount(o.Source, t, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", o.Source, o.Target, err)
	}
	return nil
}

func mount(root string, m Mount) error {
	t := filepath.Join(root, m.Target)
	switch m.Kind {
	case KindBind:
		fi, err := os.Stat(m.Source)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			err = os.MkdirAll(t, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(t), 0o755); err == nil {
			if _, serr := os.Lstat(t); serr != nil {
				err = os.WriteFile(t, nil, 0o644)
			}
		}
		if err != nil {
			return err
		}
		if err := syscall.Mount(m.Source, t, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return err
		}
		if m.ReadOnly {
			return syscall.Mount("", t, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_REC, "")
		}
		return nil
	case KindTmpfs:
		if err := os.MkdirAll(t, 0o755); err != nil {
			return err
		}
		return syscall.Mount("tmpfs", t, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777")
	case KindProc:
		if err := os.MkdirAll(t, 0o555); err != nil {
			return err
		}
		return syscall.Mount("proc", t, "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	case KindDev:
		if err := os.MkdirAll(t, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount("dev", t, "tmpfs", syscall.MS_NOSUID, "mode=0755"); err != nil {
			return err
		}
		for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
			p := filepath.Join(t, d)
			if err := os.WriteFile(p, nil, 0o666); err != nil {
				return err
			}
			if err := syscall.Mount("/dev/"+d, p, "", syscall.MS_BIND, ""); err != nil {
				return err
			}
		}
		for _, l := range [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
			{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}} {
			if err := os.Symlink(l[0], filepath.Join(t, l[1])); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown mount kind %q", m.Kind)
}

// lookPath finds argv0 on the container's PATH (after the chroot).
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		if err := executable(argv0); err != nil {
			return "", fmt.Errorf("%s: %w", argv0, err)
		}
		return argv0, nil
	}
	path := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, argv0)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the image (PATH=%s)", argv0, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}
