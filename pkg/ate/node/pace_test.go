package node

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ateapi"
)

func TestProjectSuspends(t *testing.T) {
	pace := Pace{Mean: 2 * time.Second, N: 3}
	for _, c := range []struct {
		name                string
		actors, concurrency int
		interval, budget    time.Duration
		projected           time.Duration
		fits                bool
		fit                 int // FitConcurrency(budget)
	}{
		{"one at a time", 12, 1, 0, 20 * time.Second, 24 * time.Second, false, 2},
		{"rounds round up", 13, 4, 0, 20 * time.Second, 8 * time.Second, true, 2},
		{"exactly the budget", 10, 1, 0, 20 * time.Second, 20 * time.Second, true, 1},
		{"no actor", 0, 1, 0, time.Second, 0, true, 1},
		{"one suspend outlasts the budget", 3, 8, 0, time.Second, 2 * time.Second, false, 0},
		{"the interval dominates", 10, 10, 3 * time.Second, 20 * time.Second, 29 * time.Second, false, 0},
		{"concurrency 0 counts as 1", 2, 0, 0, 10 * time.Second, 4 * time.Second, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := Project(c.actors, pace, c.concurrency, c.interval, c.budget)
			if p.Projected != c.projected || p.Fits() != c.fits {
				t.Errorf("Project: %s, fits %v; want %s, fits %v", p.Projected, p.Fits(), c.projected, c.fits)
			}
			if got := p.FitConcurrency(c.budget); got != c.fit {
				t.Errorf("FitConcurrency(%s) = %d, want %d", c.budget, got, c.fit)
			}
		})
	}
}

// A pace never measured projects nothing: no refusal rests on a guess.
func TestUnknownPaceAlwaysFits(t *testing.T) {
	if p := Project(1000, Pace{}, 1, 0, time.Second); !p.Fits() {
		t.Fatalf("an unknown pace refused: %s", p.Describe())
	}
}

func TestPaceRecordRoundTripsAndMerges(t *testing.T) {
	at := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	p := Pace{Mean: 2100 * time.Millisecond, N: 4, At: at}
	got, ok := ParsePace(p.String())
	if !ok || got != p {
		t.Fatalf("ParsePace(%q) = %v, %v", p.String(), got, ok)
	}
	for _, bad := range []string{"", "2s", "2s/0@" + at.Format(time.RFC3339), "x/1@" + at.Format(time.RFC3339), "2s/1@yesterday"} {
		if _, ok := ParsePace(bad); ok {
			t.Errorf("ParsePace(%q) accepted", bad)
		}
	}
	m := p.Merge(Pace{Mean: 900 * time.Millisecond, N: 2, At: at.Add(time.Minute)})
	if m.N != 6 || m.Mean != 1700*time.Millisecond || !m.At.Equal(at.Add(time.Minute)) {
		t.Fatalf("merge: %v", m)
	}
	if p.Merge(Pace{}) != p || (Pace{}).Merge(p) != p {
		t.Fatal("merging an unknown pace changed it")
	}
	node := func(name, v string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnSuspendPace: v}}}
	}
	later := Pace{Mean: time.Second, N: 1, At: at.Add(time.Hour)}
	if got := LatestPace([]corev1.Node{node("a", p.String()), node("b", later.String()), node("c", "junk")}); got != later {
		t.Fatalf("LatestPace = %v, want the later %v", got, later)
	}
}

// Actors on workers whose pods are going come first, earliest deletion
// first: their eviction window is running, and the pace check never stops a
// run before them.
func TestGoingFirst(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC))
	later := metav1.NewTime(at.Add(time.Minute))
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{UID: "w-late", DeletionTimestamp: &later}},
		{ObjectMeta: metav1.ObjectMeta{UID: "w-early", DeletionTimestamp: &at}},
		{ObjectMeta: metav1.ObjectMeta{UID: "w-live"}},
	}
	actors := []ateapi.Actor{{Name: "a", Worker: "w-live"}, {Name: "b", Worker: "w-late"}, {Name: "c"}, {Name: "d", Worker: "w-early"}}
	got, urgent := goingFirst(nodeFacts{pods: pods}, actors)
	var names []string
	for _, a := range got {
		names = append(names, a.Name)
	}
	if strings.Join(names, ",") != "d,b,a,c" || urgent != 2 {
		t.Fatalf("goingFirst = %v, %d urgent; want d,b,a,c with 2", names, urgent)
	}
	if _, n := goingFirst(nodeFacts{pods: pods[2:]}, actors); n != 0 {
		t.Fatalf("%d urgent without a Terminating pod", n)
	}
}
