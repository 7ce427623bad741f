package node

import (
	"fmt"
	"strings"

	"github.com/rollbook/rollbook/internal/modelcheck"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The CLI's moves: one observation of a command, the API calls its step
// makes (effect), and each call made (call).

// A command status names.
type mCmd struct {
	dir     Direction
	node    string // a NODE argument ("" none)
	recover bool   // kubectl ate recover-node NODE
	late    bool   // --register-timeout passes during the run
}

func (c mCmd) String() string {
	if c.late {
		c.late = false
		return c.String() + " (a pod stays unregistered past --register-timeout)"
	}
	switch {
	case c.recover:
		return "recover-node " + c.node
	case c.dir == Rollback:
		return "rollback next-node"
	case c.node != "":
		return "roll next-node " + c.node
	}
	return "roll next-node"
}

// cliMove is one observation of the CLI in state s running cmd.
func (m *aModel) cliMove(s aState, cmd mCmd) (modelcheck.Move[aState], bool) {
	n := s.clone()
	n.MissPod, n.MissActor = -1, -1 // the miss is used up by this observation
	c := m.cluster(&s)
	inv := m.inventory(&s, true)
	if cmd.recover {
		return m.recoverMove(s, n, cmd, inv)
	}
	sd, err := RollSides(c)
	if cmd.dir == Rollback {
		sd, err = RollbackSides(c)
	}
	if err != nil {
		panic(err)
	}
	loc := NewLocator(c, m.workerPods(&s), inv)
	target := cmd.node
	if target == "" {
		var err error
		if target, err = loc.Next(sd); err != nil {
			return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: blocked: %v", cmd, err), Next: n}, true
		}
		if target == "" {
			if why := m.notAt(&s, sd.To); why != "" && n.Bad == "" {
				n.Bad = fmt.Sprintf("%s says every node is at %s, but %s", cmd, sd.To, why)
			}
			return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: every node is at %s", cmd, sd.To), Next: n}, true
		}
	} else if err := loc.Named(target); err != nil {
		return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: blocked: %v", cmd, err), Next: n}, true
	}
	cfg := &Config{Sides: sd}
	ni := nodeIndex(target)
	f := m.facts(&s, cfg, ni, inv)
	pos := runbook.Locate(m.rb, f)
	if pos.Stage == runbook.StageDone {
		return modelcheck.Move[aState]{}, false
	}
	st := m.rb.Steps[pos.Step]
	if pos.Guard != "" {
		return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: %s %s blocked: %s", cmd, target, st.ID, pos.Guard), Next: n}, true
	}
	ops, bad := m.effect(&s, st, f, ni, cmd.late)
	return m.acting(s, n, cmd, target, st.ID, ops, bad)
}

// acting turns a step's calls into the CLI's move (made at once for an
// atomic step); no calls: the step waits for the environment.
func (m *aModel) acting(s, n aState, cmd mCmd, target, step string, ops []mOp, bad string) (modelcheck.Move[aState], bool) {
	if len(ops) == 0 && bad == "" {
		if s.MissPod < 0 && s.MissActor < 0 {
			return modelcheck.Move[aState]{}, false // waiting for the environment (atelet, pods)
		}
		return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: %s %s waits", cmd, target, step), Next: n}, true
	}
	if n.Bad == "" {
		n.Bad = bad
	}
	n.CLI, n.Ops = cliActing, ops
	name := fmt.Sprintf("cli: %s: %s %s (%d call(s))", cmd, target, step, len(ops))
	if m.atomic[step] {
		// The window between this observation and the calls is closed.
		for n.CLI == cliActing {
			mv, ok := m.call(n)
			if !ok {
				break
			}
			n, name = mv.Next, name+"; "+strings.TrimPrefix(mv.Name, "cli: ")
		}
	}
	return modelcheck.Move[aState]{Name: name, Next: n}, true
}

// notAt says, from the model's own state, why the cluster is not at
// version v with every move finished ("" when it is).
func (m *aModel) notAt(s *aState, v string) string {
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		if versions[nd.Label] != v || nd.Cordon || nd.Moving != 0 || nd.Verify != 0 || nd.Seen != 0 {
			return fmt.Sprintf("%s: label %s, cordoned %v, moving-to %q, verify-pending %q", nodeName(i), versions[nd.Label],
				nd.Cordon, mark(nd.Moving), mark(nd.Verify))
		}
	}
	return ""
}

