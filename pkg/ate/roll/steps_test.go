package roll

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// walk returns the IDs of the steps done before the first one that is not,
// and that step's first failing guard ("" when it may act): the position
// runbook.Locate gives.
func walk[F any](rb *runbook.Runbook[F], f F) (done []string, blocked string) {
	pos := runbook.Locate(rb, f)
	for _, s := range rb.Steps[:pos.Step] {
		done = append(done, s.ID)
	}
	return done, pos.Guard
}

// plan is what the first step not done would change, as "action object".
func plan[F any](rb *runbook.Runbook[F], f F) []string {
	pos := runbook.Locate(rb, f)
	if pos.Stage == runbook.StageDone || rb.Steps[pos.Step].Plan == nil {
		return nil
	}
	var out []string
	for _, c := range rb.Steps[pos.Step].Plan(f) {
		out = append(out, c.Action+" "+c.Object)
	}
	return out
}

type walkWant struct {
	done    string // comma-separated step IDs done
	blocked string // part of the failing guard's name, "" if none
	plan    string // comma-separated "action object" of the next step
}

func (w walkWant) check(t *testing.T, name string, done []string, blocked string, planned []string) {
	t.Helper()
	if strings.Join(done, ",") != w.done || (w.blocked == "") != (blocked == "") || !strings.Contains(blocked, w.blocked) ||
		w.plan != "" && strings.Join(planned, ",") != w.plan {
		t.Errorf("%s: done %v, blocked by %q, plan %v; want %q, %q, %q", name, done, blocked, planned, w.done, w.blocked, w.plan)
	}
}

// cluster builds the facts ObserveCluster would read: the atelets in
// creation order, nodes name=version, pools.
func rollCluster(atelets []string, nodes map[string]string, pools ...fleet.Pool) *fleet.Cluster {
	c := &fleet.Cluster{Pools: pools}
	for i, v := range atelets {
		c.Atelets = append(c.Atelets, fleet.Atelet{Name: "atelet-" + v, Version: v, Versioned: true,
			Created: time.Unix(int64(i), 0)})
	}
	for n, v := range nodes {
		c.Nodes = append(c.Nodes, fleet.NodeInfo{Name: n, Version: v})
	}
	c.Infer()
	return c
}

func wpool(name, pin, clonedFrom string) fleet.Pool {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ate.dev/v1alpha1", "kind": "WorkerPool",
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name}, "spec": map[string]any{"replicas": int64(1)}}}
	return fleet.Pool{Namespace: "ns", Name: name, Pin: pin, ClonedFrom: clonedFrom, Object: u}
}

var (
	twoAtelets = []string{"v1", "v2"}
	atOld      = map[string]string{"n1": "v1", "n2": "v1"}
	atNew      = map[string]string{"n1": "v2", "n2": "v2"}
	halfway    = map[string]string{"n1": "v2", "n2": "v1"}
	bound      = []ateapi.Actor{{Atespace: "a", Name: "x", State: ateapi.ActorRunning, Worker: "w1"}}
)

// removal facts as observeRemoval builds them from c.
func removalOf(c *fleet.Cluster, r removal, atelet bool, running []string, actors []ateapi.Actor, saved ...string) removalFacts {
	f := removalFacts{c: c, version: r.pick(c), running: running, bound: actors, saved: map[string]bool{},
		backup: BackupOptions{Dir: "/backups", ConfigMap: true}}
	if f.version != "" {
		f.pools = c.PoolsPinnedTo(f.version)
		if atelet {
			f.atelet = &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "atelet-" + f.version, Namespace: fleet.Namespace}}
		}
	}
	for _, k := range saved {
		f.saved[k] = true
	}
	return f
}

func TestRetireSteps(t *testing.T) {
	old, clone := wpool("small", "v1", ""), wpool("small-v2", "v2", "ns/small")
	rb := RetireRunbook(nil, nil, nil, nil, BackupOptions{Dir: "/backups", ConfigMap: true})
	both := "ate.retire.backup,ate.retire.delete-old-pools"
	for _, tc := range []struct {
		name string
		f    removalFacts
		want walkWant
	}{
		{"one atelet: nothing to retire", removalOf(rollCluster([]string{"v2"}, atNew, clone), retireOld, true, nil, nil),
			walkWant{done: both + ",ate.retire.delete-old-atelet"}},
		{"a node unlabelled", removalOf(rollCluster(twoAtelets, map[string]string{"n1": ""}, old, clone), retireOld, true, nil, nil),
			walkWant{blocked: "the roll's shape is known"}},
		{"before the roll", removalOf(rollCluster(twoAtelets, atOld, old, clone), retireOld, true, nil, nil),
			walkWant{blocked: "no node is at OLD"}},
		{"half way", removalOf(rollCluster(twoAtelets, halfway, old, clone), retireOld, true, nil, nil),
			walkWant{blocked: "no node is at OLD"}},
		{"an old-pool pod Running", removalOf(rollCluster(twoAtelets, atNew, old, clone), retireOld, true, []string{"ns/p on n1"}, nil),
			walkWant{blocked: "no old-pool pod is Running"}},
		{"an actor on an old worker", removalOf(rollCluster(twoAtelets, atNew, old, clone), retireOld, true, nil, bound),
			walkWant{blocked: "no actor is bound"}},
		{"an old pool without a clone", removalOf(rollCluster(twoAtelets, atNew, old), retireOld, true, nil, nil),
			walkWant{blocked: "every old pool has a clone"}},
		{"rolled: save first", removalOf(rollCluster(twoAtelets, atNew, old, clone), retireOld, true, nil, nil),
			walkWant{plan: "save workerpool/ns/small,create or update configmap/ns/workerpool-backup-small"}},
		{"saved: delete the old pool", removalOf(rollCluster(twoAtelets, atNew, old, clone), retireOld, true, nil, nil, "ns/small"),
			walkWant{done: "ate.retire.backup", plan: "delete workerpool/ns/small"}},
		{"old pools gone: delete the old atelet", removalOf(rollCluster(twoAtelets, atNew, clone), retireOld, true, nil, nil),
			walkWant{done: both, plan: "delete daemonset/ate-system/atelet-v1"}},
	} {
		done, blocked := walk(rb, tc.f)
		tc.want.check(t, tc.name, done, blocked, plan(rb, tc.f))
	}
}

