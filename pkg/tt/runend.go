package tt

import (
	"context"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// AnnLeftCordoned says why a finished run left the node cordoned; the
// uncordon step removes it.
const AnnLeftCordoned = "rollbook.dev/left-cordoned"

// MarkLeftCordoned records, on every node the run leaves cordoned by
// runbook rb, why it stopped there, so nobody mistakes the cordon for a
// forgotten one. Dry runs change nothing.
func MarkLeftCordoned(ctx context.Context, cs kubernetes.Interface, rb string, res runbook.Result) error {
	if res.DryRun {
		return nil
	}
	// An interrupted run still says why it stopped.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	for _, t := range res.Targets {
		name := strings.TrimPrefix(t.Target, "node/")
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := kube.CordonStateOf(n); !st.Cordoned || st.Owner != rb {
			continue
		}
		why := t.Error
		if why == "" {
			why = string(t.Outcome) + " at " + t.State
		}
		if len(why) > 500 {
			why = why[:500] + "…"
		}
		if n.Annotations[AnnLeftCordoned] == why {
			continue
		}
		if _, err := kube.SetNodeKeys(ctx, cs, name, kube.NodeChange{Annotations: map[string]*string{AnnLeftCordoned: &why}}); err != nil {
			return err
		}
	}
	return nil
}
