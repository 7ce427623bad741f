package tthost

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// maxOutput caps a container's captured stdout+stderr.
const maxOutput = 1 << 20

// proc is one container process of a helper pod.
type proc struct {
	argv    []string
	env     []string
	dir     string // working directory
	outPath string // stdout+stderr
	// newNS starts it in a mount namespace of its own (the helper launcher).
	newNS bool
	// term, when closed, sends SIGTERM to the process itself (not its
	// group): what a container runtime sends a container's main process.
	term <-chan struct{}
}

// exitKilled is the exit code of a process ended by SIGKILL (128+9), as
// container runtimes report it.
const exitKilled = 137

// run executes p and returns its exit code. Cancelling ctx kills the whole
// process group, so tools the agent started die with it. err is set only
// when the process could not start.
func (p proc) run(ctx context.Context) (code int, err error) {
	out, err := os.Create(p.outPath)
	if err != nil {
		return -1, err
	}
	defer out.Close()
	w := &cappedWriter{f: out, left: maxOutput}
	cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = p.env, p.dir, w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.newNS {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	exited := make(chan struct{})
	if p.term != nil {
		go func() {
			select {
			case <-p.term:
				_ = cmd.Process.Signal(syscall.SIGTERM)
			case <-exited:
			}
		}()
	}
	err = cmd.Wait()
	close(exited)
	// The agent may have left tools behind in its group; a kubelet tears
	// the whole container down.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), nil
	default: // killed by a signal, or I/O wait cut short
		return exitKilled, nil
	}
}

type cappedWriter struct {
	f    *os.File
	left int
}

func (w *cappedWriter) Write(b []byte) (int, error) {
	n := len(b)
	if w.left > 0 {
		k := min(n, w.left)
		if _, err := w.f.Write(b[:k]); err != nil {
			return 0, err
		}
		w.left -= k
	}
	return n, nil
}