func TestRollbackSteps(t *testing.T) {
	old, clone := wpool("small", "v1", ""), wpool("small-v2", "v2", "ns/small")
	rb := RollbackRunbook(nil, nil, nil, nil)
	for _, tc := range []struct {
		name string
		f    removalFacts
		want walkWant
	}{
		{"one atelet: nothing to roll back", removalOf(rollCluster([]string{"v1"}, atOld, old), rollbackNew, false, nil, nil),
			walkWant{done: "ate.rollback.delete-clones,ate.rollback.delete-new-atelet"}},
		{"a node still at NEW", removalOf(rollCluster(twoAtelets, halfway, old, clone), rollbackNew, true, nil, nil),
			walkWant{blocked: "no node is at NEW"}},
		{"an actor on a clone's worker", removalOf(rollCluster(twoAtelets, atOld, old, clone), rollbackNew, true, nil, bound),
			walkWant{blocked: "no actor is bound"}},
		{"nodes back: delete the clones, never the old pools", removalOf(rollCluster(twoAtelets, atOld, old, clone), rollbackNew, true,
			nil, nil), walkWant{plan: "delete workerpool/ns/small-v2"}},
		{"clones gone: delete the NEW atelet", removalOf(rollCluster(twoAtelets, atOld, old), rollbackNew, true, nil, nil),
			walkWant{done: "ate.rollback.delete-clones", plan: "delete daemonset/ate-system/atelet-v2"}},
	} {
		done, blocked := walk(rb, tc.f)
		tc.want.check(t, tc.name, done, blocked, plan(rb, tc.f))
	}
}

// Retire and rollback run the same delete steps: only the version differs.
func TestRetireAndRollbackShareTheDeleteSteps(t *testing.T) {
	retire, rollback := RetireRunbook(nil, nil, nil, nil, BackupOptions{}), RollbackRunbook(nil, nil, nil, nil)
	for i, s := range rollback.Steps {
		r := retire.Steps[i+1]
		if strings.ReplaceAll(r.Title, "OLD", "NEW") != s.Title || len(r.Guards) < len(s.Guards) {
			t.Errorf("retire step %s (%q) is not rollback's %s (%q) on OLD", r.ID, r.Title, s.ID, s.Title)
		}
		for j, g := range s.Guards {
			if strings.ReplaceAll(r.Guards[j].Name, "OLD", "NEW") != g.Name {
				t.Errorf("%s guard %d: %q, rollback's: %q", r.ID, j, r.Guards[j].Name, g.Name)
			}
		}
	}
}