// recoverMove is one observation of recover-node NODE: the real recover
// runbook's position and guards on the model's facts.
func (m *aModel) recoverMove(s, n aState, cmd mCmd, inv *ateapi.Inventory) (modelcheck.Move[aState], bool) {
	ni := nodeIndex(cmd.node)
	f := m.recoverFacts(&s, ni, inv)
	pos := runbook.Locate(m.rec, f)
	if pos.Stage == runbook.StageDone {
		return modelcheck.Move[aState]{}, false
	}
	st := m.rec.Steps[pos.Step]
	if pos.Guard != "" {
		return modelcheck.Move[aState]{Name: fmt.Sprintf("cli: %s: %s blocked: %s", cmd, st.ID, pos.Guard), Next: n}, true
	}
	planned := map[string]bool{}
	if st.Plan != nil {
		for _, c := range st.Plan(f) {
			planned[c.Object+" "+c.Action] = true
		}
	}
	var ops []mOp
	bad := ""
	switch st.ID {
	case "ate.recover.suspend":
		live, crashed := f.residents()
		if len(crashed) == 0 {
			ops, bad = m.suspendOps(live, ni, planned)
		}
	case "ate.recover.delete-pods":
		hosts := hostsByWorker(m.inventory(&s, false))
		for _, w := range f.stale() {
			if !planned["pod/"+w.Namespace+"/"+w.Pod+" delete"] {
				bad = "delete of " + w.Pod + " is not in the plan"
			}
			if slot, ok := slotOf(&s, w.Name); ok && hosts[w.Name] == "" {
				ops = append(ops, mOp{Kind: opDelete, Arg: int8(slot), Gen: s.Pods[slot].Gen, Node: int8(ni), Flag: true})
			}
		}
	case "ate.recover.clear-marks":
		ops = append(ops, mOp{Kind: opUnmark, Arg: int8(ni), Node: int8(ni)})
	}
	return m.acting(s, n, cmd, cmd.node, st.ID, ops, bad)
}

// suspendOps suspends the live actors that are not mid-transition, then
// confirms each (the evacuation's round).
func (m *aModel) suspendOps(live []ateapi.Actor, ni int, planned map[string]bool) (ops []mOp, bad string) {
	for _, a := range live {
		if !planned["actor/"+a.Atespace+"/"+a.Name+" SuspendActor"] {
			bad = "suspend of " + a.Name + " is not in the plan"
		}
		if !a.State.Transient() || a.State == ateapi.ActorUnspecified {
			ops = append(ops, mOp{Kind: opSuspend, Arg: int8(actorIndex(a.Name)), Node: int8(ni)})
		}
	}
	for _, a := range live {
		ops = append(ops, mOp{Kind: opConfirm, Arg: int8(actorIndex(a.Name)), Node: int8(ni)})
	}
	return ops, bad
}

