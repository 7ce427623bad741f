package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// ReleaseRunbookName names the release runbook.
const ReleaseRunbookName = "tt-release"

// ttRunbooks own cordons and step clocks on nodes.
var ttRunbooks = []string{KMDRunbookName, SMIRunbookName, FirmwareRunbookName, ProbeRunbookName}

// ReleaseFacts is one node, as release sees it.
type ReleaseFacts struct {
	Node *corev1.Node
	// Helpers are rollbook's helper pods on the node that still run.
	Helpers []corev1.Pod
}

// ttOwner is the tt runbook owning the node's cordon, or "".
func (f ReleaseFacts) ttOwner() string {
	owner := kube.CordonStateOf(f.Node).Owner
	for _, rb := range ttRunbooks {
		if owner == rb {
			return owner
		}
	}
	return ""
}

// bookkeeping lists rollbook tt annotations a finished or abandoned run may
// leave: step clocks and the left-cordoned note (the cordon's own are
// cleared by uncordon).
func (f ReleaseFacts) bookkeeping() []string {
	var keys []string
	for _, rb := range ttRunbooks {
		if _, ok := f.Node.Annotations[runbook.TimerKey(rb)]; ok {
			keys = append(keys, runbook.TimerKey(rb))
		}
	}
	if _, ok := f.Node.Annotations[kube.AnnLeftCordoned]; ok && f.ttOwner() == "" {
		keys = append(keys, kube.AnnLeftCordoned)
	}
	sort.Strings(keys)
	return keys
}

// NeedsRelease reports whether an abandoned tt run left anything on n.
func NeedsRelease(n *corev1.Node) bool {
	f := ReleaseFacts{Node: n}
	_, gates := n.Annotations[AnnGatesPrior]
	return gates || f.ttOwner() != "" || len(f.bookkeeping()) > 0
}

// ReleaseRunbook lifts only what a tt run set on a node and left behind:
// the deploy gates it closed (put back to their recorded prior values), its
// cordon (never anyone else's) and its bookkeeping annotations. Module,
// firmware and labels stay as they are: re-run the upgrade to finish those.
func ReleaseRunbook(cs kubernetes.Interface, rec kube.Recorder) *runbook.Runbook[ReleaseFacts] {
	return &runbook.Runbook[ReleaseFacts]{
		Name:  ReleaseRunbookName,
		Title: "Release nodes an abandoned tt run left behind",
		Doc: "After a run was abandoned (not to be resumed), give the nodes back as they were before it: " +
			"reopen the deploy gates it closed, lift its cordon, remove its bookkeeping. A cordon or a label " +
			"rollbook did not set is never touched.",
		Observe: func(ctx context.Context, t runbook.Target) (ReleaseFacts, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, t.Ref().Name, metav1.GetOptions{})
			if err != nil {
				return ReleaseFacts{}, err
			}
			f := ReleaseFacts{Node: n}
			pods, err := kube.PodsOnNode(ctx, cs, n.Name)
			for _, p := range pods {
				if _, helper := p.Labels[kube.LabelHelper]; helper && !kube.PodTerminal(&p) {
					f.Helpers = append(f.Helpers, p)
				}
			}
			return f, err
		},
		Steps: []runbook.Step[ReleaseFacts]{
			{
				ID: "tt.release.gates", Title: "Reopen the deploy gates",
				Doc: "Put every deploy-gate label the run closed back to its recorded prior value (or remove it if it was absent).",
				Done: func(f ReleaseFacts) (bool, string) {
					_, closed := f.Node.Annotations[AnnGatesPrior]
					return !closed, map[bool]string{true: "gates closed by rollbook", false: "no gate closed by rollbook"}[closed]
				},
				Guards: []runbook.Guard[ReleaseFacts]{noHelperRunning},
				Plan: func(f ReleaseFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "label", Detail: "restore deploy gates"}}
				},
				Act: func(ctx context.Context, f ReleaseFacts) error { return openGates(ctx, cs, rec, f.Node) },
			},
			{
				ID: "tt.release.uncordon", Title: "Lift rollbook's cordon",
				Doc: "Uncordon the node if a tt runbook cordoned it; a cordon set by anyone else stays.",
				Done: func(f ReleaseFacts) (bool, string) {
					return f.ttOwner() == "", kube.CordonStateOf(f.Node).String()
				},
				Guards: []runbook.Guard[ReleaseFacts]{noHelperRunning},
				Plan: func(f ReleaseFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "uncordon", Detail: "cordoned by " + f.ttOwner()}}
				},
				Act: func(ctx context.Context, f ReleaseFacts) error {
					_, err := kube.UncordonNode(ctx, cs, rec, f.Node, f.ttOwner())
					return err
				},
			},
			{
				ID: "tt.release.annotations", Title: "Remove rollbook's bookkeeping",
				Doc: "Remove the step clocks and notes tt runs keep on the node, so a later run starts afresh.",
				Done: func(f ReleaseFacts) (bool, string) {
					keys := f.bookkeeping()
					return len(keys) == 0, fmt.Sprintf("%d annotation(s) left: %s", len(keys), strings.Join(keys, ", "))
				},
				Plan: func(f ReleaseFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "annotate",
						Detail: "remove " + strings.Join(f.bookkeeping(), ", ")}}
				},
				Act: func(ctx context.Context, f ReleaseFacts) error {
					change := kube.NodeChange{Annotations: map[string]*string{}}
					for _, k := range f.bookkeeping() {
						change.Annotations[k] = nil
					}
					if _, err := kube.SetNodeKeys(ctx, cs, f.Node.Name, change); err != nil {
						return err
					}
					rec.Record(ctx, kube.NodeRef(f.Node), false, "Released", "removed "+strings.Join(f.bookkeeping(), ", "))
					return nil
				},
			},
		},
	}
}

// noHelperRunning: a helper still swapping a module or flashing must finish
// before pods may come back to the node.
var noHelperRunning = runbook.Guard[ReleaseFacts]{
	Name: "no rollbook helper still running on the node",
	Check: func(f ReleaseFacts) (bool, string) {
		if len(f.Helpers) == 0 {
			return true, ""
		}
		p := f.Helpers[0]
		return false, fmt.Sprintf("helper %s/%s (%s) is %s: wait for it to finish (kubectl tt logs %s), "+
			"or re-run the upgrade to resume instead", p.Namespace, p.Name, p.Labels[kube.LabelHelper], p.Status.Phase, f.Node.Name)
	},
}
