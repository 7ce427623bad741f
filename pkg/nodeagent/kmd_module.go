package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// obtainFor returns the host path of tenstorrent.ko of o.Version for an
// installed kernel the node does not run, to persist for its next boot: one
// this node built earlier from the same source (git URL and pinned commit)
// or a build here. A node is trusted with itself, and this module is only
// ever loaded by this node's own boot.
func (x *execution) obtainFor(ctx context.Context, o KMDOptions, kver string) (ko, detail string, err error) {
	if e, ok := x.agent.builtHere(kver, o.Version, o.GitURL, o.Commit); ok {
		return e.path, "cache hit " + e.path + " (SHA-256 " + e.rec.SHA256[:12] + "…, commit " + e.rec.Commit + ")", nil
	}
	ko, info, err := x.build(ctx, o.Version, o.GitURL, o.Commit, kver, "")
	if err != nil {
		return "", "", err
	}
	return ko, "built from ttkmd-" + o.Version + " (commit " + info.Commit + ") and cached at " + ko, nil
}

// build makes tenstorrent.ko of version for kernel kver: a shallow clone of
// tag ttkmd-<version> from gitURL, the commit it checked out held to the
// pin, kbuild against the host's tree for kver, the result checked (its
// version and vermagic), then stored in the cache under its SHA-256 with
// its record. kbuildOf is kver's build (uname -v) when it runs.
func (x *execution) build(ctx context.Context, version, gitURL, commit, kver, kbuildOf string) (string, ModuleInfo, error) {
	a := x.agent
	buildDir, err := resolveInRoot(a.Root, filepath.Join("lib/modules", kver, "build"))
	if err == nil {
		_, err = os.Stat(filepath.Join(buildDir, "Makefile"))
	}
	if err != nil {
		return "", ModuleInfo{}, fail(ReasonNoKernelHeaders,
			"host has no kernel build tree at /lib/modules/%s/build; install linux-headers-%s on the node (%v)", kver, kver, err)
	}
	cacheRoot := a.hostPath(kmdCacheDir)
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return "", ModuleInfo{}, err
	}
	// Build on the host's disk next to the cache, so the result can be
	// renamed into place and a crash leaves no half-written cache entry.
	work, err := os.MkdirTemp(cacheRoot, ".build-"+kver+"-"+version+"-")
	if err != nil {
		return "", ModuleInfo{}, err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(work, "tt-kmd")
	clone := x.run(ctx, []string{"git", "clone", "--depth", "1", "--branch", "ttkmd-" + version, gitURL, src})
	if clone.err != nil {
		return "", ModuleInfo{}, toolFailure(ReasonCloneFailed, clone, "git clone of ttkmd-"+version)
	}
	built, err := x.resolveCommit(ctx, src, version, gitURL, commit)
	if err != nil {
		return "", ModuleInfo{}, err
	}
	run := x.run(ctx, a.buildCommand(kver, src, compilerFor(a.Root, buildDir)))
	if run.err != nil {
		return "", ModuleInfo{}, toolFailure(ReasonBuildFailed, run, "building tt-kmd "+version+" for "+kver)
	}
	out := filepath.Join(src, kmdModuleFile)
	if _, err := os.Stat(out); err != nil {
		return "", ModuleInfo{}, failOutput(ReasonBuildFailed, run, "make succeeded but produced no %s", kmdModuleFile)
	}
	vermagic, err := x.checkBuilt(ctx, out, version, kver)
	if err != nil {
		return "", ModuleInfo{}, err
	}
	sha, err := fileHexSHA256(out)
	if err != nil {
		return "", ModuleInfo{}, err
	}
	cached := a.cachedModule(kver, version, sha)
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", ModuleInfo{}, err
	}
	if err := os.Rename(out, cached); err != nil {
		return "", ModuleInfo{}, err
	}
	info := ModuleInfo{Version: version, Vermagic: vermagic, Kernel: kver, KernelBuild: kbuildOf,
		KernelConfig: kernelConfigDigest(a.Root, kver), Commit: built, GitURL: gitURL, BuiltBy: a.Node, Source: "build"}
	if err := recordCached(cached, info); err != nil {
		return "", ModuleInfo{}, err
	}
	rec, err := verifyCached(cached, commit)
	return cached, rec, err
}

