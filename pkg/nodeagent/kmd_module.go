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

// obtainModule returns the host path of tenstorrent.ko for (kernel,
// version), from the cache or by building it: shallow clone of tag
// ttkmd-<version>, kbuild against the host's kernel tree, then store in the
// cache so a later downgrade or re-install is a cache hit.
func (x *execution) obtainModule(ctx context.Context, o KMDOptions) (ko, detail string, err error) {
	return x.obtainFor(ctx, o, x.res.Kernel, true)
}

// obtainFor is obtainModule for kernel kver. Only the running kernel's
// (primary) module is the result's, comes from the cluster's copy and is
// printed for sharing; another installed kernel's is built or cached here.
func (x *execution) obtainFor(ctx context.Context, o KMDOptions, kver string, primary bool) (ko, detail string, err error) {
	a := x.agent
	cached := a.cachedModule(kver, o.Version, o.signer)
	hit := false
	if primary {
		x.res.CacheHit = &hit
	} else {
		defer func(commit string) { x.res.Commit = commit }(x.res.Commit) // resolveCommit records the primary's
	}
	if rec, why := verifyCached(cached, o.Commit); why == nil {
		hit = true
		if primary {
			x.res.Commit = rec.Commit
			rec.Source = "cache"
			x.res.Module = &rec
		}
		return cached, "cache hit " + cached + " (SHA-256 " + rec.SHA256[:12] + "…, commit " + rec.Commit + ")", nil
	} else if !errors.Is(why, os.ErrNotExist) {
		x.warn("cached module not used, rebuilding (kernel %s): %v", kver, why)
	}
	if o.ModuleFrom != "" && primary {
		info, err := x.fromCluster(ctx, o.ModuleFrom, cached, o)
		if err == nil {
			hit = true
			x.res.Commit, x.res.Module = info.Commit, &info
			return cached, fmt.Sprintf("cache hit from the cluster's copy built by %s (SHA-256 %s…, commit %s) at %s",
				orDash(info.BuiltBy), info.SHA256[:12], info.Commit, cached), nil
		}
		x.warn("the cluster's shared module is not used, building here: %v", err)
	}
	buildDir, err := resolveInRoot(a.Root, filepath.Join("lib/modules", kver, "build"))
	if err == nil {
		_, err = os.Stat(filepath.Join(buildDir, "Makefile"))
	}
	if err != nil {
		return "", "", fail(ReasonNoKernelHeaders,
			"host has no kernel build tree at /lib/modules/%s/build; install linux-headers-%s on the node (%v)", kver, kver, err)
	}
	cacheRoot := a.hostPath(kmdCacheDir)
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return "", "", err
	}
	// Build on the host's disk next to the cache, so the result can be
	// renamed into place and a crash leaves no half-written cache entry.
	work, err := os.MkdirTemp(cacheRoot, ".build-"+kver+"-"+o.Version+"-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(work, "tt-kmd")
	clone := x.run(ctx, []string{"git", "clone", "--depth", "1", "--branch", "ttkmd-" + o.Version, o.GitURL, src})
	if clone.err != nil {
		return "", "", toolFailure(ReasonCloneFailed, clone, "git clone of ttkmd-"+o.Version)
	}
	commit, err := x.resolveCommit(ctx, src, o)
	if err != nil {
		return "", "", err
	}
	build := x.run(ctx, a.buildCommand(kver, src))
	if build.err != nil {
		return "", "", toolFailure(ReasonBuildFailed, build, "building tt-kmd "+o.Version+" for "+kver)
	}
	built := filepath.Join(src, kmdModuleFile)
	if _, err := os.Stat(built); err != nil {
		return "", "", failOutput(ReasonBuildFailed, build, "make succeeded but produced no %s", kmdModuleFile)
	}
	vermagic, err := x.checkBuilt(ctx, built, o.Version, kver)
	if err != nil {
		return "", "", err
	}
	signed := ""
	if o.Signing.Enabled() {
		if signed, err = x.sign(ctx, built, work, o.Signing, kver); err != nil {
			return "", "", err
		}
		signed = ", " + signed
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", "", err
	}
	if err := os.Rename(built, cached); err != nil {
		return "", "", err
	}
	info := ModuleInfo{Version: o.Version, Vermagic: vermagic, Kernel: kver, Commit: commit, BuiltBy: a.Node, Source: "build",
		Signer: o.signer}
	if err := recordCached(cached, info); err != nil {
		return "", "", err
	}
	if rec, err := verifyCached(cached, o.Commit); err == nil && primary {
		rec.Source = "build"
		x.res.Module = &rec
		if o.Publish && a.Publish != nil {
			// For the CLI to share with the nodes that run this kernel.
			if n, err := writeModuleFrame(a.Publish, cached); err != nil {
				x.warn("could not print the module for sharing: %v", err)
			} else {
				a.logf("kmd: module printed for sharing (%d bytes gzipped)", n)
			}
		}
	}
	return cached, "built from ttkmd-" + o.Version + " (commit " + commit + ")" + signed + " and cached at " + cached, nil
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

// buildCommand is the kbuild invocation. With the host mounted under Root
// it runs in a chroot of the host: the host's kernel tree with paths as the
// host sees them (Debian's split header trees include each other by
// absolute path) and the host's compiler, the one the kernel was built for.
func (a *Agent) buildCommand(kver, src string) []string {
	jobs := "-j" + strconv.Itoa(buildJobs())
	if a.Root == "/" || a.Root == "" {
		return []string{"make", jobs, "-C", filepath.Join("/lib/modules", kver, "build"), "M=" + src, "modules"}
	}
	rel, err := filepath.Rel(a.Root, src)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = src
	}
	return []string{"chroot", a.Root, "make", jobs, "-C", filepath.Join("/lib/modules", kver, "build"), "M=" + filepath.Join("/", rel),
		"modules"}
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
// tries to put the previous version back from the cache so the node is not
// left without a driver.
func (x *execution) insmod(ctx context.Context, ko, previous, signer string) (string, error) {
	a := x.agent
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
	old := a.cachedModule(x.res.Kernel, previous, signer)
	if _, serr := verifyCached(old, ""); serr != nil {
		return "", appendMsg(err, "; tt-kmd "+previous+" is not cached (or fails its checksum), the node has no driver loaded")
	}
	if back := x.run(ctx, append([]string{"insmod", old}, opts...)); back.err != nil {
		return "", appendMsg(err, "; rollback to "+previous+" failed too, the node has no driver loaded")
	}
	return "", appendMsg(err, "; rolled back to tt-kmd "+previous)
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
