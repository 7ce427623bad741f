package tt

import (
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// KMDConfig is what `kubectl tt upgrade kmd` was asked to do.
type KMDConfig struct {
	Version string
	// Commit pins the commit the tag ttkmd-<Version> must resolve to; ""
	// pins the one the first probe sees, for the whole roll.
	Commit string
	// GitURL is the tt-kmd repository the helpers clone; "" is the
	// agent's default (upstream).
	GitURL      string
	DeployGates []string
	// Drain evicts device-holding pods (pass 1); FullNode also drains the
	// rest of the node (pass 2), limited to PodSelector when set.
	Drain        bool
	FullNode     bool
	PodSelector  labels.Selector
	DrainTimeout time.Duration
	ForceUnload  bool
	// Force evicts bare pods (no controller), as kubectl drain --force;
	// DeleteEmptyDirData and GracePeriod as kubectl drain's.
	Force              bool
	DeleteEmptyDirData bool
	GracePeriod        *int64
	Helper             HelperConfig
	RunID              string
	// MaxParallel bounds the nodes out of service at once (cordon to
	// uncordon), counted from the cluster; default 1, as the operator.
	MaxParallel int
	// MaxUnavailablePer bounds, per label key, the nodes sharing a value
	// of it that are out of service at once.
	MaxUnavailablePer map[string]int
	// Signing is the key kubectl tt signs the modules it vouches for with
	// (kernels that load only signed ones).
	Signing SigningConfig

	share *moduleShare
}

// TargetEnded tells the runbook a node's roll ended (any outcome): a
// module it was to build for its kernel group will not come from it, so
// the nodes waiting for it go on.
func (c *KMDConfig) TargetEnded(node string) {
	if c.share != nil {
		c.share.release(node)
	}
}

// Validate rejects bad input before any API call.
func (c *KMDConfig) Validate() error {
	if err := nodeagent.ValidateKMDVersion(c.Version); err != nil {
		return fmt.Errorf("--version: %v", err)
	}
	if err := nodeagent.ValidateCommit(c.Commit); err != nil {
		return fmt.Errorf("--kmd-commit: %v", err)
	}
	if c.GitURL != "" {
		if err := nodeagent.ValidateSourceURL(c.GitURL); err != nil {
			return fmt.Errorf("--git-url: %v", err)
		}
		if u, err := url.Parse(c.GitURL); err == nil && (u.RawQuery != "" || u.ForceQuery) {
			// It goes into the helper's argv, readable by more people than a Secret.
			return fmt.Errorf("--git-url %s: a git URL with a query string is not supported", nodeagent.RedactURL(c.GitURL))
		}
	}
	for _, g := range c.DeployGates {
		if errs := validateLabelKey(g); errs != "" {
			return fmt.Errorf("--deploy-gate %q: %s", g, errs)
		}
	}
	if c.Helper.Timeout != 0 && c.Helper.Timeout < time.Minute {
		return fmt.Errorf("--helper-timeout %s is too short: a module build takes minutes (at least 1m)", c.Helper.Timeout)
	}
	if c.MaxParallel < 0 {
		return fmt.Errorf("--max-parallel must be at least 1, not %d", c.MaxParallel)
	}
	if err := ValidateUnavailablePer(c.MaxUnavailablePer); err != nil {
		return err
	}
	if err := c.Signing.validate(); err != nil {
		return err
	}
	return c.Helper.validate()
}

func (c *KMDConfig) drainSelects(p *corev1.Pod) bool {
	return c.PodSelector == nil || c.PodSelector.Matches(labels.Set(p.Labels))
}

// gitURL is the repository the helpers clone: always named in their
// command, so the admission policy checks it against the admin's list.
func (c *KMDConfig) gitURL() string {
	if c.GitURL == "" {
		return nodeagent.DefaultKMDGitURL
	}
	return c.GitURL
}

func (c *KMDConfig) drainFlags() drainFlags {
	return drainFlags{force: c.Force, deleteEmptyDirData: c.DeleteEmptyDirData, gracePeriod: c.GracePeriod}
}