// checkBuilt reads the built module's MODULE_VERSION and vermagic with
// modinfo: a tag whose source says another version, or a build against
// another kernel's tree, must not enter the cache under this key.
// It returns the vermagic.
func (x *execution) checkBuilt(ctx context.Context, ko, version, kver string) (string, error) {
	vermagic := ""
	for _, f := range []struct{ field, want string }{{"version", version}, {"vermagic", kver}} {
		r := x.run(ctx, []string{"modinfo", "-F", f.field, ko})
		if r.err != nil {
			return "", toolFailure(ReasonBuildFailed, r, "modinfo -F "+f.field)
		}
		got := strings.Fields(r.stdout)
		if len(got) == 0 || got[0] != f.want {
			return "", failOutput(ReasonBuildFailed, r, "built %s has %s %q, expected %q", kmdModuleFile, f.field,
				strings.TrimSpace(r.stdout), f.want)
		}
		vermagic = strings.TrimSpace(r.stdout)
	}
	return vermagic, nil
}

// buildCommand is the kbuild invocation with the compiler the kernel was
// built with (cc). With the host mounted under Root it runs in a chroot of
// the host: the host's kernel tree with paths as the host sees them
// (Debian's split header trees include each other by absolute path) and
// the host's compilers.
func (a *Agent) buildCommand(kver, src string, cc kernelCompiler) []string {
	var cmd []string
	if a.Root != "/" && a.Root != "" {
		cmd = []string{"chroot", a.Root}
		if rel, err := filepath.Rel(a.Root, src); err == nil && !strings.HasPrefix(rel, "..") {
			src = filepath.Join("/", rel)
		}
	}
	cmd = append(cmd, "make", "-j"+strconv.Itoa(buildJobs()), "-C", filepath.Join("/lib/modules", kver, "build"), "M="+src)
	cmd = append(cmd, cc.makeArgs()...)
	return append(cmd, "modules")
}

// unload removes the loaded module, killing holders first when allowed.
func (x *execution) unload(ctx context.Context, o KMDOptions) (string, error) {
	a := x.agent
	refcnt := a.hostPath(filepath.Join(moduleSysfs, "refcnt"))
	refs, err := readInt(refcnt)
	if err != nil {
		return "", err
	}
	detail := ""
	if refs > 0 {
		if !o.ForceUnload { // holders appeared during the build
			return x.checkUnused(o.Version)
		}
		if detail, err = x.killHolders(ctx, o.UnloadWait, refs); err != nil {
			return "", err
		}
	}
	rm := x.run(ctx, []string{"rmmod", kmdModuleName})
	if rm.err != nil {
		return "", toolFailure(ReasonRmmodFailed, rm, "rmmod "+kmdModuleName)
	}
	return detail + "rmmod " + x.res.Before + " ok", nil
}

