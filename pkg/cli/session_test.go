package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/httpcount"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2}) }

// globals builds what a command gets, pointed at the test cluster.
func globals(t *testing.T) (*Globals, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	_, g := NewRoot("test", "", "", genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
	kc := simtest.Get(t).Kubeconfig
	g.ConfigFlags.KubeConfig = &kc
	return g, &out
}

type nodeFacts struct{ node *corev1.Node }

// cordonRunbook cordons a node, labels it, and (unless stuck) uncordons it.
func cordonRunbook(s *Session, stuck bool) *runbook.Runbook[nodeFacts] {
	const owner = "test-cli"
	ours := func(f nodeFacts) bool { return kube.CordonStateOf(f.node).Owner == owner }
	labelled := func(f nodeFacts) bool { return f.node.Labels["rollbook-test.dev/done"] == "yes" }
	return &runbook.Runbook[nodeFacts]{
		Name: owner,
		Observe: func(ctx context.Context, t runbook.Target) (nodeFacts, error) {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, strings.TrimPrefix(t.Name(), "node/"), metav1.GetOptions{})
			return nodeFacts{n}, err
		},
		Steps: []runbook.Step[nodeFacts]{
			{ID: "test.cordon", Title: "Cordon", Done: func(f nodeFacts) (bool, string) { return ours(f) || labelled(f), "" },
				Act: func(ctx context.Context, f nodeFacts) error {
					_, err := kube.CordonNode(ctx, s.Client, s.Recorder, f.node, owner, s.RunID)
					return err
				}},
			{ID: "test.label", Title: "Label", Done: func(f nodeFacts) (bool, string) { return labelled(f), "" },
				Guards: []runbook.Guard[nodeFacts]{{Name: "not stuck", Check: func(nodeFacts) (bool, string) { return !stuck, "stuck on purpose" }}},
				Act: func(ctx context.Context, f nodeFacts) error {
					_, err := kube.SetNodeKeys(ctx, s.Client, f.node.Name, kube.NodeChange{Labels: map[string]*string{"rollbook-test.dev/done": ptr.To("yes")}})
					if err == nil {
						s.Recorder.Record(ctx, kube.NodeRef(f.node), false, "Labelled", "rollbook-test.dev/done: <none> → yes")
					}
					return err
				}},
			{ID: "test.uncordon", Title: "Uncordon", Done: func(f nodeFacts) (bool, string) { return labelled(f) && !ours(f), "" },
				Act: func(ctx context.Context, f nodeFacts) error {
					_, err := kube.UncordonNode(ctx, s.Client, s.Recorder, f.node, owner)
					return err
				}},
		},
	}
}

func resetNode(t *testing.T, name string) {
	t.Helper()
	c := simtest.Get(t)
	_, err := kube.SetNodeKeys(context.Background(), c.Client, name, kube.NodeChange{Unschedulable: ptr.To(false),
		Labels: map[string]*string{"rollbook-test.dev/done": nil},
		Annotations: map[string]*string{kube.AnnCordonedBy: nil, kube.AnnCordonedAt: nil, kube.AnnCordonRun: nil,
			kube.AnnLeftCordoned: nil}})
	if err != nil {
		t.Fatal(err)
	}
}

func targets(s *Session, names ...string) []runbook.Target {
	var ts []runbook.Target
	for _, n := range names {
		ts = append(ts, runbook.NodeTarget{Client: s.Client, Node: n})
	}
	return ts
}

