package nodeagent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// TagCheck is the probe's look at the tt-kmd remote: does tag
// ttkmd-<version> exist, and which commit does it name. Made only when the
// node would build (the module is neither loaded nor cached), so a cache
// hit needs no network.
type TagCheck struct {
	Tag    string `json:"tag"`
	URL    string `json:"url"`
	Found  bool   `json:"found"`
	Commit string `json:"commit,omitempty"`
	// Error says why the remote could not be listed ("" when it was).
	Error string `json:"error,omitempty"`
}

// tagListTimeout bounds git ls-remote inside the probe's own budget.
const tagListTimeout = time.Minute

// checkTag lists tag (and its peeled commit, for an annotated tag) at url,
// as the clone would see it.
func (x *execution) checkTag(ctx context.Context, url, tag string) *TagCheck {
	c := &TagCheck{Tag: tag, URL: RedactURL(url)}
	ctx, cancel := context.WithTimeout(ctx, tagListTimeout)
	defer cancel()
	ref := "refs/tags/" + tag
	r := x.run(ctx, []string{"git", "ls-remote", url, ref, ref + "^{}"})
	if r.err != nil {
		// git's last line says why (resolve, TLS, auth); no more is kept.
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		c.Error = keepHead(strings.TrimSpace(r.err.Error()+": "+lines[len(lines)-1]), 300)
		return c
	}
	var direct, peeled string
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !commitRE.MatchString(f[0]) {
			continue
		}
		switch f[1] {
		case ref:
			direct = f[0]
		case ref + "^{}":
			peeled = f[0]
		}
	}
	c.Found = direct != ""
	c.Commit = direct
	if peeled != "" { // an annotated tag: the clone checks out the commit it names
		c.Commit = peeled
	}
	return c
}

// loadPolicy reads whether the kernel would load an unsigned module:
// refused says why not ("" when it would), allowed describes the policy.
func (a *Agent) loadPolicy() (refused, allowed string) {
	disabled, _ := readOptional(a.hostPath(modulesDisabledPath))
	enforce, _ := readOptional(a.hostPath(sigEnforcePath))
	lockdown, _ := readOptional(a.hostPath(lockdownPath))
	mode := ""
	if i, j := strings.Index(lockdown, "["), strings.Index(lockdown, "]"); i >= 0 && j > i {
		mode = lockdown[i+1 : j]
	}
	switch {
	case disabled == "1":
		return "kernel.modules_disabled is 1: the kernel loads and unloads no module until reboot", ""
	case enforce == "Y" || (mode != "" && mode != "none"):
		return "the kernel refuses unsigned modules (module.sig_enforce=" + orDash(enforce) + ", lockdown " + strconv.Quote(orDash(mode)) +
			"): an unsigned module would not load; have kubectl tt sign it with a key the kernel trusts (enrolled as a MOK): " +
			"kubectl tt upgrade kmd --signing-key FILE --signing-cert FILE (files on your machine)", ""
	}
	return "", "unsigned modules load (lockdown " + orDash(mode) + ", sig_enforce " + orDash(enforce) + ")"
}

// hostHas reports an executable name in the host's /usr/bin (the build runs
// in a chroot of the host); with the agent on the host itself, on PATH.
func hostHas(root, name string) bool {
	if root == "/" || root == "" {
		_, err := exec.LookPath(name)
		return err == nil
	}
	_, err := os.Lstat(filepath.Join(root, "usr/bin", name)) // Lstat: an absolute link points into the host
	return err == nil
}

// signatureRequired: the kernel loads modules, but only signed ones
// (module.sig_enforce or lockdown), so signing with a trusted key lets the
// module load.
func (a *Agent) signatureRequired() bool {
	disabled, _ := readOptional(a.hostPath(modulesDisabledPath))
	refused, _ := a.loadPolicy()
	return refused != "" && disabled != "1"
}
