package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// DefaultKMDGitURL is the upstream tt-kmd repository.
const DefaultKMDGitURL = "https://github.com/tenstorrent/tt-kmd.git"

// KMDOptions configures a tt-kmd install.
type KMDOptions struct {
	// Version is the tt-kmd release (git tag ttkmd-<Version>).
	Version string
	// ForceUnload SIGKILLs processes holding /dev/tenstorrent/* (the pod
	// needs hostPID to see and signal them).
	ForceUnload bool
	// GitURL is the tt-kmd repository; default DefaultKMDGitURL.
	GitURL string
	// Timeout bounds the whole operation; default 10 minutes.
	Timeout time.Duration
	// UnloadWait bounds the wait for the refcount to reach 0 after killing
	// holders; default 10s, as in the operator.
	UnloadWait time.Duration
	// SkipPersist leaves the module insmod-only, as the operator does.
	SkipPersist bool
	// Commit pins the commit tag ttkmd-<Version> must resolve to (40 hex
	// digits) for what this helper builds itself: the modules it persists
	// for installed kernels it does not run.
	Commit string
	// ModuleSHA256 is the SHA-256 of the module kubectl tt checked and
	// vouched for: the only module this helper loads (from its cache when
	// it holds those bytes, else from ModuleFrom).
	ModuleSHA256 string
	// ModuleFrom is the directory of the shared module (a ConfigMap
	// volume): SharedModuleKey, SharedInfoKey, and SharedCertKey when
	// signed.
	ModuleFrom string
	// ModuleSigner, when set, is the SHA-256 of the certificate (DER) the
	// module must be signed with; the certificate is in ModuleFrom.
	ModuleSigner string
}