func TestSessionJournalsEveryMutationAndSaysWhereItActs(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ns := c.NewNamespace(t)
	resetNode(t, "kwok-node-0")
	t.Cleanup(func() { resetNode(t, "kwok-node-0") })
	g, out := globals(t)
	ctx := simtest.Context(t, time.Minute)
	s, runCtx, err := StartSession(ctx, g, RunFlags{LockNamespace: ns}, "test", "rollbook-test")
	if err != nil {
		t.Fatal(err)
	}
	res := Run(runCtx, s, cordonRunbook(s, false), targets(s, "kwok-node-0"), runbook.Options{})
	if err := s.Finish(res, ""); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), `acting on context "`) {
		t.Fatalf("the run does not say where it acts:\n%s", out)
	}
	entries, _, err := journal.Read(ctx, c.Client, ns, journal.Name("test"))
	if err != nil {
		t.Fatal(err)
	}
	var steps, reasons []string
	for _, e := range entries {
		if e.Run != s.RunID || e.Host == "" || e.User == "" {
			t.Errorf("entry without its run/user/host: %+v", e)
		}
		steps, reasons = append(steps, e.Step), append(reasons, e.Reason)
	}
	want := "RunStarted Cordoned Labelled Uncordoned RunFinished"
	if got := strings.Join(reasons, " "); got != want {
		t.Fatalf("journal reasons %q, want %q (each mutation exactly once)", got, want)
	}
	if got := strings.Join(steps[1:4], " "); got != "test.cordon test.label test.uncordon" {
		t.Fatalf("journal steps %q", got)
	}
	// `history NODE -o json` prints them as a versioned document.
	var hist bytes.Buffer
	h := NewHistoryCommand(g, "test", ns)
	g.IOStreams.Out = &hist
	h.SetArgs([]string{"kwok-node-0", "-o", "json"})
	if err := h.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Items      []journal.Entry `json:"items"`
	}
	if err := json.Unmarshal(hist.Bytes(), &doc); err != nil || doc.APIVersion != "rollbook.dev/v1alpha1" || len(doc.Items) != 5 {
		t.Fatalf("history -o json: %v %+v\n%s", err, doc, hist.String())
	}
}

func TestPausedRollStartsNothingAndExitsZero(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ns := c.NewNamespace(t)
	resetNode(t, "kwok-node-1")
	g, out := globals(t)
	ctx := simtest.Context(t, time.Minute)
	pause := NewPauseCommands(g, "test", "rollbook-test", ns)[0]
	pause.SetArgs([]string{"--reason", "waiting for the canary"})
	if err := pause.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	s, runCtx, err := StartSession(ctx, g, RunFlags{LockNamespace: ns}, "test", "rollbook-test")
	if err != nil {
		t.Fatal(err)
	}
	res := Run(runCtx, s, cordonRunbook(s, false), targets(s, "kwok-node-1"), runbook.Options{})
	if err := s.Finish(res, ""); err != nil || res.Outcome != runbook.OutcomePaused {
		t.Fatalf("paused roll: outcome %s, err %v\n%s", res.Outcome, err, out)
	}
	n, _ := c.Client.CoreV1().Nodes().Get(ctx, "kwok-node-1", metav1.GetOptions{})
	if n.Spec.Unschedulable || n.Labels["rollbook-test.dev/done"] != "" {
		t.Fatal("a paused roll touched a node")
	}
	if !strings.Contains(out.String(), "waiting for the canary") || !strings.Contains(PauseNote(ctx, c.Client, "test", ns, "rollbook-test"), "PAUSED") {
		t.Fatalf("the pause is not explained:\n%s", out)
	}
	// The running holder's renewals keep a pause set meanwhile (no conflict lost).
	resume := NewPauseCommands(g, "test", "rollbook-test", ns)[1]
	resume.SetArgs(nil)
	if err := resume.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := lease.ReadPause(ctx, c.Client, ns, "rollbook-test"); p != nil {
		t.Fatalf("resume left %v", p)
	}
}