// killHolders SIGKILLs every holder by exec'ing kill from PATH (never a
// direct syscall, so tests can only ever reach fake processes) and waits a
// bounded time for the refcount to drop to 0.
func (x *execution) killHolders(ctx context.Context, wait time.Duration, refs int) (string, error) {
	a := x.agent
	holders, err := findHolders(a.Root)
	if err != nil {
		return "", err
	}
	x.res.Holders = holders
	if len(holders) == 0 {
		// fds, dma-bufs and mappings were all looked at: what is left holds
		// the module from the kernel, or from where /proc does not show.
		return "", fail(ReasonHoldersNotVisible, "refcnt %d but no process in /proc holds the device (no /dev/tenstorrent fd or "+
			"mapping, no dma-buf exported by tenstorrent): a kernel user holds the module (e.g. another driver imported its "+
			"dma-buf), or the helper does not see the host's processes (hostPID)", refs)
	}
	argv := []string{"kill", "-KILL"}
	for _, h := range holders {
		argv = append(argv, strconv.Itoa(h.PID))
	}
	// kill exits non-zero if one holder exited on its own; the refcount
	// poll below is the real check.
	if k := x.run(ctx, argv); k.notFound() {
		return "", toolFailure(ReasonHoldersRemain, k, "kill")
	}
	deadline := time.Now().Add(wait)
	refcnt := a.hostPath(filepath.Join(moduleSysfs, "refcnt"))
	for {
		if refs, err = readInt(refcnt); err != nil {
			return "", err
		}
		if refs == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.pollInterval()):
		}
	}
	remaining, err := findHolders(a.Root)
	if err != nil {
		return "", err
	}
	alive := map[int]bool{}
	for _, h := range remaining {
		alive[h.PID] = true
	}
	for i := range x.res.Holders {
		x.res.Holders[i].Killed = !alive[x.res.Holders[i].PID]
	}
	if refs > 0 {
		return "", fail(ReasonHoldersRemain, "refcnt still %d %s after SIGKILL; remaining holders: %s", refs, wait,
			describeHolders(remaining))
	}
	return fmt.Sprintf("killed %d holder(s); ", len(holders)), nil
}

// insmod loads ko. If that fails with the old module already gone, it
// puts the previous version back so the node is not left without a
// driver: from the cache, else the host's own installed copy (what it
// would boot: after cleanup --host-caches, or on a fleet the operator
// installed, the cache lacks it), through the host's modprobe.
func (x *execution) insmod(ctx context.Context, ko, previous string) (string, error) {
	opts := x.hostModuleOptions(ctx)
	in := x.run(ctx, append([]string{"insmod", ko}, opts...))
	if in.err == nil {
		if len(opts) > 0 {
			return "insmod " + ko + " " + strings.Join(opts, " ") + " (the host's modprobe.d)", nil
		}
		return "insmod " + ko, nil
	}
	err := toolFailure(ReasonInsmodFailed, in, "insmod "+ko)
	if previous == "" {
		return "", err
	}
	for _, old := range x.agent.cacheEntries(x.res.Kernel, previous) {
		if back := x.run(ctx, append([]string{"insmod", old.path}, opts...)); back.err == nil {
			return "", appendMsg(err, "; rolled back to tt-kmd "+previous)
		}
	}
	if back := x.run(ctx, x.agent.onHost("modprobe", kmdModuleName)); back.err == nil {
		switch got, _ := readOptional(x.agent.hostPath(filepath.Join(moduleSysfs, "version"))); got {
		case previous:
			return "", appendMsg(err, "; rolled back to tt-kmd "+previous+" (the host's installed copy)")
		case "":
		default:
			return "", appendMsg(err, "; tt-kmd "+previous+" is not cached, loaded the host's installed tt-kmd "+got+" instead")
		}
	}
	return "", appendMsg(err, "; tt-kmd "+previous+" is neither cached nor installed on the host, the node has no driver loaded")
}

// hostModuleOptions are the options the host's own modprobe would pass to
// tenstorrent (its modprobe.d, read by `modprobe -c` inside its root), so
// the driver loaded now runs as the one the host boots. Unreadable: none,
// with a warning.
func (x *execution) hostModuleOptions(ctx context.Context) []string {
	cfg := x.run(ctx, x.agent.onHost("modprobe", "-c"))
	if cfg.err != nil {
		x.warn("the host's module options (modprobe -c) are unreadable, loading with the module's defaults: %v", cfg.err)
		return nil
	}
	var opts []string
	for _, line := range strings.Split(cfg.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "options" && f[1] == kmdModuleName {
			opts = append(opts, f[2:]...)
		}
	}
	return opts
}

func appendMsg(err error, suffix string) error {
	var oe *opError
	if errors.As(err, &oe) {
		return &opError{reason: oe.reason, msg: oe.msg + suffix, output: oe.output}
	}
	return fmt.Errorf("%w%s", err, suffix)
}
