package ui

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/runbook"
)

// Progress writes plain lines (no colour, no status line) when the output
// is not a terminal, so logs and CI output stay readable.
func TestProgressPlainOutput(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b)
	p.Step("node/n1", runbook.StepResult{Title: "Cordon the node", Status: runbook.StepActing, Evidence: "schedulable"})
	p.Record(context.Background(), corev1.ObjectReference{Kind: "Node", Name: "n1"}, false, "Cordoned", "cordoned by rollbook tt-kmd")
	p.Step("node/n1", runbook.StepResult{Title: "Cordon the node", Status: runbook.StepActed, Evidence: "cordoned by tt-kmd", Duration: 120 * time.Millisecond})
	p.Step("node/n1", runbook.StepResult{Title: "Swap the kernel module", Status: runbook.StepBlocked, Error: "DeviceInUse: pid 7777\nsecond line"})
	p.TargetDone(runbook.TargetResult{Target: "node/n1", Notes: []string{"node n1 is still cordoned"}})
	p.Close()
	out := b.String()
	for _, want := range []string{"→ n1", "▸ Cordoned node/n1: cordoned by rollbook tt-kmd", "✓ n1", "(100ms)", "■ n1", "blocked: DeviceInUse: pid 7777", "! node n1 is still cordoned"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("escape codes in non-terminal output:\n%q", out)
	}
	// Continuation lines of a multi-line reason stay aligned under the detail
	// (mark, the name column, the title column).
	if !strings.Contains(out, "\n"+strings.Repeat(" ", 2+nameWidth+1+35)+"second line") {
		t.Errorf("multi-line detail not indented:\n%s", out)
	}
}

func TestSummaryNamesWhatIsLeftAndNext(t *testing.T) {
	var b bytes.Buffer
	PrintSummary(&b, runbook.Result{Runbook: "tt-kmd", Outcome: runbook.OutcomeBlocked, Targets: []runbook.TargetResult{
		{Target: "node/a", Outcome: runbook.OutcomeDone, State: "done"},
		{Target: "node/b", Outcome: runbook.OutcomeBlocked, State: "tt.kmd.install", Notes: []string{"node b is still cordoned"}},
		{Target: "node/c", Outcome: runbook.OutcomeSkipped, State: "not started"},
	}}, "re-run: kubectl tt upgrade kmd --version 2.8.0")
	out := b.String()
	for _, want := range []string{"tt-kmd: blocked — 3 target(s): 1 done 1 blocked 1 skipped", "node/b blocked at tt.kmd.install", "node b is still cordoned", "Next: re-run: kubectl tt upgrade kmd --version 2.8.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "node/a") {
		t.Errorf("finished targets should not be repeated:\n%s", out)
	}
}

func TestValidateOutput(t *testing.T) {
	if ValidateOutput("", "json") != nil || ValidateOutput("json", "json", "yaml") != nil || ValidateOutput("xml", "json") == nil {
		t.Fatal("ValidateOutput")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Off a terminal, a long wait is not silent: a heartbeat line says what is
// awaited and how much budget is left; nothing is printed while idle.
func TestHeartbeatWhileWaitingOffTerminal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b syncBuffer
		p := newProgress(&b, false, 20*time.Millisecond)
		time.Sleep(60 * time.Millisecond) // three heartbeats' worth of idle, on the bubble's clock
		if strings.Contains(b.String(), "still waiting") {
			t.Fatalf("heartbeat while nothing waits:\n%s", b.String())
		}
		started := time.Now()
		p.Step("node/n1", runbook.StepResult{Title: "Drain the node", Status: runbook.StepWaiting, Started: &started, Budget: 10 * time.Minute})
		time.Sleep(30 * time.Millisecond) // past the next heartbeat
		synctest.Wait()
		p.Close()
		out := b.String()
		if !strings.Contains(out, "still waiting: n1: Drain the node") || !strings.Contains(out, "left)") {
			t.Fatalf("no heartbeat naming the wait and the budget left:\n%s", out)
		}
		p.Close() // idempotent
	})
}

