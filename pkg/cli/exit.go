package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// Exit codes every rollbook command uses, so scripts can branch on them.
const (
	ExitOK      = 0 // done: nothing left to do
	ExitFailed  = 1 // a step failed or the cluster could not be read
	ExitUsage   = 2 // bad flags or arguments; nothing was changed
	ExitBlocked = 3 // stopped at a guard that needs a human; nothing unsafe was done
	ExitLocked  = 4 // another run holds the lock
)

// ExitCoder is an error that chooses the process exit code.
type ExitCoder interface {
	error
	ExitCode() int
}

type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }
func (e *codedError) ExitCode() int { return e.code }

// WithExitCode wraps err so that the process exits with code.
func WithExitCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// UsageErrorf reports bad input; the command exits 2 and changes nothing.
func UsageErrorf(format string, a ...any) error {
	return &codedError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

// ExitCode picks the exit code for err.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ec ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return ExitFailed
}

// Execute runs root with a context cancelled on SIGINT/SIGTERM (so steps
// stop between API calls and release the lock), prints the error once, and
// returns the exit code.
func Execute(root *cobra.Command, args []string, errOut io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f := os.Getenv("ROLLBOOK_CPUPROFILE"); f != "" {
		// For benchmarks (docs/performance.md): where one invocation's CPU goes.
		if out, err := os.Create(f); err == nil {
			_ = pprof.StartCPUProfile(out)
			defer pprof.StopCPUProfile()
		}
	}
	if f := os.Getenv("ROLLBOOK_MEMPROFILE"); f != "" {
		// For benchmarks: what the heap held at the last collection, where
		// a command's peak memory comes from.
		defer func() {
			if out, err := os.Create(f); err == nil {
				_ = pprof.Lookup("heap").WriteTo(out, 0)
				_ = out.Close()
			}
		}()
	}
	return ExecuteContext(ctx, root, args, errOut)
}

// ExecuteContext is Execute under a caller's context (tests use it to
// interrupt a run at an exact point).
func ExecuteContext(ctx context.Context, root *cobra.Command, args []string, errOut io.Writer) int {
	// client-go logs transient port-forward and watch errors through klog;
	// they are retried or surface as errors we print, so keep them off the
	// user's terminal.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	root.SetArgs(args)
	invokedArgs.Store(&args)
	requireSubcommands(root)
	root.PersistentPreRunE = chainPreRun(root.PersistentPreRunE, func(c *cobra.Command) error {
		if f := c.Flags().Lookup("v"); f != nil && f.Changed {
			return enableRequestLog(f.Value.String())
		}
		return nil
	})
	// cobra reports unknown flags and arguments as plain errors; make them
	// usage errors with the command's usage hint.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return UsageErrorf("%v\nSee '%s --help' for usage.", err, c.CommandPath())
	})
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	err = explainForbidden(err, root.Name())
	code := ExitCode(err)
	if code == ExitFailed && isCobraUsageError(err) {
		code = ExitUsage
	}
	if msg, doing, ok := connectionMessage(err); ok {
		// As kubectl words it, then what the command was doing.
		fmt.Fprintln(errOut, msg)
		if doing != "" {
			fmt.Fprintf(errOut, "(%s)\n", doing)
		}
		return code
	}
	fmt.Fprintf(errOut, "error: %v\n", err)
	return code
}

// requireSubcommands makes every command that only groups others refuse an
// unknown subcommand (cobra would print help and exit 0).
func requireSubcommands(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return UsageErrorf("unknown command %q for %q\nSee '%s --help' for usage.", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		}
	}
	for _, sub := range c.Commands() {
		requireSubcommands(sub)
	}
}

func chainPreRun(prev func(*cobra.Command, []string) error, next func(*cobra.Command) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		if prev != nil {
			if err := prev(c, args); err != nil {
				return err
			}
		}
		return next(c)
	}
}

// enableRequestLog sends klog (client-go's request log) to stderr at level
// v, at most 7: at 8 and above client-go logs response bodies, and a
// TokenRequest's response body is a bearer token.
func enableRequestLog(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return UsageErrorf("-v %q: want a log level 0..7", v)
	}
	n = min(n, 7)
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	klog.SetOutput(os.Stderr)
	for k, val := range map[string]string{"v": strconv.Itoa(n), "logtostderr": "true"} {
		if err := fs.Set(k, val); err != nil {
			return err
		}
	}
	return nil
}

// isCobraUsageError recognises cobra's own argument and command errors,
// which it returns as plain errors.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires ",
		"required flag", "invalid argument", "flag needs an argument", "if any flags in the group"} {
		if len(msg) >= len(p) && msg[:len(p)] == p {
			return true
		}
	}
	return false
}