func TestBlockedRunSaysOnTheNodeWhyItStaysCordoned(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ns := c.NewNamespace(t)
	resetNode(t, "kwok-node-1")
	t.Cleanup(func() { resetNode(t, "kwok-node-1") })
	g, out := globals(t)
	ctx := simtest.Context(t, time.Minute)
	s, runCtx, err := StartSession(ctx, g, RunFlags{LockNamespace: ns}, "test", "rollbook-test")
	if err != nil {
		t.Fatal(err)
	}
	res := Run(runCtx, s, cordonRunbook(s, true), targets(s, "kwok-node-1"), runbook.Options{})
	err = s.Finish(res, "")
	if ExitCode(err) != ExitBlocked {
		t.Fatalf("want exit 3, got %v", err)
	}
	n, _ := c.Client.CoreV1().Nodes().Get(ctx, "kwok-node-1", metav1.GetOptions{})
	why := n.Annotations[kube.AnnLeftCordoned]
	if !n.Spec.Unschedulable || !strings.Contains(why, "stuck on purpose") || !strings.Contains(why, s.RunID) {
		t.Fatalf("left-cordoned annotation %q (unschedulable %v)", why, n.Spec.Unschedulable)
	}
	if !strings.Contains(out.String(), "stays cordoned by rollbook") {
		t.Fatalf("the run does not say it leaves the node cordoned:\n%s", out)
	}
}

