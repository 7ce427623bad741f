package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rollbook/rollbook/pkg/kmodule"
)

// obtainVouched returns the host path of the module kubectl tt vouched for
// (o.ModuleSHA256), before anything is unloaded: from the node's cache when
// it holds exactly those bytes, else from the shared module's volume
// (o.ModuleFrom). The bytes must hash to the vouched SHA-256; when
// o.ModuleSigner is set they must also carry a signature that verifies
// against the certificate whose SHA-256 it is (as the kernel will check);
// and the module must be tt-kmd o.Version built for the running kernel
// (its .modinfo, read in Go and by modinfo). Nothing else is ever loaded:
// the node does not build its own.
func (x *execution) obtainVouched(ctx context.Context, o KMDOptions) (ko, detail string, err error) {
	a := x.agent
	hit := false // the node's cache held the vouched bytes already
	x.res.CacheHit = &hit
	if o.ModuleSHA256 == "" {
		return "", "", fail(ReasonModuleNotVouched, "no module was vouched for this node (the upgrade passes --module-sha256 with "+
			"the module kubectl tt checked); tt-kmd %q stays loaded", x.res.Before)
	}
	// Any cache entry holding exactly the vouched bytes will do (an older
	// rollbook's layout too): what is loaded is decided by the SHA-256.
	candidates := []string{a.cachedModule(x.res.Kernel, o.Version, o.ModuleSHA256)}
	for _, e := range a.cacheEntries(x.res.Kernel, o.Version) {
		if e.rec.SHA256 == o.ModuleSHA256 {
			candidates = append(candidates, e.path)
		}
	}
	for _, cached := range candidates {
		raw, err := os.ReadFile(cached)
		if err != nil || hexSHA256(raw) != o.ModuleSHA256 {
			continue
		}
		info, err := x.checkVouched(ctx, raw, cached, o)
		if err != nil {
			x.warn("the cached module is not used: %v", err)
			continue
		}
		var rec ModuleInfo
		if r, err := verifyCached(cached, ""); err == nil {
			rec = r
		}
		hit = true
		info.Source, info.Commit, info.GitURL, info.BuiltBy = "cache", rec.Commit, rec.GitURL, rec.BuiltBy
		x.res.Module, x.res.Commit = &info, info.Commit
		return cached, fmt.Sprintf("cache hit %s (SHA-256 %s…, as vouched for)", cached, o.ModuleSHA256[:12]), nil
	}
	if o.ModuleFrom == "" {
		return "", "", fail(ReasonModuleNotVouched, "the node's cache has no module with SHA-256 %s and no shared module was "+
			"given; tt-kmd %q stays loaded", o.ModuleSHA256, x.res.Before)
	}
	gz, err := os.ReadFile(filepath.Join(o.ModuleFrom, SharedModuleKey))
	if err != nil {
		return "", "", fail(ReasonModuleNotVouched, "the shared module: %v; tt-kmd %q stays loaded", err, x.res.Before)
	}
	raw, err := Gunzip(gz)
	if err != nil {
		return "", "", fail(ReasonModuleNotVouched, "%v; tt-kmd %q stays loaded", err, x.res.Before)
	}
	if got := hexSHA256(raw); got != o.ModuleSHA256 {
		return "", "", fail(ReasonModuleNotVouched, "the shared module has SHA-256 %s, not the %s kubectl tt checked and "+
			"vouched for: it was changed after it was checked, and is not loaded; tt-kmd %q stays loaded", got, o.ModuleSHA256,
			x.res.Before)
	}
	info, err := x.checkVouched(ctx, raw, "", o)
	if err != nil {
		return "", "", err
	}
	// Where it came from, for the record: informational, the bytes are
	// pinned by their SHA-256.
	var rec ModuleInfo
	if b, err := os.ReadFile(filepath.Join(o.ModuleFrom, SharedInfoKey)); err == nil && json.Unmarshal(b, &rec) == nil {
		info.Commit, info.GitURL, info.BuiltBy, info.KernelBuild = rec.Commit, rec.GitURL, rec.BuiltBy, rec.KernelBuild
		info.KernelConfig = rec.KernelConfig
	}
	// kubectl tt vouched for it as the pinned commit's build (its builder's
	// result named the pin): what a probe later names the loaded build.
	if o.Commit != "" {
		info.Commit = o.Commit
	}
	// The vermagic cannot tell two configs of one release apart; the
	// loader would refuse the module after the rmmod (kmodule.ConfigDigest).
	if rec.KernelConfig != "" && x.res.KernelConfig != "" && rec.KernelConfig != x.res.KernelConfig {
		return "", "", fail(ReasonModuleNotVouched, "the shared module was built by %s for kernel %s of config %s, this node's "+
			"kernel has config %s: the loader would refuse it; tt-kmd %q stays loaded", orDash(rec.BuiltBy), rec.Kernel,
			rec.KernelConfig, x.res.KernelConfig, x.res.Before)
	}
	info.Source = "cluster"
	cached, err := a.storeCached(raw, x.res.Kernel, o.Version, info)
	if err != nil {
		return "", "", err
	}
	x.res.Module, x.res.Commit = &info, info.Commit
	return cached, fmt.Sprintf("the cluster's module built by %s (SHA-256 %s…, as vouched for) at %s", orDash(info.BuiltBy),
		o.ModuleSHA256[:12], cached), nil
}

