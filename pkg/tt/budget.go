package tt

import (
	"fmt"
	"maps"
	"slices"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// The guards a cordon passes for the run's shared budgets: how many nodes
// may be out of service at once, overall and per label value.

// cordonGuards orders a cordon's guards: what refuses at once first (the
// probe, a PDB only a person can change), then the budgets shared with the
// run's other nodes, and last a PDB waited for, decided once a slot is free.
func cordonGuards(probe runbook.Guard[Facts], pdb pdbGuardPair, budgets ...runbook.Guard[Facts]) []runbook.Guard[Facts] {
	out := append([]runbook.Guard[Facts]{probe}, pdb.refuse...)
	return append(append(out, budgets...), pdb.wait...)
}

// outOfServiceBudget refuses a cordon that would put more than max nodes
// out of service.
func outOfServiceBudget(limit int) runbook.Guard[Facts] {
	return runbook.Guard[Facts]{
		Name:         "no more than --max-parallel nodes out of service",
		SharedBudget: true,
		// The same count for every node not out yet: one found spent
		// holds for the nodes queued behind it until a node ends.
		Uniform: true,
		Check: func(f Facts) (bool, string) {
			return limit <= 0 || f.OthersOut < limit, fmt.Sprintf("%d node(s) are already out of service by rollbook "+
				"(at most %d at once), some left cordoned by failures; fix them and re-run", f.OthersOut, limit)
		},
		// A node taking the last slot leaves none for the nodes behind it
		// until one ends: they need not observe that.
		LastShare: func(f Facts) bool { return limit > 0 && f.OthersOut+1 >= limit },
	}
}

// ValidateUnavailablePer checks --max-unavailable-per LABEL=N: a label
// key and at least one node.
func ValidateUnavailablePer(m map[string]int) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if errs := validateLabelKey(k); errs != "" {
			return fmt.Errorf("--max-unavailable-per %s: %s", k, errs)
		}
		if m[k] < 1 {
			return fmt.Errorf("--max-unavailable-per %s=%d: at least 1 node per label value must be allowed", k, m[k])
		}
	}
	return nil
}

// perLabelBudget refuses a cordon that would put more than limits[L] nodes
// sharing this node's value of label L out of service at once (at most one
// node per rack, per zone): --max-unavailable-per L=N.
func perLabelBudget(limits map[string]int) []runbook.Guard[Facts] {
	var out []runbook.Guard[Facts]
	for _, key := range slices.Sorted(maps.Keys(limits)) {
		limit := limits[key]
		out = append(out, runbook.Guard[Facts]{
			Name:         fmt.Sprintf("no more than %d node(s) per %s out of service", limit, key),
			SharedBudget: true,
			Check: func(f Facts) (bool, string) {
				v, ok := f.Node.Labels[key]
				if !ok {
					return true, ""
				}
				same := 0
				for _, l := range f.OthersOutLabels {
					if w, ok := l[key]; ok && w == v {
						same++
					}
				}
				return same < limit, fmt.Sprintf("%d node(s) with %s=%s are already out of service by rollbook (at most %d at once)",
					same, key, v, limit)
			},
		})
	}
	return out
}