// A run killed on this machine (its process is gone) is resumed by the
// next run with no flag.
func TestSessionTakesOverFromADeadRunOnThisHost(t *testing.T) {
	c := simtest.Get(t)
	ns := c.NewNamespace(t)
	g, out := globals(t)
	ctx := simtest.Context(t, time.Minute)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	m := lease.ThisMachine()
	killed := lease.Holder{User: "me", Host: host, PID: dead.Process.Pid, RunID: "killed",
		MachineID: m.MachineID, BootID: m.BootID, PIDNamespace: m.PIDNamespace}
	_, err := c.Client.CoordinationV1().Leases(ns).Create(ctx, lease.HeldLease(ns, "rollbook-test", killed, 30*time.Second, time.Now()),
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := StartSession(ctx, g, RunFlags{LockNamespace: ns}, "test", "rollbook-test")
	if err != nil {
		t.Fatalf("resume after kill: %v\n%s", err, out)
	}
	_ = s.Fail(nil)
	// Taken over by the dead-process rule (at once), not by waiting out the
	// Lease: the printed reason says which.
	if !strings.Contains(out.String(), "took over from me@") || !strings.Contains(out.String(), "no longer exists") {
		t.Fatalf("takeover was not printed with the dead-process reason:\n%s", out)
	}
}

// A run on another machine that stopped renewing is taken over once this
// machine has watched its Lease unchanged for the Lease's own duration plus
// a margin — no flag — and the takeover is printed and journaled.
func TestSessionTakesOverFromASilentRunOnAnotherHost(t *testing.T) {
	c := simtest.Get(t)
	ns := c.NewNamespace(t)
	g, out := globals(t)
	ctx := simtest.Context(t, time.Minute)
	now := metav1.NewMicroTime(time.Now())
	_, err := c.Client.CoordinationV1().Leases(ns).Create(ctx, &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "rollbook-test", Namespace: ns, Annotations: map[string]string{
			"rollbook.dev/holder-host": "laptop-that-closed", "rollbook.dev/holder-pid": "4242", "rollbook.dev/holder-user": "alice"}},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To("alice@laptop-that-closed/4242/run-1"), LeaseDurationSeconds: ptr.To(int32(3)),
			AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := StartSession(ctx, g, RunFlags{LockNamespace: ns}, "test", "rollbook-test")
	if err != nil {
		t.Fatalf("resume from another host: %v\n%s", err, out)
	}
	_ = s.Fail(nil)
	if !strings.Contains(out.String(), "took over from alice@laptop-that-closed") || !strings.Contains(out.String(), "not renewed for") {
		t.Errorf("the takeover was not printed with its reason:\n%s", out)
	}
	l, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, "rollbook-test", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil && strings.Contains(*l.Spec.HolderIdentity, "alice@") {
		t.Errorf("the lease still names the old holder: %v %v", err, l.Spec.HolderIdentity)
	}
}

// pause and resume --dry-run say what they would do to the Lease, from what
// it holds, and leave it as it was.
func TestPauseAndResumeDryRunChangeNothing(t *testing.T) {
	c := simtest.Get(t)
	ns := c.NewNamespace(t)
	g, out := globals(t)
	ctx := simtest.Context(t, time.Minute)
	run := func(i int, args ...string) {
		t.Helper()
		cmd := NewPauseCommands(g, "test", "rollbook-test", ns)[i]
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run(0, "--dry-run", "--reason", "soak")
	if p, err := lease.ReadPause(ctx, c.Client, ns, "rollbook-test"); err != nil || p != nil {
		t.Fatalf("pause --dry-run paused: %v %v", p, err)
	}
	if !strings.Contains(out.String(), "(dry run) would pause the roll on Lease "+ns+"/rollbook-test") || !strings.Contains(out.String(), "soak") {
		t.Fatalf("pause --dry-run says:\n%s", out)
	}
	run(1, "--dry-run=client")
	if !strings.Contains(out.String(), "not paused; resume would change nothing") {
		t.Fatalf("resume --dry-run on no pause says:\n%s", out)
	}
	run(0, "--reason", "vendor")
	out.Reset()
	run(1, "--dry-run")
	if p, _ := lease.ReadPause(ctx, c.Client, ns, "rollbook-test"); p == nil {
		t.Fatal("resume --dry-run lifted the pause")
	}
	if !strings.Contains(out.String(), "would lift the pause") || !strings.Contains(out.String(), "vendor") {
		t.Fatalf("resume --dry-run says:\n%s", out)
	}
}

// A pause written while the roll runs stops it before its next target, and
// the run reads the Lease for it twice in all (the lock's acquisition
// answers first, then one read and a watch), not once per target.
func TestPauseMidRollIsWatchedNotReadPerTarget(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ns := c.NewNamespace(t)
	g, out := globals(t)
	ctx := simtest.Context(t, time.Minute)
	var mu sync.Mutex
	reads, watches := 0, 0
	var seen []string
	WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return httpcount.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/leases") {
				mu.Lock()
				if r.URL.Query().Get("watch") == "true" {
					watches++
				} else {
					reads++
				}
				seen = append(seen, r.Method+" "+r.URL.RequestURI())
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	defer func() { WrapTransport = nil }()
	s, runCtx, err := StartSession(ctx, g, RunFlags{LockNamespace: ns}, "test", "rollbook-test")
	if err != nil {
		t.Fatal(err)
	}
	var started []string
	rb := &runbook.Runbook[string]{Name: "test-pause",
		Observe: func(_ context.Context, tg runbook.Target) (string, error) { return tg.Name(), nil },
		Steps: []runbook.Step[string]{{ID: "test.pause", Title: "Pause at the fifth",
			Done: func(name string) (bool, string) { return slices.Contains(started, name), "" },
			Act: func(ctx context.Context, name string) error {
				started = append(started, name)
				if name != "t5" {
					return nil
				}
				if err := lease.SetPause(ctx, c.Client, ns, "rollbook-test", &lease.Pause{By: "a test", At: time.Now()}); err != nil {
					return err
				}
				// The watch brings it (asking reads nothing more).
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					if paused, _ := s.Paused(ctx); paused {
						return nil
					}
					if time.Now().After(deadline) {
						return errors.New("the pause never reached the run")
					}
				}
			}}},
	}
	var ts []runbook.Target
	for i := range 8 {
		ts = append(ts, runbook.ScopeTarget{Scope: fmt.Sprintf("t%d", i+1)})
	}
	res := Run(runCtx, s, rb, ts, runbook.Options{})
	mu.Lock()
	gotReads, gotWatches := reads, watches // the release re-reads the Lease the pause changed
	mu.Unlock()
	_ = s.Finish(res, "")
	if res.Outcome != runbook.OutcomePaused || strings.Join(started, ",") != "t1,t2,t3,t4,t5" {
		t.Fatalf("outcome %s, started %v; want paused after t5\n%s", res.Outcome, started, out)
	}
	// The acquisition's read, the second answer's read and its watch.
	if gotReads != 2 || gotWatches != 1 {
		t.Fatalf("%d reads and %d watches of the Lease for 8 targets; want 2 and 1: %v", gotReads, gotWatches, seen)
	}
}
