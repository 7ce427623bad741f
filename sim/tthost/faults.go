package tthost

import (
	"fmt"
	"strings"
)

// Host situations a tt scenario can start with, each naming its nodes in a
// comma-separated environment variable (simtest passes its environment to
// the sim):
const (
	// EnvLyingKMD: the kmd label says LyingKMD, written from intent or by
	// hand, while the host still runs FleetKMD.
	EnvLyingKMD = "ROLLBOOK_SIM_TT_LYING_KMD"
	// EnvRebooted: the host rebooted into RebootKernel after its module was
	// installed; nothing loads tt-kmd for the new kernel, so the labels are
	// stale. The new kernel's headers are there.
	EnvRebooted = "ROLLBOOK_SIM_TT_REBOOTED"
	// EnvOldGlibc: the host runs an older OS release (glibc OldGlibc) than
	// the helper image's tt-smi flavour was built for.
	EnvOldGlibc = "ROLLBOOK_SIM_TT_OLD_GLIBC"
)

// Values of those situations.
const (
	LyingKMD     = "2.9.1"
	RebootKernel = "6.8.0-49-generic"
	OldGlibc     = "2.31" // Ubuntu 20.04
)

// ApplySituations changes plan for the situations getenv names and returns
// a line per changed node for the sim's log; a node that is not in plan is
// an error, so a typo does not silently test nothing.
func ApplySituations(plan []NodePlan, getenv func(string) string) ([]string, error) {
	byNode := map[string]*NodePlan{}
	for i := range plan {
		byNode[plan[i].Node] = &plan[i]
	}
	var log []string
	for _, s := range []struct {
		env   string
		apply func(p *NodePlan) string
	}{
		{EnvLyingKMD, func(p *NodePlan) string {
			p.Labels[LabelKMDVersion] = LyingKMD
			return fmt.Sprintf("kmd label says %s, the host runs %s", LyingKMD, p.Spec.LoadedKMD)
		}},
		{EnvRebooted, func(p *NodePlan) string {
			p.Spec.RebootedInto = RebootKernel
			return fmt.Sprintf("rebooted into %s: tt-kmd not loaded, labels stale", RebootKernel)
		}},
		{EnvOldGlibc, func(p *NodePlan) string {
			p.Spec.HostGlibc = OldGlibc
			return "host glibc " + OldGlibc + " (older than the helper image's tt-smi needs)"
		}},
	} {
		for _, n := range strings.Split(getenv(s.env), ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			p, ok := byNode[n]
			if !ok {
				return nil, fmt.Errorf("%s names %q, which is not a node of this fleet", s.env, n)
			}
			if p.Role != RolePlain {
				return nil, fmt.Errorf("%s names %s, a %s node; name a plain one", s.env, n, p.Role)
			}
			log = append(log, "tt host "+n+": "+s.apply(p))
		}
	}
	return log, nil
}
