package nodeagent

import (
	"context"
	"fmt"
	"os"
	"time"
)

// KMDBuildOptions configures the build of tt-kmd for the running kernel,
// once per kernel of a roll: kubectl tt reads the module from the helper's
// log, checks it, signs it when it holds the key, and shares it. Nothing is
// loaded or unloaded, so the node need not be out of service.
type KMDBuildOptions struct {
	Version string
	// GitURL is the tt-kmd repository; default DefaultKMDGitURL.
	GitURL string
	// Commit is the commit the tag must resolve to: kubectl tt resolves it
	// once per roll and pins every node to it; "" only when no probe listed
	// the tag (the commit checked out is then reported, and pinned).
	Commit string
	// Timeout bounds the build; default 10 minutes.
	Timeout time.Duration
}

// KMDBuild builds tt-kmd o.Version for the running kernel and prints it on
// a.Publish (gzip, base64, between markers). The result's Module describes
// what was printed.
func (a *Agent) KMDBuild(ctx context.Context, o KMDBuildOptions) Result {
	if o.GitURL == "" {
		o.GitURL = DefaultKMDGitURL
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	x := a.begin(OpKMDBuild, o.Version)
	switch {
	case ValidateKMDVersion(o.Version) != nil:
		return x.finish(ctx, fail(ReasonInvalidInput, "--version: %v", ValidateKMDVersion(o.Version)))
	case ValidateSourceURL(o.GitURL) != nil:
		return x.finish(ctx, fail(ReasonInvalidInput, "--git-url: %v", ValidateSourceURL(o.GitURL)))
	case ValidateCommit(o.Commit) != nil:
		return x.finish(ctx, fail(ReasonInvalidInput, "--commit: %v", ValidateCommit(o.Commit)))
	case a.Publish == nil:
		return x.finish(ctx, fail(ReasonInvalidInput, "nowhere to print the module"))
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return x.finish(ctx, x.kmdBuild(ctx, o))
}

func (x *execution) kmdBuild(ctx context.Context, o KMDBuildOptions) error {
	a := x.agent
	kver, err := x.readKernel()
	if err != nil {
		return err
	}
	var ko string
	var info ModuleInfo
	if err := x.step("build", func() (string, error) {
		ko, info, err = x.build(ctx, o.Version, o.GitURL, o.Commit, kver, x.res.KernelBuild)
		if err != nil {
			return "", err
		}
		return "built from ttkmd-" + o.Version + " (commit " + info.Commit + ") at " + ko, nil
	}); err != nil {
		return err
	}
	x.res.Commit = info.Commit
	return x.step("print", func() (string, error) {
		raw, err := os.ReadFile(ko)
		if err != nil {
			return "", err
		}
		if hexSHA256(raw) != info.SHA256 {
			return "", fail(ReasonBuildFailed, "%s changed after its build", ko)
		}
		n, err := writeModuleFrame(a.Publish, raw)
		if err != nil {
			return "", err
		}
		info.Source = "build"
		x.res.Module = &info
		return fmt.Sprintf("printed for kubectl tt (%d bytes gzipped, SHA-256 %s…)", n, info.SHA256[:12]), nil
	})
}