// effect is the model's reading of a step's Act on facts f, as the API
// calls it makes in order; bad names an action the plan does not justify.
func (m *aModel) effect(s *aState, st runbook.Step[nodeFacts], f nodeFacts, ni int, late bool) (ops []mOp, bad string) {
	var plan []runbook.Change
	if st.Plan != nil {
		plan = st.Plan(f)
	}
	planned := map[string]bool{}
	for _, c := range plan {
		planned[c.Object+" "+c.Action] = true
		if strings.HasPrefix(c.Object, "workerpool/") {
			bad = "plan of " + st.ID + " changes " + c.Object
		}
	}
	to := versionIndex(f.cfg.To)
	drain := func(w ateapi.Worker) {
		if slot, ok := slotOf(s, w.Name); ok {
			ops = append(ops, mOp{Kind: opDrain, Arg: int8(slot), Gen: s.Pods[slot].Gen, Node: int8(ni)})
		}
	}
	// deletes are the pods the step deletes: Act reads the inventory again
	// and keeps any pod whose worker hosts an actor.
	deletes := func(pods []string, declared bool) {
		hosts := hostsByWorker(m.inventory(s, false))
		for _, uid := range pods {
			if !planned["pod/"+mNS+"/"+uid+" delete"] {
				bad = "delete of " + uid + " is not in the plan"
			}
			if slot, ok := slotOf(s, uid); ok && hosts[uid] == "" {
				ops = append(ops, mOp{Kind: opDelete, Arg: int8(slot), Gen: s.Pods[slot].Gen, Node: int8(ni), Flag: declared})
			}
		}
	}
	switch st.ID {
	case "ate.node.mark":
		// The move is recorded before anything on the node changes: a kill
		// after it leaves a node known to be in progress. No node is
		// started while another serves nothing for a person's drain: that
		// would be two out of service.
		ops, bad = m.record(f, ni, planned, ops, bad)
		if nd := s.Nodes[ni]; nd.Moving == 0 && nd.Verify == 0 && nd.Seen == 0 {
			for i := 0; i < m.nodes; i++ {
				if i != ni && handDrained(s, i) {
					bad = fmt.Sprintf("%s started while %s serves nothing for a person's drain", f.node.Name, nodeName(i))
				}
			}
		}
	case "ate.node.drain":
		// record again: the residents the drain's facts show are added.
		ops, bad = m.record(f, ni, planned, ops, bad)
		for _, w := range f.undrained() {
			if !planned["worker/"+w.Name+" DrainWorker"] {
				bad = "drain of worker " + w.Name + " is not in the plan"
			}
			drain(w)
		}
		ops, bad = m.clearUnregistered(s, f, ni, late, planned, ops, bad)
	case "ate.node.suspend":
		// emptyNode: record the residents, drain what registered since,
		// stop at a crashed actor, suspend the live ones that are not
		// mid-transition, confirm each.
		ops, bad = m.record(f, ni, planned, ops, bad)
		for _, w := range f.undrained() {
			drain(w)
		}
		live, crashed := f.residents()
		if len(crashed) > 0 {
			return ops, bad // blocked after the drains (no --revert-crashed)
		}
		ops, bad = m.clearUnregistered(s, f, ni, late, planned, ops, bad)
		more, b := m.suspendOps(live, ni, planned)
		ops = append(ops, more...)
		if b != "" {
			bad = b
		}
	case "ate.node.flip":
		// flipNode: cordon, a second look, the patch if the look agrees,
		// the cordon lifted whatever happened.
		for _, a := range []string{"cordon", "label", "uncordon", "annotate"} {
			if !planned["node/"+f.node.Name+" "+a] {
				bad = a + " of the flip is not in the plan"
			}
		}
		ops = append(ops, mOp{Kind: opCordon, Arg: int8(ni), Node: int8(ni)}, mOp{Kind: opRecheck, Arg: int8(ni), Node: int8(ni), V: to},
			mOp{Kind: opFlip, Arg: int8(ni), Node: int8(ni), V: to}, mOp{Kind: opUncordon, Arg: int8(ni), Node: int8(ni)})
	case "ate.node.release":
		if f.ourCordon() {
			if !planned["node/"+f.node.Name+" uncordon"] {
				bad = "uncordon is not in the plan"
			}
			ops = append(ops, mOp{Kind: opUncordon, Arg: int8(ni), Node: int8(ni)})
		}
		if f.marked() {
			if !planned["node/"+f.node.Name+" annotate"] {
				bad = "unmark is not in the plan"
			}
			ops = append(ops, mOp{Kind: opUnmark, Arg: int8(ni), Node: int8(ni)})
		}
	case "ate.node.replace-drained":
		// Lift the flip's cordon, empty the drained workers, delete their
		// pods (declared on the Lease: replaced in place).
		if f.ourCordon() {
			if !planned["node/"+f.node.Name+" uncordon"] {
				bad = "uncordon is not in the plan"
			}
			ops = append(ops, mOp{Kind: opUncordon, Arg: int8(ni), Node: int8(ni)})
		}
		live, crashed := f.staleView().residents()
		if len(crashed) > 0 {
			return ops, bad
		}
		more, b := m.suspendOps(live, ni, planned)
		ops = append(ops, more...)
		if b != "" {
			bad = b
		}
		var uids []string
		for _, w := range f.stale() {
			uids = append(uids, w.Name)
		}
		deletes(uids, true)
	case "ate.node.verify":
		// Wait until the node serves, then remove the mark.
		if ok, _ := f.toVerified(); ok && f.verifyPending() {
			if !planned["node/"+f.node.Name+" annotate"] {
				bad = "the verify's unmark is not in the plan"
			}
			ops = append(ops, mOp{Kind: opVerified, Arg: int8(ni), Node: int8(ni)})
		}
	case "ate.node.delete-old-pods":
		var uids []string
		for _, p := range f.podsOf(f.cfg.FromPools) {
			uids = append(uids, string(p.UID))
		}
		deletes(uids, false)
	}
	return ops, bad
}

