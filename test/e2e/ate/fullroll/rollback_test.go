//go:build e2e

package fullroll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/ate/campaign"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// These tests run after TestFullRoll (files run in name order) and share its
// cluster: every node at v0.3.0, the clones serving, both atelets installed.

// oldPoolRecord is an old pool as it was before the rollback.
type oldPoolRecord struct {
	uid, resourceVersion string
	generation           int64
	spec                 map[string]any
	labels, annotations  map[string]string
}

// untouchedWatch records every change to the old pools other than the
// controller's status writes: the rollback must never edit them.
func untouchedWatch(t *testing.T, ctx context.Context, rv string, before map[string]oldPoolRecord) func() []string {
	w, err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		bad []string
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			u, ok := e.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rec, old := before[u.GetName()]
			if !old {
				continue
			}
			spec, _, _ := unstructured.NestedMap(u.Object, "spec")
			mu.Lock()
			switch {
			case e.Type == watch.Deleted:
				bad = append(bad, u.GetName()+" deleted")
			case u.GetGeneration() != rec.generation || !reflect.DeepEqual(spec, rec.spec) || !reflect.DeepEqual(u.GetLabels(),
				rec.labels) || !reflect.DeepEqual(u.GetAnnotations(), rec.annotations):
				bad = append(bad, u.GetName()+" edited at resourceVersion "+u.GetResourceVersion())
			}
			mu.Unlock()
		}
	}()
	return func() []string {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return bad
	}
}

func recordOldPools(t *testing.T, ctx context.Context) (map[string]oldPoolRecord, string) {
	t.Helper()
	l, err := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]oldPoolRecord{}
	for _, u := range l.Items {
		if pin, _, _ := unstructured.NestedString(u.Object, "spec", "template", "nodeSelector", fleet.VersionLabel); pin != atetest.OldV {
			continue
		}
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		out[u.GetName()] = oldPoolRecord{uid: string(u.GetUID()), resourceVersion: u.GetResourceVersion(), generation: u.GetGeneration(),
			spec: spec, labels: u.GetLabels(), annotations: u.GetAnnotations()}
	}
	if len(out) < 2 {
		t.Fatalf("expected the fleet's two old pools, got %d", len(out))
	}
	return out, l.GetResourceVersion()
}