func (o *KMDOptions) defaults() {
	if o.GitURL == "" {
		o.GitURL = DefaultKMDGitURL
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.UnloadWait <= 0 {
		o.UnloadWait = 10 * time.Second
	}
}

func (o KMDOptions) validate() error {
	if err := ValidateKMDVersion(o.Version); err != nil {
		return fail(ReasonInvalidInput, "--version: %v", err)
	}
	if err := ValidateSourceURL(o.GitURL); err != nil {
		return fail(ReasonInvalidInput, "--git-url: %v", err)
	}
	if err := ValidateCommit(o.Commit); err != nil {
		return fail(ReasonInvalidInput, "--commit: %v", err)
	}
	for flag, v := range map[string]string{"--module-sha256": o.ModuleSHA256, "--module-signer": o.ModuleSigner} {
		if v != "" && !sha256RE.MatchString(v) {
			return fail(ReasonInvalidInput, "%s %q is not a hex SHA-256", flag, v)
		}
	}
	if o.ModuleSigner != "" && o.ModuleSHA256 == "" {
		return fail(ReasonInvalidInput, "--module-signer goes with --module-sha256")
	}
	return nil
}

// Host paths used by the kmd operation, relative to the host root. The
// kernel release is read from procfs, which is what uname -r reports for
// the (shared) running kernel, and needs no tool.
const (
	osreleasePath   = "proc/sys/kernel/osrelease"
	kversionPath    = "proc/sys/kernel/version"
	moduleSysfs     = "sys/module/tenstorrent"
	kmdCacheDir     = "var/cache/tt-kmd"
	dkmsStateDir    = "var/lib/dkms/tenstorrent"
	dkmsSourceGlob  = "usr/src/tenstorrent-*/dkms.conf"
	kmdModuleName   = "tenstorrent"
	kmdModuleFile   = "tenstorrent.ko"
	rebootSafeDir   = "updates"
	modulesLoadConf = "etc/modules-load.d/tenstorrent.conf"
	// depmodOverrideConf names our updates/ copy for depmod, whatever the
	// host's search order.
	depmodOverrideConf = "etc/depmod.d/tenstorrent-rollbook.conf"
	// The kernel's module-loading policy.
	modulesDisabledPath = "proc/sys/kernel/modules_disabled"
	sigEnforcePath      = "sys/module/module/parameters/sig_enforce"
	lockdownPath        = "sys/kernel/security/lockdown"
)

// KMD installs tt-kmd o.Version on the node. The order follows the
// operator's entrypoint (host-managed check, fast path, refcount check,
// unload, build or cache, insmod, verify) with one deliberate change: the
// module is obtained (cache or build) before the old one is unloaded, so a
// missing kernel tree or a failed build leaves the working driver loaded
// instead of none. The module is then made to survive a reboot.
func (a *Agent) KMD(ctx context.Context, o KMDOptions) Result {
	o.defaults()
	x := a.begin(OpKMD, o.Version)
	if err := o.validate(); err != nil {
		return x.finish(ctx, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	err := x.kmd(x.stoppable(ctx), o)
	if after, rerr := readOptional(a.hostPath(filepath.Join(moduleSysfs, "version"))); rerr == nil {
		x.res.After = after
	}
	return x.finish(ctx, err)
}

func (x *execution) kmd(ctx context.Context, o KMDOptions) error {
	a := x.agent
	var loaded string
	if err := x.step("observe", func() (string, error) {
		kver, err := x.readKernel()
		if err != nil {
			return "", err
		}
		if loaded, err = readOptional(a.hostPath(filepath.Join(moduleSysfs, "version"))); err != nil {
			return "", err
		}
		x.res.Before = loaded
		return fmt.Sprintf("kernel %s, loaded %q", kver, loaded), nil
	}); err != nil {
		return err
	}
	if err := x.step("host-managed-check", func() (string, error) { return x.checkNotHostManaged() }); err != nil {
		return err
	}
	x.res.InstallMode = InstallModeContainer

	if loaded == o.Version {
		return x.kmdAlreadyLoaded(ctx, o)
	}
	if err := x.step("load-allowed", func() (string, error) { return x.checkLoadAllowed(o.ModuleSigner != "") }); err != nil {
		return err
	}
	if loaded != "" && !o.ForceUnload {
		if err := x.step("refcnt-check", func() (string, error) { return x.checkUnused(o.Version) }); err != nil {
			return err
		}
	}
	var ko string
	if err := x.step("obtain-module", func() (detail string, err error) {
		ko, detail, err = x.obtainVouched(ctx, o)
		return detail, err
	}); err != nil {
		return err
	}
	bound := a.devicesBound() // what the previous module served: a restore must serve it again
	// From rmmod to insmod the node has no driver: asked to stop, the swap
	// finishes first.
	if err := x.critical(ctx, "the module swap", func(ctx context.Context) error {
		if loaded != "" {
			if err := x.step("unload", func() (string, error) { return x.unload(ctx, o) }); err != nil {
				return err
			}
		}
		x.res.Changed = true
		return x.step("insmod", func() (string, error) { return x.insmod(ctx, ko, loaded) })
	}); err != nil {
		return err
	}
	if err := x.step("verify", func() (string, error) { return x.verifyLoaded(o.Version) }); err != nil {
		return err
	}
	if err := x.step("verify-devices", func() (string, error) { return x.verifyDevices(ctx, loaded, bound) }); err != nil {
		return err
	}
	x.afterInstall(ctx, o, ko)
	return nil
}

// kmdAlreadyLoaded is the operator's fast path: nothing to reload, but the
// udev rule and reboot persistence are still (re)applied.
func (x *execution) kmdAlreadyLoaded(ctx context.Context, o KMDOptions) error {
	_ = x.step("fast-path", func() (string, error) {
		return "tt-kmd " + o.Version + " already loaded", nil
	})
	if o.SkipPersist {
		x.afterInstall(ctx, o, "")
		return nil
	}
	// With a vouched module (a re-run after an interrupted one) that is
	// what boot loads; without, the node's own cached copy of the version
	// (the one it loaded).
	var ko string
	if err := x.step("obtain-module", func() (detail string, err error) {
		if o.ModuleSHA256 != "" {
			ko, detail, err = x.obtainVouched(ctx, o)
			return detail, err
		}
		own := x.agent.cacheEntries(x.res.Kernel, o.Version)
		if len(own) == 0 {
			return "", fmt.Errorf("the node's cache has no tt-kmd %s for kernel %s", o.Version, x.res.Kernel)
		}
		ko = own[0].path
		return "the node's own cached " + ko, nil
	}); err != nil {
		// The right driver is running; only reboot persistence is missing.
		x.warn("module is loaded but could not be made reboot-persistent: %v", err)
		x.afterInstall(ctx, o, "")
		return nil
	}
	x.afterInstall(ctx, o, ko)
	return nil
}

// afterInstall applies the best-effort extras: device permissions and
// reboot persistence. Their failures are warnings: the driver works.
func (x *execution) afterInstall(ctx context.Context, o KMDOptions, ko string) {
	if err := x.step("udev", func() (string, error) { return x.installUdev() }); err != nil {
		x.warn("udev: %v", err)
	}
	if o.SkipPersist {
		return
	}
	if ko != "" {
		if err := x.step("persist", func() (string, error) { return x.persist(ctx, ko, x.res.Kernel) }); err != nil {
			x.warn("persist: %v", err)
		} else {
			x.res.Persisted = true
			x.res.PersistedKernels = append(x.res.PersistedKernels, x.res.Kernel)
		}
	}
	x.persistKernels(ctx, o)
}

func (x *execution) checkNotHostManaged() (string, error) {
	a := x.agent
	signals := []string{}
	if fi, err := os.Stat(a.hostPath(dkmsStateDir)); err == nil && fi.IsDir() {
		signals = append(signals, "/"+dkmsStateDir)
	}
	matches, _ := filepath.Glob(a.hostPath(dkmsSourceGlob))
	for _, m := range matches {
		rel, _ := filepath.Rel(a.Root, m)
		signals = append(signals, "/"+rel)
	}
	if len(signals) == 0 {
		return "no DKMS install found", nil
	}
	x.res.InstallMode = InstallModeHost
	return "", fail(ReasonHostManaged, "tt-kmd is managed by the host (DKMS: %v); refusing to touch it (loaded version %q)", signals,
		x.res.Before)
}

// checkLoadAllowed refuses before anything is unloaded when the kernel
// would refuse the module the agent builds: with kernel.modules_disabled,
// or, unless it signs, with module.sig_enforce or lockdown (Secure Boot).
// Otherwise the old driver would be unloaded and the new one refused.
func (x *execution) checkLoadAllowed(signing bool) (string, error) {
	refused, allowed := x.agent.loadPolicy()
	if refused != "" && signing && x.agent.signatureRequired() {
		return "the kernel loads only signed modules; the module kubectl tt vouched for is signed (checked before it is loaded)", nil
	}
	if refused != "" {
		return "", fail(ReasonInsmodFailed, "%s; tt-kmd %q stays loaded", refused, x.res.Before)
	}
	return allowed, nil
}

// exitingHolders bounds the wait for a refcount that no process in /proc
// explains to drop: processes that are exiting.
const exitingHolders = 5 * time.Second

func (x *execution) checkUnused(version string) (string, error) {
	a := x.agent
	refs, err := readInt(a.hostPath(filepath.Join(moduleSysfs, "refcnt")))
	if err != nil {
		return "", err
	}
	if refs == 0 {
		return "refcnt 0", nil
	}
	holders, err := findHolders(a.Root)
	if err != nil {
		return "", err
	}
	if len(holders) == 0 {
		// The last holders may be exiting (a drained pod's container dies
		// as its pod goes): their fds close, then their /proc entries go.
		// With none left in /proc, the count is given a moment to drop.
		for deadline := time.Now().Add(exitingHolders); refs > 0 && time.Now().Before(deadline); {
			time.Sleep(a.pollInterval())
			if refs, err = readInt(a.hostPath(filepath.Join(moduleSysfs, "refcnt"))); err != nil {
				return "", err
			}
		}
		if refs == 0 {
			return "refcnt 0 (its last holders exited)", nil
		}
		if holders, err = findHolders(a.Root); err != nil {
			return "", err
		}
	}
	x.res.Holders = holders
	return "", fail(ReasonDeviceInUse,
		"tt-kmd %s loaded with refcnt %d; holders: %s; refcnt > 0 and forceUnload is false; cannot reinstall %s "+
			"(drain the node or use --force-unload)",
		x.res.Before, refs, describeHolders(holders), version)
}

func (x *execution) verifyLoaded(want string) (string, error) {
	got, err := readOptional(x.agent.hostPath(filepath.Join(moduleSysfs, "version")))
	if err != nil {
		return "", err
	}
	if got != want {
		return "", fail(ReasonVersionMismatch, "post-insmod /sys/module reports '%s', expected '%s'", got, want)
	}
	return "/sys/module/tenstorrent/version = " + got, nil
}

// buildJobs is make's -j: the operator uses $(nproc).
func buildJobs() int { return max(1, runtime.NumCPU()) }
