package fleet

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var created = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// TestHandMadeClonesNeverSwapOldAndNew generates fleets mid-upgrade: pools
// pinned to OLD or unpinned, rollbook's clones of some, and any number of
// pools pinned to NEW without rollbook's annotation (a person's clones, or
// new pools). Whatever their number, OLD stays the version the earlier
// DaemonSet serves.
func TestHandMadeClonesNeverSwapOldAndNew(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 42))
	for i := range 2000 {
		oldDS := Atelet{Name: "atelet-v1", Version: "v1", Created: created}
		newDS := Atelet{Name: "atelet-v2", Version: "v2", Created: created.Add(time.Duration(1+r.IntN(3600)) * time.Second)}
		var pools []Pool
		for j := range r.IntN(4) {
			p := Pool{Namespace: "ns", Name: fmt.Sprintf("p%d", j), Pin: "v1"}
			if r.IntN(3) == 0 {
				p.Pin = "" // unpinned: serves wherever
			}
			pools = append(pools, p)
			if r.IntN(2) == 0 {
				pools = append(pools, Pool{Namespace: "ns", Name: p.Name + "-v2", Pin: "v2", ClonedFrom: p.Key()})
			}
		}
		for j := range r.IntN(8) {
			pools = append(pools, Pool{Namespace: "ns", Name: fmt.Sprintf("hand%d", j), Pin: "v2"})
		}
		// A former clone of an earlier upgrade, its source retired.
		if r.IntN(2) == 0 {
			pools = append(pools, Pool{Namespace: "ns", Name: "former", Pin: "v1", ClonedFrom: "ns/retired"})
		}
		r.Shuffle(len(pools), func(x, y int) { pools[x], pools[y] = pools[y], pools[x] })
		if old, nw := oldAndNew(oldDS, newDS, pools); old != "v1" || nw != "v2" {
			t.Fatalf("fleet %d: OLD %s, NEW %s from pools %+v", i, old, nw, pools)
		}
	}
}

// TestOldAndNewEvidence: each kind of evidence decides against the weaker
// ones below it.
func TestOldAndNewEvidence(t *testing.T) {
	at := func(s int) time.Time { return created.Add(time.Duration(s) * time.Second) }
	v1, v2 := Atelet{Version: "v1", Created: at(0)}, Atelet{Version: "v2", Created: at(60)}
	recorded := v1
	recorded.Reached = at(100)
	for _, tc := range []struct {
		name   string
		a, b   Atelet
		pools  []Pool
		oldIs  string
		reason string
	}{
		{"creation", v1, v2, nil, "v1", "the earlier DaemonSet is OLD"},
		{"record beats creation", recorded, v2, nil, "v2", "rollbook records only on NEW"},
		{"clones beat creation", v1, v2, []Pool{{Namespace: "n", Name: "a", Pin: "v2"}, {Namespace: "n", Name: "a-c", Pin: "v1", ClonedFrom: "n/a"}},
			"v2", "rollbook's clone is pinned to NEW"},
		{"a clone of a retired source says nothing", v1, v2, []Pool{{Namespace: "n", Name: "f", Pin: "v2", ClonedFrom: "n/gone"}},
			"v1", "creation decides"},
		{"pins only on a tie", Atelet{Version: "v1", Created: at(5)}, Atelet{Version: "v2", Created: at(5)},
			[]Pool{{Namespace: "n", Name: "a", Pin: "v2"}}, "v2", "the pools say"},
		{"pins never beat creation", v1, v2, []Pool{{Namespace: "n", Name: "a", Pin: "v2"}, {Namespace: "n", Name: "b", Pin: "v2"}},
			"v1", "hand clones carry no annotation"},
	} {
		if old, _ := oldAndNew(tc.a, tc.b, tc.pools); old != tc.oldIs {
			t.Errorf("%s: OLD %s, want %s (%s)", tc.name, old, tc.oldIs, tc.reason)
		}
		if old, _ := oldAndNew(tc.b, tc.a, tc.pools); old != tc.oldIs {
			t.Errorf("%s, DaemonSets listed the other way: OLD %s, want %s", tc.name, old, tc.oldIs)
		}
	}
}
