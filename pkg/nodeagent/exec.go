package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// hostPATH is the PATH programs run inside the host root get.
const hostPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// toolOutputLimit bounds what is kept of each stream of a tool run.
const toolOutputLimit = 64 << 10

// toolRun is the outcome of one external command.
type toolRun struct {
	argv     []string
	stdout   string // last toolOutputLimit bytes
	stderr   string
	exitCode int   // -1 when it did not run or was killed
	err      error // nil only when the tool exited 0
	// seen reports which of the watched strings appeared anywhere in the
	// output, even in a part since dropped from the tail.
	seen map[string]bool
}

func (t toolRun) combined() string {
	switch {
	case t.stderr == "":
		return t.stdout
	case t.stdout == "":
		return t.stderr
	}
	return t.stdout + "\n--- stderr ---\n" + t.stderr
}

func (t toolRun) notFound() bool { return errors.Is(t.err, exec.ErrNotFound) }

// run is the one way the agent executes a program: only what the
// requirements table declares for the operation's task runs, so the table
// (and the image checked against it) cannot miss a tool the agent uses.
func (x *execution) run(ctx context.Context, argv []string, watch ...string) toolRun {
	if err := checkExec(x.res.Op, x.agent.Root, argv); err != nil {
		x.agent.logf("refused: %v", err)
		return toolRun{argv: argv, exitCode: -1, err: err}
	}
	return x.agent.execTool(ctx, argv, watch...)
}

// execTool executes argv (never through a shell) with the agent's
// environment plus a.Env, streaming output to the log. watch lists strings
// whose presence in the output matters regardless of the exit code.
func (a *Agent) execTool(ctx context.Context, argv []string, watch ...string) toolRun {
	res := toolRun{argv: argv, exitCode: -1}
	a.logf("exec %s", strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), a.Env...), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	if argv[0] == "chroot" {
		// chroot looks its program up on PATH inside the host root: the
		// host's directories, not the helper image's (a later entry wins).
		cmd.Env = append(cmd.Env, "PATH="+hostPATH)
	}
	cmd.WaitDelay = 5 * time.Second // a killed tool's children may hold the pipes
	stdout, stderr := newCapture(watch), newCapture(watch)
	log := io.Discard
	if a.Log != nil {
		log = a.Log
	}
	cmd.Stdout = io.MultiWriter(stdout, log)
	cmd.Stderr = io.MultiWriter(stderr, log)
	err := cmd.Run()
	res.stdout, res.stderr = stdout.String(), stderr.String()
	res.seen = map[string]bool{}
	for _, w := range watch {
		res.seen[w] = stdout.seen[w] || stderr.seen[w]
	}
	if cmd.ProcessState != nil {
		res.exitCode = cmd.ProcessState.ExitCode()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%s: %w", argv[0], ctx.Err())
		}
		res.err = err
	}
	return res
}

// capture keeps the tail of a stream and spots watched strings across
// write boundaries.
type capture struct {
	tail  []byte
	carry []byte
	watch []string
	seen  map[string]bool
}

func newCapture(watch []string) *capture {
	return &capture{watch: watch, seen: map[string]bool{}}
}

func (c *capture) Write(p []byte) (int, error) {
	if len(c.watch) > 0 {
		buf := append(append([]byte(nil), c.carry...), p...)
		longest := 0
		for _, w := range c.watch {
			if bytes.Contains(buf, []byte(w)) {
				c.seen[w] = true
			}
			longest = max(longest, len(w))
		}
		c.carry = buf[max(0, len(buf)-longest):]
	}
	c.tail = append(c.tail, p...)
	if len(c.tail) > 2*toolOutputLimit {
		c.tail = append([]byte(nil), c.tail[len(c.tail)-toolOutputLimit:]...)
	}
	return len(p), nil
}

func (c *capture) String() string {
	return keepTail(string(c.tail), toolOutputLimit)
}

// toolFailure classifies a failed run: a missing tool is an image problem,
// anything else is reason.
func toolFailure(reason Reason, r toolRun, what string) error {
	if errors.Is(r.err, errUndeclared) {
		return fail(ReasonToolMissing, "%s: agent bug: %v", what, r.err)
	}
	if r.notFound() {
		return failOutput(ReasonToolMissing, r, "%s: %s not found on PATH", what, r.argv[0])
	}
	return failOutput(reason, r, "%s failed (%s): %v", what, strings.Join(r.argv, " "), r.err)
}