func TestRollbackInterruptedThenResumed(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	if s := atetest.Status(t, ctx); s.Counts[atetest.NewV] != 3 {
		t.Fatalf("TestFullRoll should leave every node at %s: %v", atetest.NewV, s.Counts)
	}
	before, listRV := recordOldPools(t, ctx)
	edits := untouchedWatch(t, ctx, listRV, before)

	// Every node reached NEW, so step 6 may have run: no node moves back
	// until the OLD API server is back, and the command to do that is shown.
	atetest.ExpectRefused(t, ctx, "deploy apiserver", "rollback")
	// A dry run plans the first node, in one document, and changes nothing.
	out, code := atetest.Run(t, ctx, "rollback", "--control-plane-reverted", "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("rollback --dry-run: exit %d", code)
	}
	var res runbook.Result
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if res.Runbook != node.RunbookName || res.Outcome != runbook.OutcomePlanned || len(res.Targets) != 1 {
		t.Fatalf("dry run: %s %s, %d target(s)", res.Runbook, res.Outcome, len(res.Targets))
	}
	if s := atetest.Status(t, ctx); s.Counts[atetest.NewV] != 3 {
		t.Fatalf("the dry run changed node labels: %v", s.Counts)
	}

	// The real rollback, interrupted as soon as the first node is back at OLD.
	runCtx, cancel := context.WithCancel(ctx)
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			if n, ok := e.Object.(*corev1.Node); ok && n.Labels[fleet.VersionLabel] == atetest.OldV {
				cancel()
				return
			}
		}
	}()
	out, code = atetest.Run(t, runCtx, "rollback", "--wait", "--control-plane-reverted")
	cancel()
	if code == 0 || !strings.Contains(out, "interrupted") {
		t.Fatalf("the rollback should have been interrupted after the first flip: exit %d", code)
	}
	if s := atetest.Status(t, ctx); s.Cluster.New != atetest.NewV {
		t.Fatalf("an interrupted rollback must not remove the NEW atelet yet: %+v", s.Cluster.Atelets)
	}
	// Resumed: the half-moved node first, then the rest, then the cluster
	// steps; the flag is no longer needed once a node is back at OLD.
	out, code = atetest.Run(t, ctx, "rollback", "--wait")
	if code != 0 || !strings.Contains(out, "node kwok-node-0: "+atetest.NewV+" → "+atetest.OldV) {
		t.Fatalf("resumed rollback: exit %d", code)
	}
	for _, want := range []string{"deploy ate-system", "deploy ate-controller"} {
		if !strings.Contains(out, want) {
			t.Errorf("rollback output lacks %q", want)
		}
	}
	if j, k := strings.Index(out, "deploy ate-system"), strings.Index(out, "deploy ate-controller"); j > k {
		t.Errorf("external commands out of the runbook's order")
	}

	s := atetest.Status(t, ctx)
	if s.Counts[atetest.OldV] != 3 || s.Cluster.New != "" || len(s.Cluster.Atelets) != 1 || s.Phase != campaign.PhaseNotStarted || len(s.Nodes) != 0 {
		t.Fatalf("after the rollback: phase %s counts %v atelets %+v in progress %v", s.Phase, s.Counts, s.Cluster.Atelets, s.Nodes)
	}
	for _, p := range s.Cluster.Pools {
		if p.Pin == atetest.NewV || p.ClonedFrom != "" {
			t.Errorf("clone %s survived the rollback", p.Key())
		}
	}
	inv, err := atetest.Client(t, ctx).Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range inv.Actors {
		if a.State == ateapi.ActorCrashed {
			t.Errorf("actor %s/%s CRASHED during the rollback", a.Atespace, a.Name)
		}
	}
	// Re-running a finished rollback changes nothing; it is when the user
	// has run the printed commands that it checks for a third DaemonSet.
	if out, code := atetest.Run(t, ctx, "rollback"); code != 0 || !strings.Contains(out, "one atelet DaemonSet, at "+atetest.OldV) {
		t.Fatalf("rollback again: exit %d", code)
	}

	// The old pools: same object, spec, labels and generation; their
	// resourceVersion moves only with the controller's status writes, which
	// the watch saw one by one.
	if bad := edits(); len(bad) > 0 {
		t.Errorf("the rollback edited an old pool: %v", bad)
	}
	after, _ := recordOldPools(t, ctx)
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			t.Errorf("old pool %s is gone", name)
		case a.uid != b.uid || a.generation != b.generation || !reflect.DeepEqual(a.spec, b.spec) || !reflect.DeepEqual(a.labels,
			b.labels) || !reflect.DeepEqual(a.annotations, b.annotations):
			t.Errorf("old pool %s changed: generation %d→%d", name, b.generation, a.generation)
		case a.resourceVersion != b.resourceVersion:
			t.Logf("old pool %s: resourceVersion %s→%s from status writes only (spec and generation %d "+
				"unchanged)", name, b.resourceVersion, a.resourceVersion, a.generation)
		}
	}
}