// checkVouched checks raw (whose SHA-256 is the vouched one) is tt-kmd
// o.Version for the running kernel and, with o.ModuleSigner, signed by
// that certificate. at is where raw is on disk ("" when not yet).
func (x *execution) checkVouched(ctx context.Context, raw []byte, at string, o KMDOptions) (ModuleInfo, error) {
	stays := fmt.Sprintf("; tt-kmd %q stays loaded", x.res.Before)
	mi, err := kmodule.ReadInfo(raw)
	if err != nil {
		return ModuleInfo{}, fail(ReasonModuleNotVouched, "the vouched module: %v%s", err, stays)
	}
	switch {
	case mi.Name != kmdModuleName:
		return ModuleInfo{}, fail(ReasonModuleNotVouched, "the vouched module is %q, not %s%s", mi.Name, kmdModuleName, stays)
	case mi.Version != o.Version:
		return ModuleInfo{}, fail(ReasonModuleNotVouched, "the vouched module is tt-kmd %q, not %s%s", mi.Version, o.Version, stays)
	case mi.Release() != x.res.Kernel:
		return ModuleInfo{}, fail(ReasonModuleNotVouched, "the vouched module was built for kernel %q (vermagic %q), this node runs "+
			"%s%s", mi.Release(), mi.Vermagic, x.res.Kernel, stays)
	}
	info := ModuleInfo{SHA256: hexSHA256(raw), Size: int64(len(raw)), Version: mi.Version, Vermagic: mi.Vermagic,
		Kernel: x.res.Kernel, Signer: o.ModuleSigner}
	if o.ModuleSigner != "" {
		if err := x.checkSignature(raw, o); err != nil {
			return info, err
		}
	}
	// modinfo reads it too, as the kernel's own tooling would.
	if at == "" {
		dir := x.agent.hostPath(kmdCacheDir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return info, err
		}
		tmp, err := os.CreateTemp(dir, ".vouched-*.ko") // kmod reads a file by a name ending in .ko
		if err != nil {
			return info, err
		}
		defer os.Remove(tmp.Name())
		_, werr := tmp.Write(raw)
		if cerr := tmp.Close(); werr != nil || cerr != nil {
			return info, errors.Join(werr, cerr)
		}
		at = tmp.Name()
	}
	if _, err := x.checkBuilt(ctx, at, o.Version, x.res.Kernel); err != nil {
		return info, err
	}
	return info, nil
}

// checkSignature: the module's signature verifies against the certificate
// the shared module carries, which is the one kubectl tt named by its
// SHA-256 (o.ModuleSigner). The kernel checks it again against the keys it
// trusts; this check only keeps a module it would refuse from replacing a
// working one.
func (x *execution) checkSignature(raw []byte, o KMDOptions) error {
	stays := fmt.Sprintf("; tt-kmd %q stays loaded", x.res.Before)
	if o.ModuleFrom == "" {
		return fail(ReasonModuleNotVouched, "the signing certificate comes with the shared module, and none was given%s", stays)
	}
	der, err := os.ReadFile(filepath.Join(o.ModuleFrom, SharedCertKey))
	if err != nil {
		return fail(ReasonModuleNotVouched, "the signing certificate: %v%s", err, stays)
	}
	cert, err := kmodule.ParseCertificate(der)
	if err != nil {
		return fail(ReasonModuleNotVouched, "the signing certificate: %v%s", err, stays)
	}
	if got := kmodule.CertSHA256(cert.Raw); got != o.ModuleSigner {
		return fail(ReasonModuleNotVouched, "the shared signing certificate has SHA-256 %s, not the %s kubectl tt signs with%s", got,
			o.ModuleSigner, stays)
	}
	if err := kmodule.Verify(raw, cert); err != nil {
		return fail(ReasonModuleNotVouched, "the vouched module's signature: %v%s", err, stays)
	}
	return nil
}
