// Package critpath reads a roll's progress output and says where the time
// of its critical path went. Under --max-parallel K a roll has K slots;
// each holds one node from its cordon to its uncordon, then passes to the
// next node. The ideal counts only what a node must spend in a slot (its
// drain and its helper's own work); everything else a slot spends — the
// steps around them, the time between a release and the next cordon — is
// rollbook's own, and the bench names its largest parts (issue 45).
package critpath

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Mark is one progress line that begins (→) or ends (✓) a node's step.
type Mark struct {
	At   time.Duration // since the run began
	Done bool          // ✓ rather than →
	Node string
	Step string // the step's title
}

// Parse reads progress lines as the fleet bench keeps them: the seconds
// since the run began, a space, then the line the CLI printed. It keeps the
// lines that begin or end a step whose title is one of steps; a title is
// matched as a prefix, since a long one runs into its evidence.
func Parse(r io.Reader, steps []string) ([]Mark, error) {
	// The longest title first: one may begin with another.
	byLength := append([]string(nil), steps...)
	sort.Slice(byLength, func(i, j int) bool { return len(byLength[i]) > len(byLength[j]) })
	var out []Mark
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		secs, line, ok := strings.Cut(strings.TrimLeft(sc.Text(), " "), " ")
		if !ok {
			continue
		}
		var done bool
		switch {
		case strings.HasPrefix(line, "✓ "):
			done = true
		case strings.HasPrefix(line, "→ "):
		default:
			continue
		}
		node, rest, ok := strings.Cut(strings.TrimLeft(line[len("→ "):], " "), " ")
		if !ok {
			continue
		}
		rest = strings.TrimLeft(rest, " ")
		for _, title := range byLength {
			if strings.HasPrefix(rest, title) {
				at, err := strconv.ParseFloat(secs, 64)
				if err != nil {
					return nil, fmt.Errorf("line %d: %q is not a time in seconds", n, secs)
				}
				out = append(out, Mark{At: time.Duration(at * float64(time.Second)), Done: done, Node: node, Step: title})
				break
			}
		}
	}
	return out, sc.Err()
}

// Slots says how a run's slots are taken and given back.
type Slots struct {
	// Parallel is K, the number of slots.
	Parallel int
	// Take is the step whose last beginning takes a slot (a cordon); its
	// earlier beginnings waited for one.
	Take string
	// Release is the step whose end gives the slot back (an uncordon).
	Release string
	// Ideal is how much of a step's time in a slot the ideal counts
	// (the drain whole, a helper its own work); nil counts none.
	Ideal func(step string, took time.Duration) time.Duration
}

// Handoff names the time between a slot's release and its next take.
const Handoff = "between a slot's uncordon and its next cordon"

// Cause is one part of the time slots spent beyond the ideal.
type Cause struct {
	Name  string
	Total time.Duration
}

// Breakdown is where the slots' time beyond the ideal went.
type Breakdown struct {
	Nodes  int     // nodes seen from a take to a release
	Causes []Cause // largest first
}

// Analyse splits each node's time in its slot into its steps — from the
// take, each step's share ends at its ✓ — less what the ideal counts, and
// adds the handoffs: the j-th take after the first K waited from the
// (j-K)-th release, as slots pass in turn.
func (s Slots) Analyse(marks []Mark) Breakdown {
	byNode := map[string][]Mark{}
	var order []string
	for _, m := range marks {
		if _, seen := byNode[m.Node]; !seen {
			order = append(order, m.Node)
		}
		byNode[m.Node] = append(byNode[m.Node], m)
	}
	total := map[string]time.Duration{}
	var takes, releases []time.Duration
	nodes := 0
	for _, node := range order {
		take, spent, release, ok := s.inSlot(byNode[node])
		if !ok {
			continue
		}
		nodes++
		takes, releases = append(takes, take), append(releases, release)
		for step, d := range spent {
			total[step] += d
		}
	}
	sort.Slice(takes, func(i, j int) bool { return takes[i] < takes[j] })
	sort.Slice(releases, func(i, j int) bool { return releases[i] < releases[j] })
	for j := s.Parallel; j < len(takes); j++ {
		if gap := takes[j] - releases[j-s.Parallel]; gap > 0 {
			total[Handoff] += gap
		}
	}
	b := Breakdown{Nodes: nodes}
	for name, d := range total {
		if d > 0 {
			b.Causes = append(b.Causes, Cause{Name: name, Total: d})
		}
	}
	sort.Slice(b.Causes, func(i, j int) bool {
		if b.Causes[i].Total != b.Causes[j].Total {
			return b.Causes[i].Total > b.Causes[j].Total
		}
		return b.Causes[i].Name < b.Causes[j].Name
	})
	return b
}

// inSlot is one node's take, its time in the slot per step beyond the
// ideal, and its release; ok is false when the node never held a slot
// from a take to a release.
func (s Slots) inSlot(marks []Mark) (take time.Duration, spent map[string]time.Duration, release time.Duration, ok bool) {
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].At < marks[j].At })
	taken := -1
	for i, m := range marks {
		if m.Step == s.Take && !m.Done {
			take, taken = m.At, i
		}
		if m.Step == s.Take && m.Done {
			if taken < 0 {
				take, taken = m.At, i
			}
			break
		}
	}
	if taken < 0 {
		return 0, nil, 0, false
	}
	spent = map[string]time.Duration{}
	from := take
	for _, m := range marks[taken:] {
		if !m.Done {
			continue
		}
		took := m.At - from
		ideal := time.Duration(0)
		if s.Ideal != nil {
			ideal = min(took, s.Ideal(m.Step, took))
		}
		spent[m.Step] += took - ideal
		from = m.At
		if m.Step == s.Release {
			return take, spent, m.At, true
		}
	}
	return 0, nil, 0, false
}

// PerNode is the cause's time per node.
func (b Breakdown) PerNode(c Cause) time.Duration {
	if b.Nodes == 0 {
		return 0
	}
	return c.Total / time.Duration(b.Nodes)
}

// Total is the slots' time beyond the ideal, all causes together.
func (b Breakdown) Total() time.Duration {
	var t time.Duration
	for _, c := range b.Causes {
		t += c.Total
	}
	return t
}

// Top says the n largest causes, each per node and as a share of all.
func (b Breakdown) Top(n int) string {
	all := b.Total()
	if all == 0 {
		return "none"
	}
	var parts []string
	for _, c := range b.Causes[:min(n, len(b.Causes))] {
		parts = append(parts, fmt.Sprintf("%s %s per node (%.0f %%)", c.Name, b.PerNode(c).Round(time.Millisecond),
			100*c.Total.Seconds()/all.Seconds()))
	}
	return strings.Join(parts, "; ")
}
