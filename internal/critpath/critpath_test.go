package critpath

import (
	"os"
	"strings"
	"testing"
	"time"
)

var kmdSteps = []string{"Probe the node", "Build once per kernel", "Cordon the node", "Close the deploy gates",
	"Move device-holding pods away", "Drain the rest of the node", "Swap the kernel module",
	"Label the node with the measured version", "Reopen the deploy gates", "Uncordon the node", "Remove the helper pod"}

func kmdSlots(parallel int, hit time.Duration) Slots {
	return Slots{Parallel: parallel, Take: "Cordon the node", Release: "Uncordon the node",
		Ideal: func(step string, took time.Duration) time.Duration {
			switch step {
			case "Move device-holding pods away", "Drain the rest of the node":
				return took
			case "Swap the kernel module":
				return hit
			}
			return 0
		}}
}

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Two nodes through one slot, each cause worked out by hand.
func TestAnalyseSplitsASlotsTimeByCause(t *testing.T) {
	progress := `   0.05 acting on context "sim"
   1.00 → a          Cordon the node                    schedulable
   1.50 ✓ a          Cordon the node                    cordoned by tt-kmd (500ms)
   1.50   ▸ Cordoned node/a: cordoned by rollbook tt-kmd
   3.00 ✓ a          Drain the rest of the node         node drained
   3.10 … a          Swap the kernel module             waiting (budget 15m0s)
   9.00 ✓ a          Swap the kernel module             helper measured 2.8.1 (6s)
   9.20 ✓ a          Uncordon the node                  schedulable
   5.00 → b          Cordon the node                    waiting: a PodDisruptionBudget allows no disruption
  10.00 → b          Cordon the node                    schedulable
  10.10 ✓ b          Cordon the node                    cordoned by tt-kmd
  11.00 ✓ b          Drain the rest of the node         node drained
  16.50 ✓ b          Swap the kernel module             helper measured 2.8.1 (5.5s)
  16.60 ✓ b          Uncordon the node                  schedulable
  17.00 → c          Cordon the node                    schedulable
  17.10 ✓ c          Cordon the node                    cordoned by tt-kmd
`
	marks, err := Parse(strings.NewReader(progress), kmdSteps)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 13 {
		t.Fatalf("parsed %d marks, want 13 (the event and waiting lines skipped): %+v", len(marks), marks)
	}
	b := kmdSlots(1, 5*time.Second).Analyse(marks)
	if b.Nodes != 2 {
		t.Errorf("%d nodes held a slot to its release, want 2 (c never released one)", b.Nodes)
	}
	want := map[string]time.Duration{
		"Swap the kernel module": sec(1.0) + sec(0.5), // beyond the 5 s hit
		Handoff:                  sec(0.8),            // a's release at 9.2, b's take at 10.0 (not its wait at 5.0)
		"Cordon the node":        sec(0.5) + sec(0.1),
		"Uncordon the node":      sec(0.2) + sec(0.1),
	}
	got := map[string]time.Duration{}
	for _, c := range b.Causes {
		got[c.Name] = c.Total
	}
	for name, d := range want {
		if diff := got[name] - d; diff > time.Millisecond || diff < -time.Millisecond {
			t.Errorf("%s: %s, want %s", name, got[name], d)
		}
	}
	if len(got) != len(want) {
		t.Errorf("causes %v, want only %v (the drain is the ideal's)", got, want)
	}
	if b.Causes[0].Name != "Swap the kernel module" || b.Causes[1].Name != Handoff {
		t.Errorf("causes not largest first: %+v", b.Causes)
	}
	if top := b.Top(2); top != "Swap the kernel module 750ms per node (47 %); "+Handoff+" 400ms per node (25 %)" {
		t.Errorf("Top(2) = %q", top)
	}
}

// A run the bench recorded (24 nodes, 2 kernels, --max-parallel 8, a 5 s
// hit): one node's share worked out by hand from its lines, and every
// node seen to its release.
func TestAnalyseARecordedRun(t *testing.T) {
	f, err := os.Open("testdata/kmd-24-nodes-k8.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	marks, err := Parse(f, kmdSteps)
	if err != nil {
		t.Fatal(err)
	}
	s := kmdSlots(8, 5*time.Second)
	var node5 []Mark
	for _, m := range marks {
		if m.Node == "kwok-node-5" {
			node5 = append(node5, m)
		}
	}
	// kwok-node-5: → Cordon 43.97, ✓ Cordon 44.02, ✓ Swap 49.54 after
	// its drain ended at 44.36, ✓ Label 49.55, ✓ Reopen 49.56,
	// ✓ Uncordon 49.56.
	take, spent, release, ok := s.inSlot(node5)
	if !ok || take != sec(43.97) || release != sec(49.56) {
		t.Fatalf("kwok-node-5 in its slot from %s to %s (ok %v), want 43.97s to 49.56s", take, release, ok)
	}
	for step, d := range map[string]time.Duration{"Cordon the node": sec(0.05), "Swap the kernel module": sec(0.18),
		"Label the node with the measured version": sec(0.01), "Reopen the deploy gates": sec(0.01)} {
		if diff := spent[step] - d; diff > time.Millisecond || diff < -time.Millisecond {
			t.Errorf("kwok-node-5 %s: %s, want %s", step, spent[step], d)
		}
	}
	b := s.Analyse(marks)
	if b.Nodes != 24 {
		t.Errorf("%d nodes seen from cordon to uncordon, want 24", b.Nodes)
	}
	if b.Total() <= 0 || !strings.Contains(b.Top(3), "per node") {
		t.Errorf("no time beyond the ideal found: %+v", b)
	}
}

func TestParseRefusesABadTime(t *testing.T) {
	if _, err := Parse(strings.NewReader("soon ✓ a          Cordon the node    x\n"), kmdSteps); err == nil {
		t.Fatal("a line whose time is not seconds was accepted")
	}
}