func TestPrintObjectStampsAPIVersionAndKind(t *testing.T) {
	var b bytes.Buffer
	if err := PrintObject(&b, "json", runbook.Result{Runbook: "tt-kmd", Outcome: runbook.OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"apiVersion": "rollbook.dev/v1alpha1"`, `"kind": "RunResult"`, `"runbook": "tt-kmd"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("json lacks %s:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := PrintObject(&b, "yaml", []runbook.StepResult{{ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiVersion: rollbook.dev/v1alpha1", "kind: StepResultList", "items:", "id: a"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("yaml lacks %s:\n%s", want, b.String())
		}
	}
}

func TestTableAligns(t *testing.T) {
	var b bytes.Buffer
	_ = Table(&b, []string{"node", "state"}, [][]string{{"n1", "done"}, {"a-long-node", "cordoned"}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NODE") || strings.Index(lines[1], "done") != strings.Index(lines[2], "cordoned") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// -o name prints kind/name per target; -o jsonpath applies the template to
// the same document -o json prints; a bad template is refused up front.
func TestPrintNameAndJSONPath(t *testing.T) {
	r := runbook.Result{Runbook: "tt-kmd", Outcome: runbook.OutcomeDone, Targets: []runbook.TargetResult{
		{Target: "node/a", Ref: corev1.ObjectReference{Kind: "Node", Name: "a"}, State: "done"},
		{Target: "fleet", State: "cordon"},
	}}
	var b bytes.Buffer
	if err := PrintObject(&b, "name", r); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "node/a\nfleet\n" {
		t.Errorf("-o name = %q", got)
	}
	b.Reset()
	if err := ValidateOutput("jsonpath={.targets[*].state}", "json", "jsonpath"); err != nil {
		t.Fatal(err)
	}
	if err := PrintObject(&b, "jsonpath={.kind} {.targets[*].state}", r); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "RunResult done cordon" {
		t.Errorf("-o jsonpath = %q", got)
	}
	b.Reset()
	if err := PrintObject(&b, "name", Named(map[string]any{"x": 1}, []string{"node/n1"})); err != nil || b.String() != "node/n1\n" {
		t.Errorf("-o name of Named = %q, %v", b.String(), err)
	}
	b.Reset()
	if err := PrintObject(&b, "jsonpath='{.x}'", Named(map[string]any{"x": 1}, nil)); err != nil || b.String() != "1" {
		t.Errorf("-o jsonpath of Named = %q, %v", b.String(), err)
	}
	if err := ValidateOutput("jsonpath={.targets[", "json", "jsonpath"); err == nil {
		t.Error("a broken template was accepted")
	}
	if err := ValidateOutput("jsonpath={.x}", "json", "yaml"); err == nil {
		t.Error("jsonpath accepted where it is not offered")
	}
	if err := ValidateOutput("table", "json", "jsonpath"); err == nil || !strings.Contains(err.Error(), "json|jsonpath=TEMPLATE") {
		t.Errorf("error does not list the formats: %v", err)
	}
}

// A dry run's summary carries the plan table: per target what it would do
// first, the changes its plan counts and the sum of its steps' budgets.
func TestDryRunSummaryHasAPlanTable(t *testing.T) {
	var b bytes.Buffer
	min := func(n int) time.Duration { return time.Duration(n) * time.Minute }
	PrintSummary(&b, runbook.Result{Runbook: "tt-kmd", DryRun: true, Outcome: runbook.OutcomeBlocked, Targets: []runbook.TargetResult{
		{Target: "node/a", Outcome: runbook.OutcomePlanned, State: "tt.kmd.cordon", Steps: []runbook.StepResult{
			{ID: "tt.kmd.probe", Title: "Probe the node", Status: runbook.StepDone, Budget: min(5)},
			{ID: "tt.kmd.cordon", Title: "Cordon the node", Status: runbook.StepWouldAct,
				Changes: []runbook.Change{{Object: "node/a", Action: "cordon"}}},
			{ID: "tt.kmd.drain", Title: "Drain", Status: runbook.StepPending, Budget: min(10),
				Changes: []runbook.Change{{Object: "node/a", Action: "drain"}}},
			{ID: "tt.kmd.install", Title: "Swap", Status: runbook.StepPending, Budget: min(15)},
		}},
		{Target: "node/b", Outcome: runbook.OutcomeBlocked, State: "tt.kmd.cordon", Steps: []runbook.StepResult{
			{ID: "tt.kmd.cordon", Title: "Cordon the node", Status: runbook.StepBlocked, Error: "a PDB allows no disruption"},
		}},
		{Target: "node/c", Outcome: runbook.OutcomeDone, State: "done"},
	}}, "")
	lines := map[string]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 && lines[f[0]] == "" { // the table's row, not the lines after
			lines[f[0]] = strings.Join(f, " ")
		}
	}
	for target, want := range map[string]string{
		"node/a": "node/a would act Cordon the node 2 25m0s",
		"node/b": "node/b blocked Cordon the node 0 -",
		"node/c": "node/c nothing to do - 0 -",
	} {
		if lines[target] != want {
			t.Errorf("plan row %q, want %q:\n%s", lines[target], want, b.String())
		}
	}
	if !strings.Contains(b.String(), "TARGET  PLAN") {
		t.Errorf("no plan table header:\n%s", b.String())
	}
}
