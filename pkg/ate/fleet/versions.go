package fleet

// oldAndNew decides which of two atelet DaemonSets serves OLD and which
// NEW, on the strongest evidence there is:
//  1. rollbook's records, which it writes only on the NEW DaemonSet
//     (AnnEveryNodeReached, AnnControlPlaneReverted);
//  2. rollbook's clones: a pool carrying AnnClonedFrom whose source still
//     exists is pinned to NEW and its source to OLD (a former clone whose
//     source was retired says nothing);
//  3. creation: ate-setup creates NEW's DaemonSet beside OLD's;
//  4. only when both were created within the same second (creation times
//     are kept to the second), the pins of the pools rollbook did not
//     clone.
//
// Pins do not outvote creation: pools a person cloned by hand carry no
// annotation, are pinned to NEW, and may outnumber the pools on OLD.
func oldAndNew(first, second Atelet, pools []Pool) (old, new string) {
	a, b := first.Version, second.Version
	switch recorded := func(x Atelet) bool { return !x.Reached.IsZero() || !x.Reverted.IsZero() }; {
	case recorded(first) && !recorded(second):
		return b, a
	case recorded(second) && !recorded(first):
		return a, b
	}
	pinOf := map[string]string{}
	for _, p := range pools {
		pinOf[p.Key()] = p.Pin
	}
	votes := map[string]int{} // NEW as rollbook's clones say
	for _, p := range pools {
		if src, ok := pinOf[p.ClonedFrom]; ok && p.ClonedFrom != "" && src != p.Pin &&
			(p.Pin == a && src == b || p.Pin == b && src == a) {
			votes[p.Pin]++
		}
	}
	switch {
	case votes[a] > votes[b]:
		return b, a
	case votes[b] > votes[a]:
		return a, b
	}
	if !first.Created.Equal(second.Created) {
		if second.Created.Before(first.Created) {
			return b, a
		}
		return a, b
	}
	pins := map[string]int{}
	for _, p := range pools {
		if p.ClonedFrom == "" && p.Pin != "" {
			pins[p.Pin]++
		}
	}
	if pins[a] > pins[b] {
		return a, b
	}
	if pins[b] > pins[a] {
		return b, a
	}
	return a, b
}
