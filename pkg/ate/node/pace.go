package node

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// AnnSuspendPace records on a node the suspend pace measured while emptying
// it: "<mean>/<suspends measured>@<RFC3339 time>". A later run (on this node
// or the next) projects its own suspends from it; nothing else reads it.
const AnnSuspendPace = "rollbook.dev/ate-suspend-pace"

// Pace is the mean time from SuspendActor to SUSPENDED over N suspends
// measured; N == 0: never measured, and then nothing is projected from it.
type Pace struct {
	Mean time.Duration
	N    int
	At   time.Time
}

// Known reports whether at least one suspend was measured.
func (p Pace) Known() bool { return p.N > 0 && p.Mean > 0 }

// Merge is the mean over both measurements, dated by the later.
func (p Pace) Merge(q Pace) Pace {
	if !q.Known() {
		return p
	}
	if !p.Known() {
		return q
	}
	n := p.N + q.N
	mean := (p.Mean*time.Duration(p.N) + q.Mean*time.Duration(q.N)) / time.Duration(n)
	at := p.At
	if q.At.After(at) {
		at = q.At
	}
	return Pace{Mean: mean, N: n, At: at}
}

func (p Pace) String() string {
	return fmt.Sprintf("%s/%d@%s", p.Mean.Round(time.Millisecond), p.N, p.At.UTC().Format(time.RFC3339))
}

// ParsePace reads AnnSuspendPace; ok false for anything else.
func ParsePace(s string) (Pace, bool) {
	mean, rest, ok := strings.Cut(s, "/")
	if !ok {
		return Pace{}, false
	}
	count, at, ok := strings.Cut(rest, "@")
	if !ok {
		return Pace{}, false
	}
	d, err1 := time.ParseDuration(mean)
	n, err2 := strconv.Atoi(count)
	t, err3 := time.Parse(time.RFC3339, at)
	if err1 != nil || err2 != nil || err3 != nil || d <= 0 || n < 1 {
		return Pace{}, false
	}
	return Pace{Mean: d, N: n, At: t}, true
}

// LatestPace is the most recently measured pace recorded on nodes: the
// substrate's checkpoint and upload path is the fleet's, not one node's.
func LatestPace(nodes []corev1.Node) Pace {
	var out Pace
	for _, n := range nodes {
		if p, ok := ParsePace(n.Annotations[AnnSuspendPace]); ok && (!out.Known() || p.At.After(out.At)) {
			out = p
		}
	}
	return out
}

// Projection is how long suspending Actors at Pace, Concurrency at a time
// and Interval apart, would take (Projected) against the Budget left.
type Projection struct {
	Actors      int
	Pace        Pace
	Concurrency int
	Interval    time.Duration
	Projected   time.Duration
	Budget      time.Duration
}

// Project is the time suspending actors takes: ceil(actors/concurrency)
// rounds of one pace each, and no less than the starts spaced interval apart
// plus one pace. A suspend call holds its slot until SUSPENDED, so the
// concurrency bounds the rate.
func Project(actors int, pace Pace, concurrency int, interval, budget time.Duration) Projection {
	p := Projection{Actors: actors, Pace: pace, Concurrency: max(1, concurrency), Interval: interval, Budget: budget}
	p.Projected = p.take(p.Concurrency)
	return p
}

func (p Projection) take(concurrency int) time.Duration {
	if p.Actors <= 0 {
		return 0
	}
	rounds := (p.Actors + concurrency - 1) / concurrency
	d := time.Duration(rounds) * p.Pace.Mean
	if p.Interval > 0 {
		d = max(d, time.Duration(p.Actors-1)*p.Interval+p.Pace.Mean)
	}
	return d
}

// Fits reports whether no pace is known (nothing to project) or the
// projection is within the budget.
func (p Projection) Fits() bool { return !p.Pace.Known() || p.Projected <= p.Budget }

// FitConcurrency is the least concurrency whose projection fits budget (0:
// none does, a single suspend or the interval alone takes longer).
func (p Projection) FitConcurrency(budget time.Duration) int {
	if !p.Pace.Known() || p.Actors <= 0 {
		return 1
	}
	rounds := int(budget / p.Pace.Mean)
	if rounds < 1 {
		return 0
	}
	c := (p.Actors + rounds - 1) / rounds
	if p.take(c) > budget {
		return 0
	}
	return c
}

// Describe names the numbers.
func (p Projection) Describe() string {
	s := fmt.Sprintf("%d actor(s) at the measured pace of %s per suspend (%d suspend(s) measured), %d at a time "+
		"(--max-concurrent-suspends)", p.Actors, p.Pace.Mean.Round(10*time.Millisecond), p.Pace.N, p.Concurrency)
	if p.Interval > 0 {
		s += fmt.Sprintf(", %s apart (--suspend-interval)", p.Interval)
	}
	return s + fmt.Sprintf(": projected %s, budget %s", p.Projected.Round(time.Second), p.Budget.Round(time.Second))
}

// Fix says what makes the projection fit a fresh budget of full (the
// --suspend-timeout a re-run starts with).
func (p Projection) Fix(full time.Duration) string {
	var ways []string
	if c := p.FitConcurrency(full); c > p.Concurrency {
		ways = append(ways, fmt.Sprintf("--max-concurrent-suspends %d", c))
	}
	need := p.Projected + p.Projected/10 // the pace is a mean: leave room
	ways = append(ways, fmt.Sprintf("--suspend-timeout %s", (need+time.Minute-1)/time.Minute*time.Minute))
	return "re-run with " + strings.Join(ways, " or ") + ", or suspend some of its actors by hand first " +
		"(" + SuspendByHand + ")"
}

// paceMeter measures this run's suspends, on top of what earlier runs
// recorded.
type paceMeter struct {
	mu      sync.Mutex
	earlier Pace
	run     Pace
	now     func() time.Time
}

func newPaceMeter(earlier Pace) *paceMeter { return &paceMeter{earlier: earlier, now: time.Now} }

func (m *paceMeter) observe(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.run = m.run.Merge(Pace{Mean: d, N: 1, At: m.now()})
}

// pace is the earlier pace and this run's, merged.
func (m *paceMeter) pace() Pace {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.earlier.Merge(m.run)
}

// measured: this run measured at least one suspend.
func (m *paceMeter) measured() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run.Known()
}
