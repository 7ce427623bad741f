package tt

import (
	"context"
	"testing"

	"github.com/rollbook/rollbook/pkg/runbook"
)

type mapLease map[string]string

func (m mapLease) Annotation(k string) (string, bool) { v, ok := m[k]; return v, ok }
func (m mapLease) SetAnnotation(_ context.Context, k string, v *string) error {
	if v == nil {
		delete(m, k)
	} else {
		m[k] = *v
	}
	return nil
}

func TestForceCampaignIsScopedToItsRunAndNodes(t *testing.T) {
	ctx := context.Background()
	ab := []runbook.Target{runbook.NodeTarget{Node: "a"}, runbook.NodeTarget{Node: "b"}}
	lease := mapLease{}
	first, resumed, err := ForceCampaign(ctx, lease, "19.9.0.0", ab)
	if err != nil || resumed {
		t.Fatalf("first: %v %v", resumed, err)
	}
	// Interrupted: the same command resumes the same campaign.
	_ = EndForceCampaign(ctx, lease, runbook.Result{Outcome: runbook.OutcomeInterrupted})
	if again, resumed, _ := ForceCampaign(ctx, lease, "19.9.0.0", []runbook.Target{ab[1], ab[0]}); !resumed || !again.Equal(first) {
		t.Fatalf("an interrupted campaign over the same nodes must resume: %v %v", resumed, again)
	}
	// Other nodes or another readback start their own.
	if _, resumed, _ := ForceCampaign(ctx, mapLease{AnnForceCampaign: lease[AnnForceCampaign]}, "19.9.0.0", ab[:1]); resumed {
		t.Fatal("a campaign over other nodes resumed")
	}
	if _, resumed, _ := ForceCampaign(ctx, mapLease{AnnForceCampaign: lease[AnnForceCampaign]}, "19.0.0.0", ab); resumed {
		t.Fatal("a campaign for another readback resumed")
	}
	// A failed forced run ends its campaign: the next forced run starts afresh.
	_ = EndForceCampaign(ctx, lease, runbook.Result{Outcome: runbook.OutcomeFailed})
	if _, ok := lease[AnnForceCampaign]; ok {
		t.Fatal("a failed campaign was kept")
	}
}