// clearUnregistered is the model's reading of nodeBuilder.clearUnregistered,
// run when --register-timeout passed (late): cordon the node, then each
// unregistered pod's own worker read and the pod deleted if it hosts none.
func (m *aModel) clearUnregistered(s *aState, f nodeFacts, ni int, late bool, planned map[string]bool, ops []mOp,
	bad string) ([]mOp, string) {
	stuck := f.unregisteredPods()
	if !late || len(stuck) == 0 {
		return ops, bad
	}
	if !planned["node/"+f.node.Name+" cordon"] {
		bad = "the cordon before deleting unregistered pods is not in the plan"
	}
	ops = append(ops, mOp{Kind: opCordon, Arg: int8(ni), Node: int8(ni)})
	for _, p := range stuck {
		if !planned["pod/"+p.Namespace+"/"+p.Name+" delete"] {
			bad = "delete of unregistered " + p.Name + " is not in the plan"
		}
		if slot, ok := slotOf(s, string(p.UID)); ok {
			ops = append(ops, mOp{Kind: opDeleteUnregistered, Arg: int8(slot), Gen: s.Pods[slot].Gen, Node: int8(ni)})
		}
	}
	return ops, bad
}

// handDrained: node i has registered workers, a person drained one, and
// none takes actors any more.
func handDrained(s *aState, i int) bool {
	hand, serving := false, false
	for _, p := range s.Pods {
		if p.Reg && int(p.Node) == i {
			hand = hand || p.Drain && p.Hand
			serving = serving || !p.Drain
		}
	}
	return hand && !serving
}

func versionIndex(v string) uint8 {
	if v == newPin {
		return 1
	}
	return 0
}

// record is the model's reading of nodeBuilder.record: one node patch that
// marks the node (AnnVerifyPending too when it is at the target already: a
// take-back) and adds the residents f shows to AnnResidents.
func (m *aModel) record(f nodeFacts, ni int, planned map[string]bool, ops []mOp, bad string) ([]mOp, string) {
	v, grow := f.toRecord()
	if !grow {
		return ops, bad
	}
	if !planned["node/"+f.node.Name+" annotate"] {
		bad = "record on " + f.node.Name + " is not in the plan"
	}
	var mask uint8
	for _, r := range strings.Split(v, ",") {
		if _, name, ok := strings.Cut(r, "/"); ok {
			mask |= 1 << actorIndex(name)
		}
	}
	return append(ops, mOp{Kind: opMark, Arg: int8(ni), Gen: mask, Node: int8(ni), V: versionIndex(f.cfg.To), Flag: f.flipped()}), bad
}