func TestSavedBackupsCompareContent(t *testing.T) {
	dir := t.TempDir()
	p := wpool("small", "v1", "")
	b := BackupOptions{Dir: dir}
	check := func(want bool) {
		t.Helper()
		saved, err := savedBackups(t.Context(), nil, []fleet.Pool{p}, b)
		if err != nil || saved[p.Key()] != want {
			t.Fatalf("saved %v (%v), want %v", saved, err, want)
		}
	}
	check(false)
	data, err := PoolBackup(p.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(BackupFile(dir, p), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	check(false)
	if err := os.WriteFile(BackupFile(dir, p), data, 0o600); err != nil {
		t.Fatal(err)
	}
	check(true)
	if strings.Contains(string(data), "uid") {
		t.Errorf("the backup keeps the uid:\n%s", data)
	}
}

func TestRevertSteps(t *testing.T) {
	served := ateapi.Capabilities{Era: "v2", Methods: []string{"RevertActor"}}
	actor := func(s ateapi.ActorState) ateapi.Actor {
		return ateapi.Actor{Atespace: "a", Name: "x", State: s, ExternalSnapshotURI: "gs://snap/x"}
	}
	rb := RevertRunbook(nil, nil, time.Minute)
	for _, tc := range []struct {
		name string
		f    revertFacts
		want walkWant
	}{
		{"crashed", revertFacts{actor(ateapi.ActorCrashed), served}, walkWant{plan: "revert actor/a/x"}},
		{"reverting: the wait confirms it", revertFacts{actor(ateapi.ActorReverting), served}, walkWant{}},
		{"crashed, the API predates RevertActor", revertFacts{actor(ateapi.ActorCrashed), ateapi.Capabilities{Era: "v1"}},
			walkWant{blocked: "serves RevertActor"}},
		{"suspended", revertFacts{actor(ateapi.ActorSuspended), served}, walkWant{done: "ate.actor.revert"}},
		{"resumed since", revertFacts{actor(ateapi.ActorRunning), served}, walkWant{done: "ate.actor.revert"}},
	} {
		done, blocked := walk(rb, tc.f)
		tc.want.check(t, tc.name, done, blocked, plan(rb, tc.f))
	}
	if loss := RevertLoss(actor(ateapi.ActorCrashed)); !strings.Contains(loss, "gs://snap/x") || !strings.Contains(loss, "lost") {
		t.Errorf("RevertLoss = %q", loss)
	}
}

func TestPinPoolsSteps(t *testing.T) {
	pinned, unpinned := wpool("small", "v1", ""), wpool("scratch", "", "")
	rb := PinPoolsRunbook(nil, nil, nil, nil)
	facts := func(c *fleet.Cluster, actors []ateapi.Actor) pinFacts {
		f := pinFacts{c: c, bound: actors}
		for _, p := range c.ServingPools() {
			if p.Pin == "" {
				f.unpinned = append(f.unpinned, p)
			}
		}
		return f
	}
	for _, tc := range []struct {
		name string
		f    pinFacts
		want walkWant
	}{
		{"every pool pinned", facts(rollCluster([]string{"v1"}, atOld, pinned), nil), walkWant{done: "ate.pools.pin"}},
		{"an unpinned pool, no actor on it", facts(rollCluster([]string{"v1"}, atOld, pinned, unpinned), nil),
			walkWant{plan: "patch workerpool/ns/scratch"}},
		{"an unpinned pool serving an actor", facts(rollCluster([]string{"v1"}, atOld, unpinned), bound),
			walkWant{blocked: "no actor is bound"}},
		{"no atelet: OLD unknown", facts(rollCluster(nil, atOld, unpinned), nil), walkWant{blocked: "OLD is known"}},
	} {
		done, blocked := walk(rb, tc.f)
		tc.want.check(t, tc.name, done, blocked, plan(rb, tc.f))
	}
}

func TestCloneSteps(t *testing.T) {
	old, clone := wpool("small", "v1", ""), wpool("small-v2", "v2", "ns/small")
	withLimit := func(p fleet.Pool, cpu string) fleet.Pool {
		p.Object = p.Object.DeepCopy()
		_ = unstructured.SetNestedStringMap(p.Object.Object, map[string]string{"cpu": cpu}, "spec", "template", "resources", "limits")
		return p
	}
	plans := func(c *fleet.Cluster) []ClonePlan {
		ps, err := PlanClones(c, Images{Any: "r@sha256:" + strings.Repeat("a", 64)})
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	one := map[string]int{"ns/small": 1, "ns/small-v2": 1}
	rb := CloneRunbook(nil, nil, nil, Images{})
	c := rollCluster(twoAtelets, atOld, old)
	shrunk := plans(rollCluster(twoAtelets, atOld, withLimit(old, "2")))
	shrunk[0].Object = withLimit(fleet.Pool{Object: shrunk[0].Object}, "1").Object
	for _, tc := range []struct {
		name string
		f    cloneFacts
		want walkWant
	}{
		{"no NEW atelet yet", cloneFacts{c: rollCluster([]string{"v1"}, atOld, old), err: errNoNew}, walkWant{blocked: "shape is known"}},
		{"to clone", cloneFacts{c: c, plans: plans(c)}, walkWant{plan: "create workerpool/ns/small-v2"}},
		{"a clone would shrink a limit", cloneFacts{c: c, plans: shrunk}, walkWant{blocked: "no clone shrinks resource limits"}},
		{"cloned, Deployment not rendered yet", cloneFacts{c: rollCluster(twoAtelets, atOld, old, clone),
			deployments: map[string]int{"ns/small": 1}}, walkWant{done: "ate.pools.clone"}},
		{"cloned, a new pod Running with no node at NEW", cloneFacts{c: rollCluster(twoAtelets, atOld, old, clone), deployments: one,
			running: map[string]int{"ns/small-v2": 1}}, walkWant{done: "ate.pools.clone"}},
		{"cloned and verified", cloneFacts{c: rollCluster(twoAtelets, atOld, old, clone), deployments: one},
			walkWant{done: "ate.pools.clone,ate.pools.verify"}},
	} {
		done, blocked := walk(rb, tc.f)
		tc.want.check(t, tc.name, done, blocked, plan(rb, tc.f))
	}
}

var errNoNew = errors.New("there is no NEW atelet DaemonSet yet")
