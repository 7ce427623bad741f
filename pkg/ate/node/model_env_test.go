package node

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/internal/modelcheck"
)

// The environment's moves, the rules every state keeps, and the goals.

func (m *aModel) moves(s aState) []modelcheck.Move[aState] {
	var out []modelcheck.Move[aState]
	add := func(name string, n aState) { out = append(out, modelcheck.Move[aState]{Name: name, Next: n}) }
	switch s.CLI {
	case cliIdle:
		for _, cmd := range m.commands(&s) {
			if mv, ok := m.cliMove(s, cmd); ok {
				out = append(out, mv)
			}
		}
	case cliActing:
		if mv, ok := m.call(s); ok {
			out = append(out, mv)
		}
		if s.Kills > 0 {
			n := s.clone()
			n.Kills--
			n.CLI, n.Ops = cliIdle, nil
			add(fmt.Sprintf("cli: killed (%d call(s) not made); re-run", len(s.Ops)), n)
		}
	}
	// The scheduler and the syncer: a worker registers once its pod has an
	// IP (runs on a node), whatever the atelet does.
	for slot, p := range s.Pods {
		if p.Node < 0 {
			for _, i := range m.schedulable(&s, slot) {
				n := s.clone()
				n.Pods[slot].Node = int8(i)
				n.Pods[slot].Reg = m.quiet && !p.Stuck // registered in the same move: a smaller model
				add(fmt.Sprintf("env: pod %s scheduled on %s", podName(slot, p.Gen), nodeName(i)), n)
			}
		} else if !p.Reg && !p.Stuck {
			n := s.clone()
			n.Pods[slot].Reg = true
			add(fmt.Sprintf("env: pod %s registers as an ACTIVE worker", podName(slot, p.Gen)), n)
		}
	}
	for slot, p := range s.Pods {
		if p.Stuck && m.fix {
			n := s.clone()
			n.Pods[slot].Stuck = false
			add(fmt.Sprintf("person: fixes what keeps pod %s from registering", podName(slot, p.Gen)), n)
		}
	}
	out = append(out, m.atelets(s)...)
	out = append(out, m.actors(s)...)
	if s.CLI == cliIdle && s.Drains > 0 {
		for slot, p := range s.Pods {
			if p.Reg && !p.Drain {
				n := s.clone()
				n.Drains--
				n.Pods[slot].Drain, n.Pods[slot].Hand = true, true
				add(fmt.Sprintf("person: DrainWorker %s by hand (%s)", podName(slot, p.Gen), nodeName(int(p.Node))), n)
			}
		}
	}
	// A list misses one item in the CLI's next observation.
	observes := s.CLI == cliIdle || (s.CLI == cliActing && s.Ops[0].Kind == opRecheck)
	if observes && s.Misses > 0 && s.MissPod < 0 && s.MissActor < 0 {
		for slot, p := range s.Pods {
			if p.Reg && m.missWorkers {
				n := s.clone()
				n.Misses--
				n.MissPod = int8(slot)
				add(fmt.Sprintf("env: the next ListWorkers misses %s", podName(slot, p.Gen)), n)
			}
		}
		for i := range s.Actors {
			if !m.missActors {
				break
			}
			n := s.clone()
			n.Misses--
			n.MissActor = int8(i)
			add(fmt.Sprintf("env: the next ListActors misses %s", actorName(i)), n)
		}
	}
	return out
}

// commands are what a person runs between runs: what status names.
func (m *aModel) commands(s *aState) []mCmd {
	cmds := []mCmd{{dir: Roll}}
	if m.back {
		cmds = append(cmds, mCmd{dir: Rollback})
	}
	// A pod on a node that has not registered: the run may wait out
	// --register-timeout on it.
	for _, p := range s.Pods {
		if p.Node >= 0 && !p.Reg && m.clearing {
			cmds = append(cmds, mCmd{dir: Roll, late: true})
			if m.back {
				cmds = append(cmds, mCmd{dir: Rollback, late: true})
			}
			break
		}
	}
	if m.byNode {
		for i := 0; i < m.nodes; i++ {
			cmds = append(cmds, mCmd{dir: Roll, node: nodeName(i)})
		}
	}
	drained := m.memoized("drained", s, func() string {
		var out []string
		for _, d := range NewLocator(m.cluster(s), m.workerPods(s), m.inventory(s, false)).Drained() {
			out = append(out, d.Node)
		}
		return strings.Join(out, ",")
	})
	for _, d := range strings.Split(drained, ",") {
		if d != "" {
			cmds = append(cmds, mCmd{recover: true, node: d})
		}
	}
	return cmds
}