// TestRetireAfterRollingForwardAgain starts where a finished rollback
// leaves the fleet, which is also where the fleet starts: every node at
// OLD, one atelet, no clones. It records the old pools itself (the rollback
// test checks that the rollback left them as they were), so it runs alone.
func TestRetireAfterRollingForwardAgain(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	// A whole roll of three nodes, with --wait for free workers as traffic
	// wakes actors: minutes on a loaded machine.
	ctx := simtest.Context(t, 10*time.Minute)
	if s := atetest.Status(t, ctx); s.Counts[atetest.OldV] != 3 || s.Cluster.New != "" || s.Phase != campaign.PhaseNotStarted {
		t.Fatalf("needs every node at %s and no roll under way: phase %s counts %v", atetest.OldV, s.Phase, s.Counts)
	}
	oldPoolsAtStart, _ := recordOldPools(t, ctx)
	sim, err := simtest.SimBinary()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sim, "ate-setup", "deploy-atelet", "--dir", c.Dir, "--version", atetest.NewV).CombinedOutput(); err != nil {
		t.Fatalf("deploy atelet: %v\n%s", err, out)
	}
	if _, code := atetest.Run(t, ctx, atetest.CloneArgs...); code != 0 {
		t.Fatalf("clone-pools: exit %d", code)
	}
	dir := t.TempDir()
	// noFiles: no backup written, neither in dir nor as a ConfigMap.
	noFiles := func() bool {
		files, _ := os.ReadDir(dir)
		cms, err := c.Client.CoreV1().ConfigMaps("ate-workers").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			if strings.HasPrefix(cm.Name, "workerpool-backup-") {
				return false
			}
		}
		return len(files) == 0
	}
	pools := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR).Namespace("ate-workers")
	oldPoolsLeft := func() int {
		n := 0
		for name := range oldPoolsAtStart {
			if _, err := pools.Get(ctx, name, metav1.GetOptions{}); err == nil {
				n++
			}
		}
		return n
	}
	// Every node is still at OLD: retire must refuse and keep everything.
	out, code := atetest.Run(t, ctx, "retire", "--backup-dir", dir)
	if code != cli.ExitBlocked || !strings.Contains(out, "blocked: no node is at OLD") {
		t.Fatalf("retire before the roll must refuse: exit %d", code)
	}
	if !noFiles() {
		t.Fatal("a refused retire wrote a backup")
	}
	if _, code := atetest.Run(t, ctx, "roll", "next-node", "--all", "--wait"); code != 0 {
		t.Fatalf("roll --all: exit %d", code)
	}
	// A dry run plans every step in one document and changes nothing.
	out, code = atetest.Run(t, ctx, "retire", "--dry-run", "--backup-dir", dir, "--backup-configmap", "-o", "json")
	r := result(t, out)
	if code != 0 || r.Runbook != roll.RetireRunbookName || r.Outcome != runbook.OutcomePlanned || len(r.Targets) != 1 ||
		len(r.Targets[0].Steps) != 3 {
		t.Fatalf("retire --dry-run -o json: exit %d, %+v", code, r)
	}
	planned := map[string]bool{}
	for _, st := range r.Targets[0].Steps {
		for _, ch := range st.Changes {
			planned[st.ID+" "+ch.Action+" "+ch.Object] = true
		}
	}
	for name := range oldPoolsAtStart {
		for _, want := range []string{"ate.retire.backup save workerpool/ate-workers/" + name,
			"ate.retire.backup create or update configmap/ate-workers/workerpool-backup-" + name,
			"ate.retire.delete-old-pools delete workerpool/ate-workers/" + name} {
			if !planned[want] {
				t.Errorf("the dry run does not plan %q: %v", want, planned)
			}
		}
	}
	atelet := false
	for k := range planned {
		atelet = atelet || strings.HasPrefix(k, "ate.retire.delete-old-atelet delete daemonset/"+fleet.Namespace+"/")
	}
	if !atelet {
		t.Errorf("the dry run does not plan deleting the %s atelet: %v", atetest.OldV, planned)
	}
	if !noFiles() || oldPoolsLeft() != len(oldPoolsAtStart) {
		t.Fatal("a dry run wrote a backup or deleted a pool")
	}
	expectLocked(t, ctx, func() bool { return noFiles() && oldPoolsLeft() == len(oldPoolsAtStart) },
		"retire", "--backup-dir", dir)
	// Interrupted right after the first backup, then right after the first
	// delete; each run resumes where the last stopped.
	args := []string{"retire", "--backup-dir", dir, "--backup-configmap"}
	interruptAt(t, ctx, args, "PoolBackedUp", "Deleted")
	out, code = atetest.Run(t, ctx, append(args, "-o", "json")...)
	r = result(t, out)
	if code != 0 || r.Outcome != runbook.OutcomeDone || r.Targets[0].Steps[0].Status != runbook.StepDone {
		t.Fatalf("retire resumed: exit %d, %+v", code, r)
	}
	s := atetest.Status(t, ctx)
	if s.Phase != campaign.PhaseComplete || s.Cluster.Old != atetest.NewV || len(s.Cluster.Atelets) != 1 {
		t.Fatalf("after retire: phase %s (%s), atelets %+v", s.Phase, s.Summary, s.Cluster.Atelets)
	}
	if n := oldPoolsLeft(); n > 0 {
		t.Errorf("%d old pool(s) not retired", n)
	}
	for name := range oldPoolsAtStart {
		if n := eventsFor(t, ctx, "ate-workers", "Deleted", name, "retire:"); n != 1 {
			t.Errorf("old pool %s deleted %d times across the runs; want once", name, n)
		}
	}
	if out, code := atetest.Run(t, ctx, "retire"); code != 0 || !strings.Contains(out, "nothing to retire") {
		t.Fatalf("retire again: exit %d", code)
	}

	// The backup recreates the pool as it was.
	name := "python-small"
	want := oldPoolsAtStart[name]
	data, err := os.ReadFile(filepath.Join(dir, "workerpool-ate-workers-"+name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := c.Client.CoreV1().ConfigMaps("ate-workers").Get(ctx, "workerpool-backup-"+name, metav1.GetOptions{})
	if err != nil || cm.Data[roll.BackupKey] != string(data) {
		t.Fatalf("ConfigMap backup missing or different from the file: %v", err)
	}
	for _, f := range []string{"uid:", "resourceVersion:", "managedFields:", "status:"} {
		if strings.Contains(string(data), "\n  "+f) || strings.HasPrefix(string(data), f) || strings.Contains(string(data), "\n"+f) {
			t.Errorf("backup keeps %s", f)
		}
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	got, err := pools.Create(ctx, &u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("recreate from the backup: %v", err)
	}
	t.Cleanup(func() { _ = pools.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	spec, _, _ := unstructured.NestedMap(got.Object, "spec")
	if !reflect.DeepEqual(spec, want.spec) || !reflect.DeepEqual(got.GetLabels(), want.labels) {
		t.Fatalf("recreated pool differs:\n got %v\nwant %v", spec, want.spec)
	}
	if err := pools.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// terminal is input a person types at a terminal (atecmd asks it).
type terminal struct{ *bytes.Buffer }

func (terminal) IsTerminal() bool { return true }

// runAt is atetest.Run with input typed at a terminal.
func runAt(t *testing.T, ctx context.Context, input string, args ...string) (string, int) {
	t.Helper()
	c := simtest.Get(t)
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	streams.In = terminal{bytes.NewBufferString(input)}
	code := cli.ExecuteContext(ctx, atecmd.NewRootCommand(streams), append(args, "--kubeconfig", c.Kubeconfig), errOut)
	all := out.String() + errOut.String()
	t.Logf("kubectl ate %s < %q (a terminal) → exit %d\n%s", strings.Join(args, " "), input, code, all)
	return all, code
}

// TestRevertCrashedActor crashes an actor on purpose: the sim must record
// that loss.
func TestRevertCrashedActor(t *testing.T) {
	lost := simtest.Get(t).ExpectViolation(t, "actor-lost")
	defer lost()
	ctx := simtest.Context(t, 2*time.Minute)
	cl := atetest.Client(t, ctx)
	crashActorOn(t, ctx, "kwok-node-0", "kwok-node-1", "kwok-node-2")
	var victim ateapi.Actor
	// The simulated lists leave out an actor that just changed: read again.
	for deadline := time.Now().Add(5 * time.Second); victim.Name == "" && time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		inv, err := cl.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range inv.Actors {
			if a.State == ateapi.ActorCrashed {
				victim = a
			}
		}
	}
	if victim.Name == "" {
		t.Fatal("no CRASHED actor")
	}
	stateOf := func() ateapi.ActorState {
		a, err := cl.GetActor(ctx, victim.Atespace, victim.Name)
		if err != nil {
			t.Fatal(err)
		}
		return a.State
	}
	// No terminal and no --yes: a usage error, nothing touched.
	out, code := atetest.Run(t, ctx, "revert", victim.Name, "-a", victim.Atespace)
	if code != cli.ExitUsage || !strings.Contains(out, "--yes") || stateOf() != ateapi.ActorCrashed {
		t.Fatalf("revert without a terminal or --yes: exit %d", code)
	}
	if _, code := atetest.Run(t, ctx, "revert", victim.Name); code != cli.ExitUsage {
		t.Fatalf("revert without -a: exit %d", code)
	}
	crashed := func() bool { return stateOf() == ateapi.ActorCrashed }
	out, code = atetest.Run(t, ctx, "revert", victim.Name, "-a", victim.Atespace, "--dry-run")
	if code != 0 || !strings.Contains(out, "would revert actor/"+victim.Atespace+"/"+victim.Name) || !crashed() {
		t.Fatalf("revert --dry-run: exit %d, state %s", code, stateOf())
	}
	expectLocked(t, ctx, crashed, "revert", victim.Name, "-a", victim.Atespace, "--yes")
	// At a terminal, the prompt says what is lost; "n" keeps the actor as is.
	out, code = runAt(t, ctx, "n\n", "revert", victim.Name, "-a", victim.Atespace)
	if code == 0 || !strings.Contains(out, "LOST") || !strings.Contains(out, "[y/N]") || stateOf() != ateapi.ActorCrashed {
		t.Fatalf("declined revert: exit %d, state %s", code, stateOf())
	}
	// Confirmed, and interrupted right after the RevertActor call: the
	// re-run waits for the same revert instead of asking again.
	runCtx, cancel := cancelOnEvent(t, ctx, "ActorReverted")
	_, code = runAt(t, runCtx, "y\n", "revert", victim.Name, "-a", victim.Atespace)
	cancel()
	if code != 0 && code != cli.ExitFailed {
		t.Fatalf("confirmed revert, interrupted: exit %d", code)
	}
	out, code = atetest.Run(t, ctx, "revert", victim.Name, "-a", victim.Atespace, "--yes", "-o", "json")
	if r := result(t, out); code != 0 || r.Runbook != roll.RevertRunbookName || r.Outcome != runbook.OutcomeDone {
		t.Fatalf("revert resumed: exit %d, %s %s", code, r.Runbook, r.Outcome)
	}
	// Traffic may wake it right away: it only must have left the crash.
	if st := stateOf(); st == ateapi.ActorCrashed || st == ateapi.ActorReverting {
		t.Fatalf("after the revert: state %s", st)
	}
	if n := eventsFor(t, ctx, fleet.Namespace, "ActorReverted", ateapi.DefaultService, victim.Atespace+"/"+victim.Name+":"); n != 1 {
		t.Errorf("%s/%s reverted %d times across the runs; want once", victim.Atespace, victim.Name, n)
	}
	// The actor resumes from its snapshot: asked to, or woken by traffic
	// first (then a resume of our own is refused while it is RESUMING).
	// With every worker taken by the traffic's actors the substrate answers
	// ResourceExhausted (seen in CI): asked again once one frees.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, _, err := cl.ResumeActor(ctx, victim.Atespace, victim.Name)
		switch st := stateOf(); {
		case err == nil || st == ateapi.ActorResuming || st == ateapi.ActorRunning:
			return true, nil
		case errors.Is(err, ateapi.ErrResourceExhausted) && st == ateapi.ActorSuspended:
			t.Logf("resume after revert: %v; again once a worker frees", err)
			return false, nil
		default:
			return false, fmt.Errorf("resume after revert: %w (state %s)", err, st)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if out, code := atetest.Run(t, ctx, "revert", "--all-crashed", "--yes"); code != 0 || !strings.Contains(out, "No CRASHED actor") {
		t.Fatalf("--all-crashed with none: exit %d", code)
	}
}
