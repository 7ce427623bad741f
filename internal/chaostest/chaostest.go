// Package chaostest kills the plugins' binaries with SIGKILL at random
// points while they roll a simulated cluster, re-runs the same command until
// it finishes, and scans what they printed and wrote for secrets. Its test
// packages (tt, ate, faults) hold the scenarios; this file holds what they
// share.
//
// The seed and the kill budget come from the environment, so `make chaos`
// runs a longer version of the same tests:
//
//	ROLLBOOK_CHAOS_SEED   seed of every random choice (default: the clock; always printed)
//	ROLLBOOK_CHAOS_KILLS  kills per scenario (default: each test's own, sized for make test)
package chaostest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/simtest"
)

// Seed returns the run's seed and prints it, so a failure can be replayed
// with ROLLBOOK_CHAOS_SEED.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ROLLBOOK_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ROLLBOOK_CHAOS_SEED=%q: want an unsigned integer", v)
		}
		seed = s
	}
	t.Logf("chaos seed %d (replay with ROLLBOOK_CHAOS_SEED=%d)", seed, seed)
	return seed
}

// Kills returns the kill budget of one scenario: ROLLBOOK_CHAOS_KILLS when
// set, else def.
func Kills(t testing.TB, def int) int {
	t.Helper()
	if v := os.Getenv("ROLLBOOK_CHAOS_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("ROLLBOOK_CHAOS_KILLS=%q: want a count >= 0", v)
		}
		return n
	}
	return def
}

// BuildPlugin builds cmd/<name> of this tree into a temporary directory
// and returns its path.
func BuildPlugin(name string) (string, error) {
	root, err := simtest.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "rollbook-chaos-bin-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return filepath.Join(dir, name), nil
}

// Transcript keeps everything the binaries printed, for the secrets scan.
type Transcript struct {
	mu  sync.Mutex
	out []string
}

// Add records one run's output.
func (tr *Transcript) Add(s string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.out = append(tr.out, s)
}

// All returns every output recorded.
func (tr *Transcript) All() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.out...)
}

// Bytes is the total size of what was recorded.
func (tr *Transcript) Bytes() int {
	n := 0
	for _, s := range tr.All() {
		n += len(s)
	}
	return n
}

// Plugin runs one plugin binary against a cluster.
type Plugin struct {
	Bin        string
	Kubeconfig string
	Log        *Transcript
	// Elsewhere runs it in a pid namespace of its own, as in a container
	// or on another machine: a Lease holder's pid then says nothing to it
	// (needs root).
	Elsewhere bool
}

// KillPoint says when to SIGKILL a run: right after it printed its
// AfterLines-th line plus Delay, or Delay after the start when AfterLines
// is 0. The zero KillPoint lets the run finish.
type KillPoint struct {
	AfterLines int
	Delay      time.Duration
}

func (k KillPoint) String() string {
	switch {
	case k.AfterLines > 0:
		return fmt.Sprintf("line %d +%s", k.AfterLines, k.Delay.Round(time.Millisecond))
	case k.Delay > 0:
		return "after " + k.Delay.Round(time.Millisecond).String()
	}
	return "none"
}

// Result is what one run did.
type Result struct {
	Out      string
	Code     int
	Killed   bool
	LastLine string // the last line printed before the kill
	Took     time.Duration
}

// Run runs the plugin with args (plus --kubeconfig) and kills it at k.
func (p *Plugin) Run(ctx context.Context, k KillPoint, args ...string) Result {
	return p.run(ctx, k, nil, args)
}

// RunNotify runs the plugin to its end, sending its pid to started once it
// runs (for tests that start several at once).
func (p *Plugin) RunNotify(ctx context.Context, started chan<- int, args ...string) Result {
	return p.run(ctx, KillPoint{}, started, args)
}