// atelets: after a flip the old atelet exits (whatever still lives on it is
// lost) and the node's version starts; it becomes Ready, unless it is a v2
// atelet that cannot (a failing budget), until a person clears the cache.
func (m *aModel) atelets(s aState) []modelcheck.Move[aState] {
	var out []modelcheck.Move[aState]
	add := func(name string, n aState) { out = append(out, modelcheck.Move[aState]{Name: name, Next: n}) }
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		switch {
		case nd.Label != nd.Atelet:
			n := s.clone()
			n.Nodes[i].Atelet, n.Nodes[i].Ready = nd.Label, false
			for j := range n.Actors {
				if a := &n.Actors[j]; a.St != mSuspended && a.St != mCrashed && onNode(&s, *a, i) {
					a.St = mCrashed
				}
			}
			name := fmt.Sprintf("env: the %s atelet on %s exits, the %s one starts", versions[nd.Atelet], nodeName(i), versions[nd.Label])
			if m.quiet && (nd.Label != 1 || !nd.Broken) {
				// Ready in the same move unless it may fail: a smaller model.
				if nd.Label == 1 && s.Fails > 0 {
					b := n.clone()
					b.Fails--
					b.Nodes[i].Broken = true
					add(name+"; it never becomes Ready (its image cache's layout)", b)
				}
				n.Nodes[i].Ready = true
				name += "; Ready"
			}
			add(name, n)
		case !nd.Ready && (nd.Atelet != 1 || !nd.Broken):
			n := s.clone()
			n.Nodes[i].Ready = true
			add(fmt.Sprintf("env: the %s atelet on %s is Ready", versions[nd.Atelet], nodeName(i)), n)
			if nd.Atelet == 1 && s.Fails > 0 {
				n := s.clone()
				n.Fails--
				n.Nodes[i].Broken = true
				add(fmt.Sprintf("env: the %s atelet on %s never becomes Ready (its image cache's layout)", versions[1], nodeName(i)), n)
			}
		case nd.Broken && m.fix:
			n := s.clone()
			n.Nodes[i].Broken = false
			add(fmt.Sprintf("person: clears the image cache on %s", nodeName(i)), n)
		}
	}
	return out
}

// actors: suspends finish, idle actors pause, traffic wakes actors on free
// workers whose node runs their version's Ready atelet (a resume restores
// through it), a person suspends an actor by hand.
func (m *aModel) actors(s aState) []modelcheck.Move[aState] {
	var out []modelcheck.Move[aState]
	add := func(name string, n aState) { out = append(out, modelcheck.Move[aState]{Name: name, Next: n}) }
	bound := map[int8]bool{}
	for _, a := range s.Actors {
		if a.Worker >= 0 {
			bound[a.Worker] = true
		}
	}
	free := func(slot int, node int) bool {
		p := s.Pods[slot]
		if !p.Reg || p.Drain || bound[int8(slot)] || (node >= 0 && int(p.Node) != node) {
			return false
		}
		nd := s.Nodes[p.Node]
		return nd.Atelet == slotPin(slot) && nd.Ready
	}
	for i, a := range s.Actors {
		switch a.St {
		case mSuspending:
			n := s.clone()
			n.Actors[i] = mActor{St: mSuspended, Worker: -1, Pin: -1}
			add(fmt.Sprintf("env: %s finishes suspending", actorName(i)), n)
		case mRunning:
			n := s.clone()
			n.Actors[i] = mActor{St: mPaused, Worker: -1, Pin: s.Pods[a.Worker].Node}
			add(fmt.Sprintf("env: %s idles: PAUSED, snapshot on %s", actorName(i), nodeName(int(s.Pods[a.Worker].Node))), n)
		}
		if m.person && s.CLI == cliIdle && (a.St == mRunning || a.St == mPaused) {
			n := s.clone()
			n.Actors[i].St = mSuspending
			add(fmt.Sprintf("person: kubectl ate suspend actor %s", actorName(i)), n)
		}
		if (a.St != mSuspended && a.St != mPaused) || s.Wakes == 0 {
			continue
		}
		for slot := range s.Pods {
			if free(slot, int(a.Pin)) {
				n := s.clone()
				n.Wakes--
				n.Actors[i] = mActor{St: mRunning, Worker: int8(slot), Pin: -1}
				add(fmt.Sprintf("env: traffic wakes %s on worker %s (%s)", actorName(i), podName(slot, s.Pods[slot].Gen),
					nodeName(int(s.Pods[slot].Node))), n)
			}
		}
	}
	return out
}

