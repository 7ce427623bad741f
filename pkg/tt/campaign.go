package tt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
	"time"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// AnnForceCampaign on the tt Lease records a forced re-flash in progress
// ("<readback>@<RFC3339>@<nodes hash>"), so a re-run of an interrupted
// forced run resumes it instead of re-flashing the nodes it already did.
const AnnForceCampaign = "rollbook.dev/tt-firmware-force-write"

// Annotated is where the campaign is kept (the session's Lease).
type Annotated interface {
	Annotation(key string) (string, bool)
	SetAnnotation(ctx context.Context, key string, value *string) error
}

// ForceCampaign returns when the forced re-flash to readback of exactly
// these targets started: the time an interrupted earlier run recorded, or
// now (recorded). resumed says which. A campaign over other nodes, or for
// another readback, never carries over.
func ForceCampaign(ctx context.Context, lease Annotated, readback string, targets []runbook.Target) (since time.Time, resumed bool,
	err error) {
	// On the API server's clock, as the node records it is compared with.
	now := kube.ServerNow().UTC().Truncate(time.Second)
	if lease == nil { // dry run
		return now, false, nil
	}
	scope := targetsHash(targets)
	if v, ok := lease.Annotation(AnnForceCampaign); ok {
		parts := strings.Split(v, "@")
		if len(parts) == 3 && parts[0] == readback && parts[2] == scope {
			if t, err := time.Parse(time.RFC3339, parts[1]); err == nil {
				return t, true, nil
			}
		}
	}
	v := readback + "@" + now.Format(time.RFC3339) + "@" + scope
	return now, false, lease.SetAnnotation(ctx, AnnForceCampaign, &v)
}

// EndForceCampaign forgets the campaign unless the run was interrupted: a
// finished, failed or blocked forced run never makes a later one skip nodes.
func EndForceCampaign(ctx context.Context, lease Annotated, res runbook.Result) error {
	if lease == nil || res.DryRun || res.Outcome == runbook.OutcomeInterrupted {
		return nil
	}
	return lease.SetAnnotation(ctx, AnnForceCampaign, nil)
}

func targetsHash(targets []runbook.Target) string {
	names := make([]string, 0, len(targets))
	for _, t := range targets {
		names = append(names, t.Name())
	}
	sort.Strings(names)
	sum := sha256.Sum256([]byte(strings.Join(names, ",")))
	return hex.EncodeToString(sum[:4])
}
