package tt

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
)

// The cordon's PDB guards decide on what was read: every pod healthy at 0
// refuses at once, a budget whose pods are being replaced is waited for, an
// unready pod the eviction API lets go (unhealthyPodEvictionPolicy) and a
// pod the drain does not evict block nothing.
func TestPDBGuardsRefuseOrWait(t *testing.T) {
	pod := func(name, app string, ready bool) corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "w", Labels: map[string]string{"app": app},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: app, Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	}
	pdb := func(app string, healthy, expected, desired int32, policy *policyv1.UnhealthyPodEvictionPolicyType) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: app + "-pdb", Namespace: "w", Generation: 1},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				UnhealthyPodEvictionPolicy: policy},
			Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: healthy, ExpectedPods: expected,
				DesiredHealthy: desired}}
	}
	inFlight := func(p policyv1.PodDisruptionBudget) policyv1.PodDisruptionBudget {
		p.Status.DisruptedPods = map[string]metav1.Time{"other": metav1.Now()}
		return p
	}
	for _, c := range []struct {
		name           string
		pod            corev1.Pod
		pdb            policyv1.PodDisruptionBudget
		evicted        bool
		refuse, waited bool
	}{
		{"all healthy at 0: a person", pod("p", "a", true), pdb("a", 1, 1, 1, nil), true, true, false},
		{"one being replaced: waited for", pod("p", "a", true), pdb("a", 1, 2, 2, nil), true, false, true},
		{"not evicted", pod("p", "a", true), pdb("a", 1, 1, 1, nil), false, false, false},
		{"unready, AlwaysAllow", pod("p", "a", false), pdb("a", 0, 1, 1, ptr.To(policyv1.AlwaysAllow)), true, false, false},
		{"unready, the budget's healthy suffice", pod("p", "a", false), pdb("a", 2, 3, 2, nil), true, false, false},
		{"unready, the budget short", pod("p", "a", false), pdb("a", 1, 3, 2, nil), true, false, true},
		{"another app's PDB", pod("p", "a", true), pdb("b", 1, 1, 1, nil), true, false, false},
		{"an eviction admitted, not yet counted", pod("p", "a", true), inFlight(pdb("a", 2, 2, 2, nil)), true, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := Facts{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, Pods: []corev1.Pod{c.pod},
				PDBs: kube.PDBsByNamespace{"w": {c.pdb}}}
			g := pdbGuards(nil, "tt-kmd", true, func(*Facts, *corev1.Pod) bool { return c.evicted }, 0)
			refuseOK, why := g.refuse[0].Check(f)
			waitOK, _ := g.wait[0].Check(f)
			if refuseOK == c.refuse || waitOK == c.waited {
				t.Errorf("refuses %v (want %v), waits %v (want %v)", !refuseOK, c.refuse, !waitOK, c.waited)
			}
			if c.refuse && (!strings.Contains(why, "PodDisruptionBudget a-pdb (1 of 1 healthy, 0 disruptions allowed)") ||
				!strings.Contains(why, "relax the budget")) {
				t.Errorf("reason %q", why)
			}
			if !g.wait[0].SharedBudget || g.wait[0].Settle == nil || g.refuse[0].SharedBudget {
				t.Error("the waiting guard must be a SharedBudget with a Settle, the refusing one not")
			}
		})
	}
	if g := pdbGuards(nil, "tt-kmd", false, nil, 0); len(g.refuse)+len(g.wait) > 0 {
		t.Error("without the drain there are no PDB guards")
	}
}

// A PDB that allows a disruption now, which other cordoned nodes' drains
// will take first, is waited for (uncordoned), never refused as a person's.
// Allowances beyond the claims pass. (Its Settle, which watches for a
// claimed pod to leave, is held by test/e2e/tt/pdbfirst.)
func TestPDBClaimedByCordonedNodesIsWaitedFor(t *testing.T) {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "w", Labels: map[string]string{"app": "a"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "a", Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady,
			Status: corev1.ConditionTrue}}}}
	pdb := policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "a-pdb", Namespace: "w", Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 3, ExpectedPods: 3, DesiredHealthy: 2,
			DisruptionsAllowed: 1}}
	g := pdbGuards(nil, "tt-kmd", true, func(*Facts, *corev1.Pod) bool { return true }, 0)
	for _, c := range []struct {
		name    string
		allowed int32
		claims  []PDBClaim
		waits   bool
	}{
		{"no claim", 1, nil, false},
		{"one allowed, one claimed", 1, []PDBClaim{{"n1", "a-1"}}, true},
		{"two allowed, one claimed", 2, []PDBClaim{{"n1", "a-1"}}, false},
		{"two allowed, two claimed on one node", 2, []PDBClaim{{"n1", "a-1"}, {"n1", "a-2"}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := pdb
			p.Status.DisruptionsAllowed = c.allowed
			f := Facts{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}, Pods: []corev1.Pod{pod},
				PDBs: kube.PDBsByNamespace{"w": {p}}}
			if c.claims != nil {
				f.PDBClaims = PDBClaims{"w/a-pdb": c.claims}
			}
			if ok, why := g.refuse[0].Check(f); !ok {
				t.Fatalf("refused as a person's: %s", why)
			}
			ok, why := g.wait[0].Check(f)
			if ok == c.waits {
				t.Fatalf("waits %v, want %v: %s", !ok, c.waits, why)
			}
			if c.waits {
				if !strings.Contains(why, "taken by the drain of cordoned node(s) n1") {
					t.Errorf("reason %q", why)
				}
			}
		})
	}
}