func (m *aModel) invariants() []modelcheck.Invariant[aState] {
	return []modelcheck.Invariant[aState]{
		{Name: "no actor on a worker next to an atelet of another version, no undrained worker on a node its version left",
			Check: func(s aState) string {
				for slot, p := range s.Pods {
					if p.Node < 0 {
						continue
					}
					nd := s.Nodes[p.Node]
					hosts := false
					for _, a := range s.Actors {
						hosts = hosts || (int(a.Worker) == slot && a.St != mSuspended && a.St != mCrashed)
					}
					if hosts && nd.Atelet != slotPin(slot) || p.Reg && !p.Drain && nd.Label != slotPin(slot) {
						return fmt.Sprintf("worker %s (pinned to %s, draining %v, hosts an actor %v) on %s, labelled %s, %s atelet",
							podName(slot, p.Gen), versions[slotPin(slot)], p.Drain, hosts, nodeName(int(p.Node)), versions[nd.Label],
							versions[nd.Atelet])
					}
				}
				return ""
			}},
		{Name: "no actor CRASHED or lost", Check: func(s aState) string {
			for i, a := range s.Actors {
				if a.St == mCrashed {
					return actorName(i) + " is CRASHED"
				}
			}
			return ""
		}},
		{Name: "the node status shows in progress is the node next-node takes first, both ways", Check: func(s aState) string {
			return m.memoized("status", &s, func() string { return m.statusAgrees(&s) })
		}},
		{Name: "no old-pool pod deleted before its node's flip, no serving pool edited, every call planned, no false done",
			Check: func(s aState) string { return s.Bad }},
		{Name: "at most one node out of service (a person's drain aside)", Check: func(s aState) string {
			var out []string
			for i := 0; i < m.nodes; i++ {
				nd := s.Nodes[i]
				// A person's drain is theirs; that no run starts a node
				// while it leaves one serving nothing is checked at the mark.
				draining := false
				for _, p := range s.Pods {
					draining = draining || (p.Reg && p.Drain && !p.Hand && int(p.Node) == i)
				}
				if draining || nd.Cordon || nd.Label != nd.Atelet || !nd.Ready {
					out = append(out, nodeName(i))
				}
			}
			if len(out) > 1 {
				return "out of service: " + strings.Join(out, ", ")
			}
			return ""
		}},
	}
}

// statusAgrees compares what `kubectl ate status` says is in progress, from
// what it reads (the nodes, the pools' pods, the inventory), with the node
// `roll next-node` and `rollback next-node` would take first from what they
// read (the nodes in full, the pools' pods and the atelets, the inventory).
func (m *aModel) statusAgrees(s *aState) string {
	c := m.cluster(s)
	inv := m.inventory(s, false)
	var pods []corev1.Pod
	for i := 0; i < m.nodes; i++ {
		f := m.facts(s, &Config{}, i, inv)
		pods = append(pods, f.pods...)
	}
	// What status reads: the pools' pods, and every pod of the nodes that
	// stand half-way on those.
	shown, err := WithPodsOfMovingNodes(c, m.workerPods(s), inv, func(node string) ([]corev1.Pod, error) {
		return m.facts(s, &Config{}, nodeIndex(node), inv).pods, nil
	})
	if err != nil {
		return err.Error()
	}
	// Status lists what this Locator finds half-moved (campaign.InferStatus).
	inProgress := NewLocator(c, shown, inv).HalfMoved()
	loc := NewLocator(c, pods, inv)
	for _, way := range []struct {
		dir   Direction
		sides Sides
	}{{Roll, sides(c, oldPin, newPin)}, {Rollback, sides(c, newPin, oldPin)}} {
		shown, shownStep := "", ""
		for _, n := range inProgress {
			if n.Direction == way.dir {
				shown, shownStep = n.Node, n.Step()
				break
			}
		}
		next, err := loc.Next(way.sides)
		taken, takenStep := "", ""
		if half := loc.HalfMovedTo(way.sides); err == nil && len(half) > 0 {
			taken, takenStep = next, half[0].Step()
		}
		if shown != taken || shownStep != takenStep {
			return fmt.Sprintf("%s: status shows %q in progress at %q, %s next-node would first take %q at %q (err %v)", way.dir,
				shown, shownStep, way.dir, taken, takenStep, err)
		}
	}
	return ""
}

// finished says whether the cluster is at version v (0 v1, 1 v2) with
// every move finished and every worker of v's pool serving, decided from
// the model's own state, and next-node that way agrees (it would say every
// node is there, and status names no node to recover).
func (m *aModel) finished(s aState, v uint8) bool {
	if s.CLI != cliIdle || m.notAt(&s, versions[v]) != "" {
		return false
	}
	for i := 0; i < m.nodes; i++ {
		if nd := s.Nodes[i]; nd.Atelet != v || !nd.Ready {
			return false
		}
	}
	for slot, p := range s.Pods {
		if slotPin(slot) != v && p.Node >= 0 || slotPin(slot) == v && p.Node >= 0 && (!p.Reg || p.Drain) {
			return false
		}
	}
	return m.memoized("finished "+versions[v], &s, func() string {
		c := m.cluster(&s)
		loc := NewLocator(c, m.workerPods(&s), m.inventory(&s, false))
		if next, err := loc.Next(sides(c, versions[1-v], versions[v])); err != nil || next != "" || len(loc.Drained()) > 0 {
			return ""
		}
		return "yes"
	}) != ""
}

// goals: the roll can always still finish (unless a v2 atelet may stay
// broken for good: then only the way back can), and with the rollback a
// command, the rollback can too.
func (m *aModel) goals(fails int8, stuck bool) []modelcheck.Goal[aState] {
	var out []modelcheck.Goal[aState]
	if (fails == 0 && !stuck) || m.fix {
		out = append(out, modelcheck.Goal[aState]{Name: "the roll finishes", Done: func(s aState) bool { return m.finished(s, 1) }})
	}
	if m.back {
		out = append(out, modelcheck.Goal[aState]{Name: "the rollback finishes", Done: func(s aState) bool { return m.finished(s, 0) }})
	}
	return out
}