func (p *Plugin) run(ctx context.Context, k KillPoint, started chan<- int, args []string) Result {
	start := time.Now()
	cmd := exec.CommandContext(ctx, p.Bin, append(args, "--kubeconfig", p.Kubeconfig)...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.Elsewhere {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	if err := cmd.Start(); err != nil {
		if started != nil {
			started <- -1
		}
		return Result{Out: err.Error(), Code: -1}
	}
	if started != nil {
		started <- cmd.Process.Pid
	}
	var (
		mu     sync.Mutex
		out    strings.Builder
		last   string
		killed bool
		exited bool
	)
	kill := func() {
		mu.Lock()
		defer mu.Unlock()
		if !exited && !killed {
			killed = cmd.Process.Signal(syscall.SIGKILL) == nil
		}
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		n := 0
		for sc.Scan() {
			n++
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			if !killed {
				last = sc.Text()
			}
			mu.Unlock()
			if k.AfterLines > 0 && n == k.AfterLines {
				time.AfterFunc(k.Delay, kill)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	if k.AfterLines == 0 && k.Delay > 0 {
		time.AfterFunc(k.Delay, kill)
	}
	err := cmd.Wait()
	mu.Lock()
	exited = true
	mu.Unlock()
	_ = pw.Close()
	<-read
	mu.Lock()
	defer mu.Unlock()
	r := Result{Out: out.String(), Code: cmd.ProcessState.ExitCode(), LastLine: last, Took: time.Since(start)}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		r.Killed = true
	}
	if err != nil && r.Code == 0 && !r.Killed {
		r.Code = -1
	}
	if p.Log != nil {
		p.Log.Add(r.Out)
	}
	return r
}

// Killer draws kill points from a seeded source.
type Killer struct {
	rng *rand.Rand
	// MaxLines and MaxDelay bound the draws: a kill lands after one of the
	// first MaxLines lines (plus up to 300 ms), or after up to MaxDelay.
	MaxLines int
	MaxDelay time.Duration
}

// NewKiller returns a Killer seeded with seed.
func NewKiller(seed uint64, maxLines int, maxDelay time.Duration) *Killer {
	return &Killer{rng: rand.New(rand.NewPCG(seed, seed^0xc4a05)), MaxLines: maxLines, MaxDelay: maxDelay}
}

// Next draws a kill point: half after a progress line, half after a delay.
func (k *Killer) Next() KillPoint {
	if k.rng.IntN(2) == 0 {
		return KillPoint{AfterLines: 1 + k.rng.IntN(k.MaxLines), Delay: time.Duration(k.rng.Int64N(int64(300 * time.Millisecond)))}
	}
	return KillPoint{Delay: 100*time.Millisecond + time.Duration(k.rng.Int64N(int64(k.MaxDelay)))}
}

// Figures are a scenario's counts.
type Figures struct {
	Kills, Runs int
	Stops       []string // unkilled runs that stopped (exit 1/3), and why
	Took        time.Duration
}

// MaxStops is how many unkilled runs of one command may stop (exit 1 or 3,
// naming the blocker) before Converge gives up: a stop is re-run like a
// kill, and reported.
const MaxStops = 2

// Converge runs args, killing runs at the Killer's points until budget
// kills were made (or a run finished), re-running the same command after
// each kill until it exits 0. An unkilled run that stops with exit 1 or 3
// and names its blocker is re-run too (at most MaxStops times, each one
// logged as a STOP); any other exit fails the test.
func Converge(t *testing.T, ctx context.Context, p *Plugin, k *Killer, budget int, args ...string) Figures {
	t.Helper()
	var f Figures
	start := time.Now()
	for {
		if ctx.Err() != nil {
			t.Fatalf("%s: did not converge before the test's deadline (%d kills, %d runs)", strings.Join(args, " "), f.Kills, f.Runs)
		}
		kp := KillPoint{}
		if f.Kills < budget {
			kp = k.Next()
		}
		r := p.Run(ctx, kp, args...)
		f.Runs++
		switch {
		case r.Killed:
			f.Kills++
			t.Logf("kill %d (%s) of `%s` after %s; last line: %s", f.Kills, kp, strings.Join(args, " "),
				r.Took.Round(time.Millisecond), r.LastLine)
			continue
		case r.Code == 0:
			f.Took = time.Since(start)
			t.Logf("`%s` converged: %d kills, %d runs, %d stops %v, %s", strings.Join(args, " "), f.Kills, f.Runs, len(f.Stops), f.Stops,
				f.Took.Round(time.Second))
			return f
		case (r.Code == 1 || r.Code == 3) && Blocker(r.Out) != "" && len(f.Stops) < MaxStops:
			f.Stops = append(f.Stops, fmt.Sprintf("exit %d after kill %d: %s", r.Code, f.Kills, Blocker(r.Out)))
			t.Logf("STOP: `%s` exited %d without being killed (after %d kills); re-running:\n%s", strings.Join(args, " "), r.Code,
				f.Kills, r.Out)
		default:
			t.Fatalf("`%s` exited %d without being killed (after %d kills, %d stops):\n%s", strings.Join(args, " "), r.Code, f.Kills,
				len(f.Stops), r.Out)
		}
	}
}

// blocker matches the line a failed or blocked run ends with: what stopped it.
var blocker = regexp.MustCompile(`(?i)(error|blocked|failed|cannot|refused)`)

// Blocker returns the first line of out that names why the run stopped,
// or "" when none does.
func Blocker(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if blocker.MatchString(l) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// UntilDone re-runs args (never killed) until one exits 0, at most maxRuns
// times. A run that stops must exit 1 or 3 and name its blocker; after it,
// check (if set) asserts what must hold between runs. It returns the runs
// that stopped and why.
func UntilDone(t *testing.T, ctx context.Context, p *Plugin, maxRuns int, check func(), args ...string) []string {
	t.Helper()
	var stops []string
	for i := 0; i < maxRuns; i++ {
		r := p.Run(ctx, KillPoint{}, args...)
		switch r.Code {
		case 0:
			t.Logf("`%s` done after %d stop(s)", strings.Join(args, " "), len(stops))
			if os.Getenv("ROLLBOOK_CHAOS_VERBOSE") != "" {
				t.Logf("its output:\n%s", r.Out)
			}
			return stops
		case 1, 3:
			why := Blocker(r.Out)
			if why == "" {
				t.Fatalf("`%s` exited %d without naming why:\n%s", strings.Join(args, " "), r.Code, r.Out)
			}
			stops = append(stops, fmt.Sprintf("exit %d: %s", r.Code, why))
			t.Logf("`%s` stopped (exit %d): %s", strings.Join(args, " "), r.Code, why)
			if os.Getenv("ROLLBOOK_CHAOS_VERBOSE") != "" {
				t.Logf("its output:\n%s", r.Out)
			}
			if check != nil {
				check()
			}
		default:
			t.Fatalf("`%s` exited %d (want 0, or 1/3 naming the blocker):\n%s", strings.Join(args, " "), r.Code, r.Out)
		}
	}
	t.Fatalf("`%s` did not finish in %d runs: %v", strings.Join(args, " "), maxRuns, stops)
	return nil
}