// call makes the first pending API call; ok is false when it cannot run
// yet (a confirmation waiting for a suspend to finish).
func (m *aModel) call(s aState) (modelcheck.Move[aState], bool) {
	n := s.clone()
	op := n.Ops[0]
	n.Ops = n.Ops[1:]
	var name string
	switch op.Kind {
	case opDrain:
		name = "DrainWorker " + podName(int(op.Arg), op.Gen)
		if p := &n.Pods[op.Arg]; p.Gen == op.Gen && p.Reg {
			p.Drain = true
		}
	case opSuspend:
		name = "SuspendActor " + actorName(int(op.Arg))
		if a := &n.Actors[op.Arg]; a.St == mRunning || a.St == mPaused {
			a.St = mSuspending
		}
	case opConfirm:
		a := n.Actors[op.Arg]
		switch {
		case a.St == mCrashed:
			n.Ops = nil // the next round finds it crashed: blocked
			name = "GetActor " + actorName(int(op.Arg)) + ": CRASHED, blocked"
		case a.St == mSuspended || !onNode(&n, a, int(op.Node)):
			name = "GetActor " + actorName(int(op.Arg)) + ": confirmed off the node"
		case a.St == mSuspending:
			return modelcheck.Move[aState]{}, false
		default:
			// Awake again on the node: emptyNode goes round once more,
			// which is the next observation.
			n.Ops = nil
			name = "GetActor " + actorName(int(op.Arg)) + ": " + string(actorStateName[a.St]) + " again, next round"
		}
	case opFlip:
		// One patch at the version of the second look: the label, our
		// cordon lifted, the moving mark removed; no flip without the cordon.
		nd := &n.Nodes[op.Arg]
		if !nd.Cordon {
			name = "label " + nodeName(int(op.Arg)) + ": refused, the cordon was lifted"
			break
		}
		name = fmt.Sprintf("label %s %s=%s, uncordon, unmark, mark unverified", nodeName(int(op.Arg)), fleet.VersionLabel, versions[op.V])
		nd.Label, nd.Cordon, nd.Moving, nd.Seen, nd.Verify = op.V, false, 0, 0, op.V+1
	case opMark:
		name = fmt.Sprintf("annotate %s %s=%s, residents %03b", nodeName(int(op.Arg)), fleet.AnnMovingTo, versions[op.V], op.Gen)
		nd := &n.Nodes[op.Arg]
		nd.Moving = op.V + 1
		nd.Seen |= op.Gen
		if op.Flag {
			name += ", " + fleet.AnnVerifyPending + "=" + versions[op.V]
			nd.Verify = op.V + 1
		}
	case opCordon:
		name = "cordon " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Cordon = true
	case opUncordon:
		name = "uncordon " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Cordon = false
	case opUnmark:
		name = "remove " + fleet.AnnMovingTo + " from " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Moving, n.Nodes[op.Arg].Seen = 0, 0
	case opVerified:
		name = "remove " + fleet.AnnVerifyPending + " from " + nodeName(int(op.Arg))
		n.Nodes[op.Arg].Verify = 0
	case opRecheck:
		name = m.recheck(&n, op)
	case opDeleteUnregistered:
		name = "GetWorker " + podName(int(op.Arg), op.Gen)
		p := &n.Pods[op.Arg]
		hosts := false
		for _, a := range n.Actors {
			hosts = hosts || int(a.Worker) == int(op.Arg) && a.St != mSuspended
		}
		switch {
		case p.Gen != op.Gen:
			name += ": gone already"
		case p.Reg && hosts:
			p.Drain = true
			name += ": registered meanwhile and hosts an actor, drained and kept (blocked)"
			n.Ops = nil
		default:
			if p.Reg {
				p.Drain = true
				name += ": registered meanwhile, drained"
			}
			name += "; delete pod " + podName(int(op.Arg), op.Gen)
			if p.Node >= 0 && n.Nodes[p.Node].Label == slotPin(int(op.Arg)) && !n.Nodes[p.Node].Cordon && n.Bad == "" {
				n.Bad = fmt.Sprintf("pod %s deleted while %s still carries %s, uncordoned", podName(int(op.Arg), op.Gen),
					nodeName(int(p.Node)), versions[n.Nodes[p.Node].Label])
			}
			*p = mPod{Gen: p.Gen ^ 1, Node: -1, Stuck: p.Stuck}
		}
	case opDelete:
		name = "delete pod " + podName(int(op.Arg), op.Gen)
		if op.Flag {
			name += " (declared: replaced in place)"
		}
		p := &n.Pods[op.Arg]
		if p.Gen != op.Gen {
			name += " (gone already)"
			break
		}
		if p.Node >= 0 && n.Nodes[p.Node].Label == slotPin(int(op.Arg)) && !op.Flag && n.Bad == "" {
			n.Bad = fmt.Sprintf("pod %s deleted while %s still carries %s", podName(int(op.Arg), op.Gen),
				nodeName(int(p.Node)), versions[n.Nodes[p.Node].Label])
		}
		for i := range n.Actors {
			if a := &n.Actors[i]; int(a.Worker) == int(op.Arg) && a.St != mSuspended {
				a.St = mCrashed // its pod is gone with it
			}
		}
		*p = mPod{Gen: p.Gen ^ 1, Node: -1, Stuck: p.Stuck}
	}
	if len(n.Ops) == 0 {
		n.CLI, n.Ops = cliIdle, nil
	}
	return modelcheck.Move[aState]{Name: "cli: " + name, Next: n}, true
}

// recheck is flipNode's second look: a fresh observation (its lists may
// miss an item too), the flip's guards on it and confirmGone; the patch is
// dropped (the uncordon stays) unless both agree.
func (m *aModel) recheck(n *aState, op mOp) string {
	c := m.cluster(n)
	sd, err := RollSides(c)
	if op.V == 0 {
		sd, err = RollbackSides(c)
	}
	if err != nil {
		panic(err)
	}
	f := m.facts(n, &Config{Sides: sd}, int(op.Arg), m.inventory(n, true))
	n.MissPod, n.MissActor = -1, -1
	name := "second look at " + nodeName(int(op.Arg))
	// The step's own guards (a seeded bug drops one from both looks).
	var b []string
	for _, st := range m.rb.Steps {
		if st.ID != "ate.node.flip" {
			continue
		}
		for _, g := range st.Guards {
			if ok, why := g.Check(f); !ok {
				b = append(b, why)
			}
		}
	}
	// confirmGone: GetActor for each recorded resident.
	for i, a := range n.Actors {
		if n.Nodes[op.Arg].Seen&(1<<i) != 0 && a.St != mSuspended && onNode(n, a, int(op.Arg)) {
			b = append(b, actorName(i)+" read directly on the node")
		}
	}
	if len(b) > 0 || f.flipped() {
		name += ": not flipped (" + strings.Join(b, "; ") + ")"
		n.Ops = n.Ops[1:] // the patch; the uncordon stays
	}
	return name
}
