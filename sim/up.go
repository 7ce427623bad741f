package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/faultproxy"
	"github.com/rollbook/rollbook/sim/monitor"
	"github.com/rollbook/rollbook/sim/monitor/kubewatch"
	"github.com/rollbook/rollbook/sim/scenario"
	"github.com/rollbook/rollbook/sim/tthost"
)

// marker identifies a directory sim owns, so `up` only ever wipes its own.
const marker = ".rollbook-sim"

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func cmdUp(args []string) int {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory (required): kubeconfig, ready marker, logs")
	nodes := fs.Int("nodes", 3, "fake nodes to register")
	scen := fs.String("scenario", "empty", "scenario to set up (see `sim scenarios`)")
	verbosity := fs.Int("v", 0, "log verbosity of the components")
	logStderr := fs.Bool("log-stderr", false, "leave component logs on stderr instead of DIR/sim.log")
	exitWithParent := fs.Bool("exit-with-parent", false, "stop when the process that started sim exits (for test harnesses)")
	ttAgent := fs.String("tt-agent", "", "kubectl-tt binary the tt scenarios' helper runner executes for helper pods (default: kubectl-tt next to sim, else on PATH)")
	ttImage := fs.String("tt-image", os.Getenv(tthost.EnvImage),
		"the node-agent image (the OCI layout `make image` writes) the helper runner runs helper pods from; a helper naming "+
			"another image fails to pull (env "+tthost.EnvImage+"); without it, or without root, helpers are refused")
	var ttMirrors multiFlag
	fs.Var(&ttMirrors, "tt-image-mirror", "a repository that also serves the --tt-image image, by digest: where a release "+
		"pushed it (repeatable; env "+tthost.EnvImageMirror+", comma-separated)")
	ttImageStore := fs.String("tt-image-store", envOr(tthost.EnvImageStore, tthost.DefaultImageStore()),
		"where the image's layers are unpacked, by digest, shared by every sim (env "+tthost.EnvImageStore+")")
	ttRealHost := fs.String("tt-realhost-rootfs", os.Getenv(tthost.EnvRealHostRootfs),
		"a real-host root filesystem (hack/realhost-rootfs.sh): every tt node's host root is a writable overlay of it and "+
			"helpers run the real git, kbuild and kmod tools, cloning DIR/"+tthost.KMDRemoteDir+"/tt-kmd.git (env "+
			tthost.EnvRealHostRootfs+"; needs root)")
	apiFaults := fs.Float64("api-faults", 0, "put a proxy in front of the apiserver that fails this fraction of requests "+
		"(429 with Retry-After, 500, 503, dropped connection, slow response); DIR/kubeconfig points at it")
	faultSeed := fs.Uint64("api-faults-seed", 1, "seed of the --api-faults draws")
	apiProxy := fs.Bool("api-proxy", false, "put the fault proxy in front of the apiserver even with no --api-faults, and "+
		"make the apiserver restartable in place: for the faults a test injects through DIR/"+ControlSocket)
	leaseSeconds := fs.Int("node-lease-seconds", 40, "the fake nodes' Lease duration (renewed every quarter of it); "+
		"benchmarks of thousands of nodes raise it so renewals do not saturate a small machine")
	var apiArg, kcmArg, schedArg multiFlag
	fs.Var(&apiArg, "apiserver-arg", "extra kube-apiserver flag (repeatable)")
	fs.Var(&kcmArg, "kcm-arg", "extra kube-controller-manager flag (repeatable)")
	fs.Var(&schedArg, "scheduler-arg", "extra kube-scheduler flag (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || *nodes < 0 || *leaseSeconds < 10 || *apiFaults < 0 || *apiFaults > 1 {
		fmt.Fprintln(os.Stderr, "sim up: --dir is required, --nodes must be >= 0, --node-lease-seconds >= 10 and --api-faults between 0 and 1")
		return 2
	}
	scenario.TTAgent = *ttAgent
	scenario.TTImage, scenario.TTImageStore = *ttImage, *ttImageStore
	scenario.TTImageMirrors = append([]string(nil), ttMirrors...)
	if env := os.Getenv(tthost.EnvImageMirror); env != "" {
		scenario.TTImageMirrors = append(scenario.TTImageMirrors, strings.Split(env, ",")...)
	}
	scenario.TTRealHostRootfs = *ttRealHost
	sc, err := scenario.Get(*scen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim up:", err)
		return 2
	}
	abs, err := prepareDir(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim up:", err)
		return 1
	}
	t0 := time.Now()
	logf := func(format string, a ...any) {
		fmt.Printf("[sim %6.2fs] %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, a...))
	}
	if !*logStderr {
		if err := redirectStderr(filepath.Join(abs, "sim.log")); err != nil {
			fmt.Fprintln(os.Stderr, "sim up:", err)
			return 1
		}
	}
	_ = os.WriteFile(filepath.Join(abs, "pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *exitWithParent {
		go exitWhenOrphaned(stop)
	}
	c, err := cluster.Up(ctx, cluster.Options{Dir: abs, Nodes: *nodes, Verbosity: *verbosity,
		APIServerArg: apiArg, KCMArg: kcmArg, SchedulerArg: schedArg, NodeLeaseSeconds: *leaseSeconds, Logf: logf,
		RestartableAPIServer: *apiProxy})
	if err != nil {
		fmt.Fprintln(os.Stdout, "sim up: the cluster did not start:", err)
		return 1
	}
	var onStop []func()
	defer func() {
		_ = os.Remove(filepath.Join(abs, "ready"))
		for _, f := range onStop {
			f()
		}
		c.Stop()
		logf("stopped")
		klog.Flush()
	}()

	var proxy *faultproxy.Proxy
	if *apiFaults > 0 || *apiProxy {
		if proxy, err = startFaultProxy(ctx, c, abs, *apiFaults, *faultSeed, logf); err != nil {
			fmt.Fprintln(os.Stdout, "sim up: --api-faults:", err)
			return 1
		}
	}
	if err := serveControl(ctx, abs, c, proxy, logf); err != nil {
		fmt.Fprintln(os.Stdout, "sim up: control socket:", err)
		return 1
	}
	mon, err := monitor.Open(abs)
	if err != nil {
		fmt.Fprintln(os.Stdout, "sim up:", err)
		return 1
	}
	if err := kubewatch.Start(ctx, kubewatch.Config{RESTConfig: c.RESTConfig, Client: c.Client, Monitor: mon, Logf: logf}); err != nil {
		fmt.Fprintln(os.Stdout, "sim up:", err)
		return 1
	}
	failed := make(chan error, 1)
	env := &scenario.Env{Dir: abs, RESTConfig: c.RESTConfig, Client: c.Client, Logf: logf,
		Nodes: nodeNames("kwok-node-", *nodes), Monitor: mon, OnStop: func(f func()) { onStop = append(onStop, f) }}
	env.Go = func(name string, f func(context.Context) error) {
		go func() {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				select {
				case failed <- fmt.Errorf("%s: %w", name, err):
				default:
				}
			}
		}()
	}
	if err := sc.Setup(ctx, env); err != nil {
		fmt.Fprintf(os.Stdout, "sim up: scenario %s: %v\n", sc.Name, err)
		return 1
	}
	ready := fmt.Sprintf("kubeconfig=%s\nscenario=%s\nstartup_seconds=%.2f\n", c.Kubeconfig, sc.Name, time.Since(t0).Seconds())
	if err := os.WriteFile(filepath.Join(abs, "ready"), []byte(ready), 0o644); err != nil {
		fmt.Fprintln(os.Stdout, "sim up:", err)
		return 1
	}
	logf("READY: %d nodes, scenario %s; export KUBECONFIG=%s", *nodes, sc.Name, c.Kubeconfig)
	if name := os.Getenv("ROLLBOOK_SIM_CPUPROFILE"); name != "" {
		// Where the simulated cluster's CPU goes once it is up (a fleet
		// bench's roll), not its start: until it stops.
		if f, err := os.Create(name); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
	}

	select {
	case <-ctx.Done():
		logf("shutting down")
		return 0
	case err := <-c.Failed:
		fmt.Fprintln(os.Stdout, "sim: component failed:", err)
		return 1
	case err := <-failed:
		fmt.Fprintln(os.Stdout, "sim: simulated peer failed:", err)
		return 1
	}
}

// prepareDir creates dir, or empties it when a previous sim owned it. It
// refuses to touch a non-empty directory sim did not create.
func prepareDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(abs, marker)); err != nil {
			return "", fmt.Errorf("%s is not empty and was not created by sim; choose an empty or new directory", abs)
		}
		if pid, err := readPID(abs); err == nil && processAlive(pid) {
			return "", fmt.Errorf("a sim (pid %d) is already running in %s; stop it with `sim down --dir %s`", pid, abs, dir)
		}
		if err := os.RemoveAll(abs); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", err
	}
	return abs, os.WriteFile(filepath.Join(abs, marker), nil, 0o644)
}

// redirectStderr sends everything written to fd 2 (klog of every component,
// panics) to path, so the terminal shows only sim's own progress lines.
func redirectStderr(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	return syscall.Dup2(int(f.Fd()), 2)
}

// exitWhenOrphaned stops the sim once its parent is gone (re-parented), so
// a test binary that panics or times out leaves no cluster behind.
func exitWhenOrphaned(stop func()) {
	parent := os.Getppid()
	for range time.Tick(500 * time.Millisecond) {
		if os.Getppid() != parent {
			stop()
			return
		}
	}
}

func nodeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// envOr is $name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
