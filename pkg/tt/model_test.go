package tt

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/internal/modelcheck"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// The tt kmd and firmware runbooks, model-checked. The model is a few
// Tenstorrent nodes, each with a telemetry DaemonSet pod behind a deploy
// gate, a workload (a Deployment's pod requesting a tenstorrent.com device)
// that the scheduler puts on any schedulable node, rollbook's probe and
// task helper pods, and someone else who may cordon a node.
//
// The CLI is the engine: targets started in order up to the parallel
// limit, and for each one an observation that builds Facts the way the
// observer does (the node's labels and annotations, its pods, the helper
// pods and their termination messages, the cordons on other nodes), the
// first step whose real Done is false, its real Guards, then the calls its
// Act makes (the model's reading, one call per move, interleaved with the
// environment and with the other targets). A kill drops the run; a re-run
// is a new run ID, so every node is measured again.
//
// The rules: no helper swaps the module or flashes while a process holds
// the device; never more nodes cordoned by rollbook than the limit; a
// cordon someone else set is never taken over or lifted; a run that ends
// done leaves no cordon of its own.

const (
	cordonNone uint8 = iota
	cordonOurs
	cordonForeign
)

const (
	podNone uint8 = iota
	podPending
	podSucceeded
	podFailed
)

const (
	recNone uint8 = iota
	recOldRun
	recThisRun
)

type tNode struct {
	Cordon      uint8
	GateClosed  bool
	Prior       bool  // the gates' prior values are recorded
	PriorClosed bool  // … and the recorded value was "false"
	Loaded      uint8 // what the host runs: 0 old, 1 target (module or firmware)
	Label       uint8 // 0 absent, 1 old, 2 target
	Rec         uint8 // the task's result annotation
	Probe       uint8 // the probe annotation
	ProbeVal    uint8 // what that probe measured
	ProbePod    uint8
	ProbePodVal uint8 // what the probe pod measured
	Helper      uint8
	HelperRun   bool // the helper was made by the run in progress
	DS          bool // the telemetry DaemonSet pod runs (it holds the device)
	Host        bool // a host process holds the device (outside Kubernetes)
}

type tOp struct {
	Kind string
}

const (
	xNone    uint8 = iota
	xWaiting       // counted as waiting, until another target ends
	xWoken         // another target ended; still counted until it runs
	// Between a failing observation inside the exclusion and the wait
	// (exclusion.waitForAnEnd), still holding the exclusion; an end in that
	// gap counts.
	xDeciding
	xDecidingEnded
)

const (
	tgNotStarted uint8 = iota
	tgInProgress
	tgDone
	tgStopped
	tgSkipped
)

type tState struct {
	Nodes [3]tNode
	Work  int8 // node of the workload pod holding the device, -1 Pending
	// The run in progress.
	Active  bool
	Targets uint8 // bit per node
	Prog    [3]uint8
	Ops     [3][]tOp
	Halted  bool
	Ended   uint8 // the last run: 0 none, 1 done, 2 stopped, 3 killed
	// The run's exclusion (runbook.Step.Exclusive): 1+ the target whose
	// Exclusive step is deciding or acting (0 none), and that step's index.
	Excl, ExclStep uint8
	XWait          [3]uint8 // xWaiting / xWoken: a failing Exclusive guard waits for another target to end
	Held           uint8    // bit per target that stopped out of service: it keeps its parallel slot
	// Budgets.
	Runs, Kills, Foreign int8
	Bad                  string
}

func (s tState) clone() tState {
	for i := range s.Ops {
		s.Ops[i] = append([]tOp(nil), s.Ops[i]...)
	}
	return s
}

type tModel struct {
	kind     string // "kmd" or "firmware"
	nodes    int
	rb       *runbook.Runbook[Facts]
	parallel int
	prefetch int  // Options.Prefetch: more targets that may start while Parallel are in progress
	keep     bool // KeepGoing
	limit    int  // nodes out of service allowed
	subsets  bool // runs over one node too (kubectl tt upgrade … NODE)
	fails    bool // a helper may fail
	target   string
	old      string
	finished func(n *corev1.Node) bool
	countOut bool
	// cordonAfterHalt seeds the bug the engine had: a prefetched target
	// decided its cordon as if the run had not halted.
	cordonAfterHalt bool
	// The helper and probe pods the runbook creates on a node.
	helperSpec, probeSpec func(node string) kube.HelperSpec
	// shared is the module the run vouched for the nodes' kernel (kmd):
	// the build step is the voucher's, not modelled here.
	shared *SharedModule
}

const (
	runThis  = "run-this"
	runOld   = "run-old"
	helperNS = "tt-system"
	kmdOld   = "2.0.0"
	kmdNew   = "2.1.0"
	fwNew    = "19.1.0"
	fwOld    = "19.0.0.0"
)

func tNodeName(i int) string { return "n" + strconv.Itoa(i+1) }

func runOf(r uint8) string {
	if r == recThisRun {
		return runThis
	}
	return runOld
}

func (m *tModel) value(v uint8) string {
	if v == 1 {
		return m.target
	}
	return m.old
}

func (m *tModel) node(s *tState, i int) *corev1.Node {
	nd := s.Nodes[i]
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tNodeName(i), Labels: map[string]string{LabelPCIPresent: "true"},
		Annotations: map[string]string{}}}
	n.Labels[DefaultDeployGate] = strconv.FormatBool(!nd.GateClosed)
	if nd.Prior {
		b, _ := json.Marshal(map[string]string{DefaultDeployGate: strconv.FormatBool(!nd.PriorClosed)})
		n.Annotations[AnnGatesPrior] = string(b)
	}
	switch nd.Cordon {
	case cordonOurs:
		n.Spec.Unschedulable = true
		n.Annotations[kube.AnnCordonedBy] = m.rb.Name
		n.Annotations[kube.AnnCordonRun] = runThis
	case cordonForeign:
		n.Spec.Unschedulable = true
	}
	label := LabelKMDVersion
	if m.kind == "firmware" {
		label = LabelFirmware
	}
	if nd.Label > 0 {
		n.Labels[label] = m.value(nd.Label - 1)
	}
	if nd.Rec != recNone {
		var b []byte
		if m.kind == "kmd" {
			b, _ = json.Marshal(kmdRecord{After: m.target, Run: runOf(nd.Rec)})
		} else {
			b, _ = json.Marshal(firmwareRecord{Readback: m.target, Run: runOf(nd.Rec)})
		}
		key := AnnKMDResult
		if m.kind == "firmware" {
			key = AnnFirmwareResult
		}
		n.Annotations[key] = string(b)
	}
	if nd.Probe != recNone {
		r := ProbeRecord{Run: runOf(nd.Probe), Kernel: "6.8", KMD: kmdNew, Headers: true, Toolchain: true, Cached: true}
		if m.kind == "kmd" {
			r.KMD = m.value(nd.ProbeVal)
		} else {
			r.Firmware = []string{m.value(nd.ProbeVal)}
		}
		if nd.Host {
			r.Holders = []nodeagent.Holder{{PID: 4242, Comm: "tt-metal"}}
		}
		b, _ := json.Marshal(r)
		n.Annotations[AnnProbe] = string(b)
	}
	return n
}

// mHelperPod is the helper spec renders, in phase st, whose termination
// message is result.
func mHelperPod(spec kube.HelperSpec, st uint8, result *nodeagent.Result) *corev1.Pod {
	p := spec.Pod()
	p.UID = types.UID(p.Name)
	p.Status.Phase = corev1.PodPending
	if st == podPending {
		return p
	}
	p.Status.Phase = corev1.PodSucceeded
	if st == podFailed {
		p.Status.Phase = corev1.PodFailed
	}
	b, _ := json.Marshal(result)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(b)}}}}
	return p
}

// facts is what observer.observe reads for node i.
func (m *tModel) facts(s *tState, i int) Facts {
	nd := s.Nodes[i]
	n := m.node(s, i)
	f := Facts{Owner: m.rb.Name, Node: n, Measured: probeRecordOf(n), Finished: m.finished(n)}
	if m.shared != nil && f.Measured != nil && !f.Finished {
		f.Shared = m.shared
	}
	if nd.Helper != podNone {
		r := &nodeagent.Result{Op: nodeagent.OpKMD, Success: nd.Helper == podSucceeded, Changed: true, Target: m.target, Before: m.old,
			After: m.target}
		if nd.Helper == podFailed {
			r.After = m.old
			r.Error = &nodeagent.Failure{Reason: "Failed", Message: "the helper failed"}
		}
		if m.kind == "firmware" {
			r.Op, r.After = nodeagent.OpFlash, ""
			r.Devices = []nodeagent.Device{{Index: 0, Before: m.old, After: m.target, OK: nd.Helper == podSucceeded}}
		}
		f.Helper = helperOf(mHelperPod(m.helperSpec(tNodeName(i)), nd.Helper, r))
	}
	if nd.ProbePod != podNone {
		r := &nodeagent.Result{Op: nodeagent.OpProbe, Success: true, Kernel: "6.8", Before: kmdNew,
			Probe: &nodeagent.ProbeFacts{Headers: true, Toolchain: true, Cached: true}}
		if m.kind == "kmd" {
			r.Before = m.value(nd.ProbePodVal)
		} else {
			r.Devices = []nodeagent.Device{{Index: 0, Before: m.value(nd.ProbePodVal)}}
		}
		f.Probe = helperOf(mHelperPod(m.probeSpec(tNodeName(i)), nd.ProbePod, r))
	}
	if m.countOut && !f.ourCordon() && !f.Finished {
		for j := 0; j < m.nodes; j++ {
			if j != i && s.Nodes[j].Cordon == cordonOurs {
				f.OthersOut++
			}
		}
	}
	if f.ourCordon() && !f.Finished {
		f.Pods = m.pods(s, i)
	}
	return f
}

func (m *tModel) pods(s *tState, i int) []corev1.Pod {
	var out []corev1.Pod
	ctl := true
	if s.Nodes[i].DS {
		out = append(out, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tt", Name: "telemetry-" + tNodeName(i),
			UID:             types.UID("telemetry-" + tNodeName(i)),
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "telemetry", Controller: &ctl}}},
			Spec: corev1.PodSpec{NodeName: tNodeName(i), Volumes: []corev1.Volume{{Name: "dev",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: DevicePathPrefix}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	if int(s.Work) == i {
		out = append(out, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "inference", UID: "inference",
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "inference", Controller: &ctl}}},
			Spec: corev1.PodSpec{NodeName: tNodeName(i), Containers: []corev1.Container{{Name: "c",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"tenstorrent.com/n150": resource.MustParse("1")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	if s.Nodes[i].Helper == podPending {
		out = append(out, *mHelperPod(m.helperSpec(tNodeName(i)), podPending, nil))
	}
	return out
}

// observe is one observation of target i in the run: the first step not
// done (-1: none), then the calls its Act makes, or how the target ends
// ("" with no calls: waiting); a failing guard ends it blocked (budget: the
// guard spends a budget shared by the run's targets).
func (m *tModel) observe(s *tState, i int) (idx int, ops []tOp, end uint8, why string, budget bool) {
	f := m.facts(s, i)
	pos := runbook.Locate(m.rb, f)
	if pos.Stage != runbook.StageDone {
		idx, st := pos.Step, m.rb.Steps[pos.Step]
		if pos.Guard != "" {
			return idx, nil, tgStopped, "blocked: " + pos.Guard, pos.SharedBudget
		}
		ops := m.effect(s, i, st.ID, f)
		if len(ops) > 0 && (st.Plan == nil || len(st.Plan(f)) == 0) {
			return idx, ops, 0, "calls with no plan", false // --dry-run would hide them
		}
		return idx, ops, 0, "", false
	}
	return -1, nil, tgDone, "done", false
}

// effect is the model's reading of a step's Act as the calls it makes.
func (m *tModel) effect(s *tState, i int, id string, f Facts) []tOp {
	nd := s.Nodes[i]
	op := func(kinds ...string) []tOp {
		var out []tOp
		for _, k := range kinds {
			out = append(out, tOp{Kind: k})
		}
		return out
	}
	switch {
	case strings.HasSuffix(id, ".probe"):
		switch {
		case f.Probe.finished() && f.Probe.ok():
			return op("record the probe", "delete the probe pod")
		case f.Probe.finished():
			return op("delete the probe pod", "create the probe pod")
		case f.Probe.Pod == nil:
			return op("create the probe pod")
		}
	case strings.HasSuffix(id, ".cordon"):
		return op("cordon")
	case strings.HasSuffix(id, ".close-gates"):
		return op("close the gates")
	case strings.HasSuffix(id, ".evict-device-pods"):
		var out []tOp
		for _, h := range f.deviceHolders() {
			if daemonSetOf(&h.Pod) == "" { // a drain never evicts DaemonSet pods; the gate moves them
				out = append(out, tOp{Kind: "evict " + h.Pod.Name})
			}
		}
		return out
	case id == "tt.kmd.install" || id == "tt.fw.flash":
		var out []tOp
		if f.Helper.finished() {
			out = op("delete the helper")
		}
		if m.kind == "kmd" {
			out = append(out, tOp{Kind: "remove the version label"})
		}
		if nd.Helper == podNone || f.Helper.finished() {
			return append(out, tOp{Kind: "create the helper"})
		}
	case id == "tt.kmd.label":
		if f.Helper.reached(m.target) {
			return op("record the result")
		}
		return op("label the version")
	case id == "tt.fw.record":
		return op("record the result")
	case strings.HasSuffix(id, ".open-gates"):
		return op("open the gates")
	case strings.HasSuffix(id, ".uncordon"):
		return op("uncordon")
	case strings.HasSuffix(id, ".cleanup"):
		return op("delete the helper")
	}
	return nil
}

// call makes target i's next call.
func (m *tModel) call(s *tState, i int) string {
	op := s.Ops[i][0]
	s.Ops[i] = s.Ops[i][1:]
	nd := &s.Nodes[i]
	switch op.Kind {
	case "create the probe pod":
		nd.ProbePod = podPending
	case "delete the probe pod":
		nd.ProbePod = podNone
	case "record the probe":
		nd.Probe, nd.ProbeVal = recThisRun, nd.ProbePodVal
	case "cordon":
		if nd.Cordon == cordonNone { // CordonNode never claims a cordon it finds
			nd.Cordon = cordonOurs
		}
	case "close the gates":
		if !nd.Prior {
			nd.Prior, nd.PriorClosed = true, nd.GateClosed
		}
		nd.GateClosed = true
	case "evict inference":
		if int(s.Work) == i {
			s.Work = -1
		}
	case "remove the version label":
		nd.Label = 0
	case "create the helper":
		nd.Helper, nd.HelperRun = podPending, true
	case "delete the helper":
		nd.Helper, nd.HelperRun = podNone, false
	case "label the version":
		nd.Label = 2
	case "record the result":
		nd.Label, nd.Rec = 2, recThisRun
	case "open the gates":
		if nd.Prior {
			nd.GateClosed, nd.Prior = nd.PriorClosed, false
		}
	case "uncordon":
		if nd.Cordon == cordonForeign && s.Bad == "" {
			s.Bad = "lifted a cordon someone else set on " + tNodeName(i)
		}
		if nd.Cordon == cordonOurs {
			nd.Cordon = cordonNone
		}
	default:
		panic("unknown call " + op.Kind)
	}
	return op.Kind
}

func (m *tModel) holders(s *tState, i int) []string {
	var out []string
	if s.Nodes[i].DS {
		out = append(out, "the telemetry pod")
	}
	if int(s.Work) == i {
		out = append(out, "the inference pod")
	}
	if s.Nodes[i].Host {
		out = append(out, "a host process")
	}
	return out
}

func (m *tModel) endRun(s *tState) {
	s.Active = false
	s.Ended = 1
	for i := 0; i < m.nodes; i++ {
		if s.Targets&(1<<i) != 0 && s.Prog[i] != tgDone {
			s.Ended = 2
		}
	}
	m.resetRun(s)
}

func (m *tModel) moves(s tState) []modelcheck.Move[tState] {
	var out []modelcheck.Move[tState]
	add := func(name string, n tState) { out = append(out, modelcheck.Move[tState]{Name: name, Next: n}) }
	if !s.Active && s.Runs != 0 { // negative: any number of runs
		sets := []uint8{1<<m.nodes - 1}
		if m.subsets {
			for i := 0; i < m.nodes; i++ {
				sets = append(sets, 1<<i)
			}
		}
		for _, set := range sets {
			n := s.clone()
			if n.Runs > 0 {
				n.Runs--
			}
			n.Active, n.Targets, n.Halted, n.Prog, n.Ended = true, set, false, [3]uint8{}, 0
			for i := range n.Nodes {
				nd := &n.Nodes[i]
				nd.HelperRun = false
				if nd.Rec == recThisRun {
					nd.Rec = recOldRun
				}
				if nd.Probe == recThisRun {
					nd.Probe = recOldRun
				}
				if nd.ProbePod != podNone { // named after the old run: not this run's probe
					nd.ProbePod = podNone
				}
			}
			var names []string
			for i := 0; i < m.nodes; i++ {
				if set&(1<<i) != 0 {
					names = append(names, tNodeName(i))
				}
			}
			add(fmt.Sprintf("cli: kubectl tt upgrade %s (%s), a new run", m.kind, strings.Join(names, ",")), n)
		}
	}
	if s.Active {
		m.engine(s, add)
	}
	// The environment.
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		name := tNodeName(i)
		if nd.ProbePod == podPending {
			n := s.clone()
			n.Nodes[i].ProbePod, n.Nodes[i].ProbePodVal = podSucceeded, nd.Loaded
			add("env: the probe on "+name+" finishes", n)
		}
		if nd.Helper == podPending {
			n := s.clone()
			if h := m.holders(&s, i); len(h) > 0 && n.Bad == "" {
				verb := "rmmod"
				if m.kind == "firmware" {
					verb = "flash"
				}
				n.Bad = fmt.Sprintf("%s on %s while %s holds the device", verb, name, strings.Join(h, " and "))
			}
			n.Nodes[i].Helper, n.Nodes[i].Loaded = podSucceeded, 1
			add("env: the helper on "+name+" runs and succeeds", n)
			if m.fails {
				n := s.clone()
				n.Nodes[i].Helper = podFailed
				add("env: the helper on "+name+" fails", n)
			}
		}
		if nd.DS == nd.GateClosed {
			n := s.clone()
			n.Nodes[i].DS = !nd.GateClosed
			add(fmt.Sprintf("env: the telemetry DaemonSet pod on %s %s", name, map[bool]string{true: "starts", false: "leaves"}[!nd.GateClosed]),
				n)
		}
		if s.Work < 0 && nd.Cordon == cordonNone {
			n := s.clone()
			n.Work = int8(i)
			add("env: the inference pod is scheduled on "+name, n)
		}
		if nd.Cordon == cordonNone && s.Foreign > 0 {
			n := s.clone()
			n.Foreign--
			n.Nodes[i].Cordon = cordonForeign
			add("env: someone else cordons "+name, n)
		}
		if nd.Cordon == cordonForeign {
			n := s.clone()
			n.Nodes[i].Cordon = cordonNone
			add("env: someone else uncordons "+name, n)
		}
	}
	return out
}

// engine is runbook.Run's scheduling: targets start in order while fewer
// than Parallel+Prefetch slots are in use (a target in progress, or one that
// stopped out of service: Runbook.OutOfService keeps its slot); once stopped
// targets hold every slot, or a stopped target halts the run (unless
// KeepGoing), the rest are skipped; the run ends when none is in progress.
// Exclusive steps (runbook.Step.Exclusive) take the run's exclusion: their
// observation, guards and calls run one target at a time, and a failing
// guard waits for another target to end while one in progress is not
// waiting itself, and blocks otherwise (exclusion.waitForAnEnd).
func (m *tModel) engine(s tState, add func(string, tState)) {
	inProgress, held := 0, 0
	for i := 0; i < m.nodes; i++ {
		if s.Prog[i] == tgInProgress {
			inProgress++
		}
		if s.Held&(1<<i) != 0 {
			held++
		}
	}
	next := -1
	for i := 0; i < m.nodes; i++ {
		if s.Targets&(1<<i) != 0 && s.Prog[i] == tgNotStarted {
			next = i
			break
		}
	}
	if next >= 0 && (s.Halted || held >= m.parallel) {
		n := s.clone()
		for i := next; i < m.nodes; i++ {
			if n.Targets&(1<<i) != 0 && n.Prog[i] == tgNotStarted {
				n.Prog[i] = tgSkipped
			}
		}
		why := "the run halted"
		if !s.Halted {
			why = "the nodes that stopped are still out of service: the parallel limit is reached"
		}
		add("cli: "+why+"; the other nodes are skipped", n)
		return
	}
	if next >= 0 && inProgress+held < m.parallel+m.prefetch {
		n := s.clone()
		n.Prog[next] = tgInProgress
		add("cli: start "+tNodeName(next), n)
	}
	if next < 0 && inProgress == 0 {
		n := s.clone()
		m.endRun(&n)
		add(fmt.Sprintf("cli: the run ends %s", map[uint8]string{1: "done", 2: "not done (said so)"}[n.Ended]), n)
		return
	}
	for i := 0; i < m.nodes; i++ {
		if s.Prog[i] != tgInProgress {
			continue
		}
		name := tNodeName(i)
		switch {
		case len(s.Ops[i]) > 0:
			n := s.clone()
			msg := "cli: " + name + ": " + m.call(&n, i)
			if len(n.Ops[i]) == 0 && n.Excl == uint8(i+1) {
				// The Exclusive step's act re-observes and verifies inside the
				// exclusion, then leaves it.
				st := m.rb.Steps[n.ExclStep]
				n.Excl, n.ExclStep = 0, 0
				if done, ev := st.Done(m.facts(&n, i)); !done {
					msg += fmt.Sprintf("; %s failed: acted, but the result is not visible (%s)", st.ID, ev)
					m.stop(&n, i)
				}
			}
			add(msg, n)
			continue
		case s.Halted && s.XWait[i] != xNone && !m.cordonAfterHalt:
			// The halt wakes a target waiting for the budget; not out of
			// service, it is taken out by no halted run (runbook.errHalted).
			n := s.clone()
			if n.Excl == uint8(i+1) {
				n.Excl, n.ExclStep = 0, 0
			}
			n.XWait[i], n.Prog[i] = xNone, tgSkipped
			m.ended(&n)
			add("cli: "+name+": the run halted while it waited for the budget; skipped", n)
			continue
		case s.XWait[i] == xWaiting:
			continue // until another target ends
		case s.XWait[i] == xWoken:
			n := s.clone()
			n.XWait[i] = xNone
			add("cli: "+name+": another target ended; it waits for the exclusion to observe again", n)
			continue
		case s.XWait[i] == xDeciding || s.XWait[i] == xDecidingEnded:
			n := s.clone()
			n.XWait[i] = xNone
			st := m.rb.Steps[s.ExclStep].ID
			switch {
			case s.XWait[i] == xDecidingEnded: // keeps the exclusion
				add(fmt.Sprintf("cli: %s: %s: a target ended since its observation; it observes again", name, st), n)
			case m.othersRunning(&s, i):
				n.XWait[i], n.Excl, n.ExclStep = xWaiting, 0, 0
				add(fmt.Sprintf("cli: %s: %s waits for another target to end", name, st), n)
			default:
				n.Excl, n.ExclStep = 0, 0
				m.stop(&n, i)
				add(fmt.Sprintf("cli: %s: %s blocked: no other target of the run can end", name, st), n)
			}
			continue
		}
		idx, ops, end, why, budget := m.observe(&s, i)
		step := ""
		exclusive := idx >= 0 && m.rb.Steps[idx].Exclusive
		if idx >= 0 {
			step = m.rb.Steps[idx].ID
		}
		if exclusive && s.Excl != 0 && s.Excl != uint8(i+1) {
			continue // another target's Exclusive step is deciding or acting
		}
		nd := s.Nodes[i]
		if (step == "tt.kmd.install" || step == "tt.fw.flash") && nd.Helper == podFailed && nd.HelperRun {
			// The step's Wait saw its own helper fail: the target fails.
			end, why, ops = tgStopped, "failed: the helper failed", nil
		}
		halted := exclusive && s.Halted && !m.rb.OutOfService(m.facts(&s, i))
		switch {
		case halted && !m.cordonAfterHalt:
			n := s.clone()
			n.Prog[i] = tgSkipped
			m.ended(&n)
			add(fmt.Sprintf("cli: %s: %s: the run halted; skipped", name, step), n)
		case exclusive && end == tgStopped && budget: // only a spent shared budget waits (runbook.Guard.SharedBudget)
			n := s.clone()
			n.Excl, n.ExclStep, n.XWait[i] = uint8(i+1), uint8(idx), xDeciding
			add(fmt.Sprintf("cli: %s: %s %s (inside the exclusion)", name, step, why), n)
		case end == tgStopped:
			n := s.clone()
			m.stop(&n, i)
			add(fmt.Sprintf("cli: %s: %s %s", name, step, why), n)
		case end == tgDone:
			n := s.clone()
			n.Prog[i] = tgDone
			if n.Excl == uint8(i+1) {
				n.Excl, n.ExclStep = 0, 0
			}
			m.ended(&n)
			add(fmt.Sprintf("cli: %s: %s", name, why), n)
		case len(ops) > 0:
			n := s.clone()
			n.Ops[i] = ops
			if exclusive {
				n.Excl, n.ExclStep = uint8(i+1), uint8(idx)
			}
			if why != "" && n.Bad == "" {
				n.Bad = fmt.Sprintf("%s on %s: %s", step, name, why)
			}
			if halted && n.Bad == "" {
				n.Bad = fmt.Sprintf("%s on %s: acts after the run halted", step, name)
			}
			add(fmt.Sprintf("cli: %s: %s (%d call(s))", name, step, len(ops)), n)
		}
	}
	if s.Kills > 0 {
		n := s.clone()
		n.Kills--
		n.Active, n.Ended = false, 3
		m.resetRun(&n)
		add("cli: killed", n)
	}
}

// othersRunning reports whether a target of the run other than i is in
// progress and not counted as waiting: one that may still end.
func (m *tModel) othersRunning(s *tState, i int) bool {
	for j := 0; j < m.nodes; j++ {
		if j != i && s.Prog[j] == tgInProgress && s.XWait[j] != xWaiting && s.XWait[j] != xWoken {
			return true
		}
	}
	return false
}

// stop ends target i blocked or failed: it keeps its slot while out of
// service, halts the run unless KeepGoing, and wakes the waiters.
func (m *tModel) stop(n *tState, i int) {
	n.Prog[i] = tgStopped
	if n.Excl == uint8(i+1) {
		n.Excl, n.ExclStep = 0, 0
	}
	if m.rb.OutOfService != nil && m.rb.OutOfService(m.facts(n, i)) {
		n.Held |= 1 << i
	}
	if !m.keep {
		n.Halted = true
	}
	m.ended(n)
}

// ended wakes the targets waiting for another to end.
func (m *tModel) ended(n *tState) {
	for j := range n.XWait {
		switch n.XWait[j] {
		case xWaiting:
			n.XWait[j] = xWoken
		case xDeciding:
			n.XWait[j] = xDecidingEnded
		}
	}
}

// resetRun drops what lives only as long as a run: its pending calls,
// exclusion and slots.
func (m *tModel) resetRun(n *tState) {
	for i := range n.Ops {
		n.Ops[i] = nil
	}
	n.Excl, n.ExclStep, n.XWait, n.Held = 0, 0, [3]uint8{}, 0
}

const ruleActs = "never rmmod or flash under a holder; never lift a cordon someone else set; every call planned; " +
	"no cordon after the run halted"

func (m *tModel) invariants() []modelcheck.Invariant[tState] {
	return []modelcheck.Invariant[tState]{
		{Name: ruleActs, Check: func(s tState) string { return s.Bad }},
		{Name: fmt.Sprintf("at most %d node(s) out of service", m.limit), Check: func(s tState) string {
			var out []string
			for i := 0; i < m.nodes; i++ {
				if s.Nodes[i].Cordon == cordonOurs {
					out = append(out, tNodeName(i))
				}
			}
			if len(out) > m.limit {
				return "cordoned by rollbook: " + strings.Join(out, ", ")
			}
			return ""
		}},
		{Name: "a run that ends done leaves none of its nodes cordoned", Check: func(s tState) string {
			if s.Active || s.Ended != 1 {
				return ""
			}
			for i := 0; i < m.nodes; i++ {
				if s.Targets&(1<<i) != 0 && s.Nodes[i].Cordon == cordonOurs {
					return tNodeName(i) + " is still cordoned by rollbook"
				}
			}
			return ""
		}},
	}
}

func (m *tModel) done(s tState) bool {
	if s.Active || s.Ended != 1 || s.Targets != 1<<m.nodes-1 {
		return false
	}
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		if nd.Cordon == cordonOurs || nd.Loaded != 1 || nd.Label != 2 || nd.GateClosed || nd.Prior || nd.Helper != podNone {
			return false
		}
	}
	return true
}

func tKey(s tState) string {
	var b strings.Builder
	for _, nd := range s.Nodes {
		fmt.Fprintf(&b, "%d%v%v%v%d%d%d%d%d%d%d%d%v%v%v.", nd.Cordon, nd.GateClosed, nd.Prior, nd.PriorClosed, nd.Loaded, nd.Label,
			nd.Rec, nd.Probe, nd.ProbeVal, nd.ProbePod, nd.ProbePodVal, nd.Helper, nd.HelperRun, nd.DS, nd.Host)
	}
	fmt.Fprintf(&b, "%d%v%d%v%v%d%d%d%d%d.%d%v%d|%s", s.Work, s.Active, s.Targets, s.Prog, s.Halted, s.Ended, s.Runs, s.Kills, s.Foreign,
		s.Excl, s.ExclStep, s.XWait, s.Held, s.Bad)
	for _, ops := range s.Ops {
		b.WriteString("|")
		for _, o := range ops {
			b.WriteString(o.Kind + ",")
		}
	}
	return b.String()
}

func (m *tModel) describe(s tState) string {
	var b strings.Builder
	for i := 0; i < m.nodes; i++ {
		nd := s.Nodes[i]
		fmt.Fprintf(&b, "  %s: cordon %s, gate closed %v, host runs %s, label %d, helper %d, telemetry pod %v, host holder %v\n",
			tNodeName(i), []string{"none", "rollbook", "someone else"}[nd.Cordon], nd.GateClosed, m.value(nd.Loaded), nd.Label, nd.Helper,
			nd.DS, nd.Host)
	}
	work := "Pending"
	if s.Work >= 0 {
		work = "on " + tNodeName(int(s.Work))
	}
	fmt.Fprintf(&b, "  inference pod %s; run active %v, targets (0 not started, 1 in progress, 2 done, 3 stopped, 4 skipped) %v", work,
		s.Active, s.Prog[:m.nodes])
	held := make([]bool, m.nodes)
	for i := range held {
		held[i] = s.Held&(1<<i) != 0
	}
	excl := "none"
	if s.Excl != 0 {
		excl = tNodeName(int(s.Excl) - 1)
	}
	fmt.Fprintf(&b, "; exclusion held by %s, waiting for an end (1 waiting, 2 woken, 3 deciding, 4 deciding after an end) %v, "+
		"stopped holding a slot %v", excl, s.XWait[:m.nodes], held)
	return b.String()
}

type tConfig struct {
	kind                 string
	nodes, parallel      int
	keep, subsets, fails bool
	runs, kills, foreign int8
	host                 int    // node index with a host process holding the device, -1 none
	left                 int    // 1+ node index an earlier run left cordoned (interrupted after its cordon), 0 none
	drop                 string // "step/guard prefix": a seeded bug, the guard dropped
	shared               string // a seeded bug: this step is not Exclusive
	afterHalt            bool   // a seeded bug: a halted run still takes prefetched targets out of service
	noDone               bool
}

func newTTModel(t *testing.T, c tConfig) modelcheck.Model[tState] {
	m := &tModel{kind: c.kind, nodes: c.nodes, parallel: c.parallel, keep: c.keep, subsets: c.subsets, fails: c.fails,
		cordonAfterHalt: c.afterHalt}
	h := HelperConfig{Image: "agent", Namespace: helperNS}
	switch c.kind {
	case "kmd":
		cfg := &KMDConfig{Version: kmdNew, Commit: strings.Repeat("c", 40), DeployGates: []string{DefaultDeployGate}, Drain: true,
			Helper: h, RunID: runThis}
		m.rb = KMDRunbook(nil, nil, cfg)
		m.shared = &SharedModule{VouchedModule: VouchedModule{ConfigMap: "tt-kmd-0123456789abcdef", SHA256: strings.Repeat("a", 64)}}
		cfg.share.vouched[group(cfg.share.key(&Facts{Measured: &ProbeRecord{Kernel: "6.8"}}))] = m.shared
		m.helperSpec = func(node string) kube.HelperSpec {
			return KMDHelperSpec(cfg, node, cfg.Commit, &m.shared.VouchedModule)
		}
		m.probeSpec = func(node string) kube.HelperSpec { return probeSpec(h, node, runThis, kmdProbeCommand(cfg)) }
		m.target, m.old, m.limit, m.countOut = kmdNew, kmdOld, 1, true
		m.finished = func(n *corev1.Node) bool { return kmdFinished(n, kmdNew, runThis) }
	case "firmware":
		cfg := &FirmwareConfig{Version: fwNew, DeployGates: []string{DefaultDeployGate}, Drain: true, MaxParallel: c.parallel, Helper: h,
			RunID: runThis}
		cfg.Complete()
		m.rb = FirmwareRunbook(nil, nil, cfg)
		m.helperSpec = func(node string) kube.HelperSpec {
			return helperSpec(h, "flash", node, cfg.helperKey(), flashCommand(cfg), cfg.ForceUnload, runThis)
		}
		m.probeSpec = func(node string) kube.HelperSpec {
			return probeSpec(h, node, runThis, agentCommand("probe"))
		}
		m.target, m.old, m.limit, m.countOut, m.finished = cfg.Readback, fwOld, c.parallel, true, cfg.fwFinished
		// As kubectl tt upgrade firmware runs it (no soak): the next batch
		// probes while this one is out; the cordon's guard bounds the nodes out.
		m.prefetch = c.parallel
	}
	if c.drop != "" {
		id, guard, _ := strings.Cut(c.drop, "/")
		found := false
		for i := range m.rb.Steps {
			if m.rb.Steps[i].ID != id {
				continue
			}
			var kept []runbook.Guard[Facts]
			for _, g := range m.rb.Steps[i].Guards {
				if strings.HasPrefix(g.Name, guard) {
					found = true
					continue
				}
				kept = append(kept, g)
			}
			m.rb.Steps[i].Guards = kept
		}
		if !found {
			t.Fatalf("no guard %q on step %s", guard, id)
		}
	}
	if c.shared != "" {
		found := false
		for i := range m.rb.Steps {
			if m.rb.Steps[i].ID == c.shared && m.rb.Steps[i].Exclusive {
				m.rb.Steps[i].Exclusive, found = false, true
			}
		}
		if !found {
			t.Fatalf("no Exclusive step %s", c.shared)
		}
	}
	init := tState{Work: 0, Runs: c.runs, Kills: c.kills, Foreign: c.foreign}
	for i := 0; i < c.nodes; i++ {
		init.Nodes[i] = tNode{Label: 1, DS: true, Host: i == c.host}
	}
	if c.left > 0 {
		init.Nodes[c.left-1].Cordon = cordonOurs
	}
	mc := modelcheck.Model[tState]{
		Init: []tState{init}, Key: tKey, Moves: m.moves, Invariants: m.invariants(), Describe: m.describe, MaxStates: 3_000_000,
	}
	if !c.noDone {
		mc.Done = m.done
	}
	return mc
}

// exploreTT explores c; each of want must name a move taken somewhere (so
// the configuration reaches the engine paths it is there for).
func exploreTT(t *testing.T, c tConfig, want ...string) modelcheck.Result {
	t.Helper()
	mc := newTTModel(t, c)
	seen := map[string]bool{}
	if len(want) > 0 {
		moves := mc.Moves
		mc.Moves = func(s tState) []modelcheck.Move[tState] {
			out := moves(s)
			for _, mv := range out {
				for _, w := range want {
					if strings.Contains(mv.Name, w) {
						seen[w] = true
					}
				}
			}
			return out
		}
	}
	res, err := modelcheck.Explore(mc)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !seen[w] && res.Violation == nil {
			t.Errorf("no move %q: the configuration misses what it is for", w)
		}
	}
	host := "none"
	if c.host >= 0 {
		host = tNodeName(c.host)
	}
	t.Logf("tt %s, %d nodes, parallel %d, keep going %v, kills %d, foreign cordons %d, helper fails %v, runs per node %v, "+
		"host holder %s, left cordoned %d, dropped guard %q, not Exclusive %q: %s", c.kind, c.nodes, c.parallel, c.keep, c.kills,
		c.foreign, c.fails, c.subsets, host, c.left, c.drop, c.shared, res)
	if os.Getenv("ROLLBOOK_MODEL_VERBOSE") != "" && res.Violation != nil {
		t.Log(res.Violation)
	}
	return res
}

// TestModelTT explores the kmd and firmware runbooks with kills, failing
// helpers, someone else's cordons, re-runs over all nodes or one node, and
// finds no broken rule.
func TestModelTT(t *testing.T) {
	const (
		waits  = "waits for another target to end"
		woken  = "another target ended"
		full   = "the parallel limit is reached"
		raced  = "the result is not visible"
		gap    = "a target ended since its observation"
		halted = "the run halted while it waited for the budget"
	)
	for _, tc := range []struct {
		name string
		c    tConfig
		want []string
		tier modelcheck.Tier
	}{
		{"kmd, 2 nodes", tConfig{kind: "kmd", nodes: 2, parallel: 1, runs: -1, kills: 1, foreign: 1, fails: true, host: -1},
			[]string{raced}, modelcheck.Quick},
		{"kmd, 2 nodes, runs per node", tConfig{kind: "kmd", nodes: 2, parallel: 1, runs: -1, kills: 1, fails: true, subsets: true,
			host: -1}, nil, modelcheck.Quick},
		{"kmd, a host process holds n2", tConfig{kind: "kmd", nodes: 2, parallel: 1, runs: -1, kills: 1, fails: true, host: 1,
			noDone: true}, nil, modelcheck.Quick},
		{"firmware, 2 nodes, --max-parallel 1", tConfig{kind: "firmware", nodes: 2, parallel: 1, keep: true, runs: -1, kills: 1,
			foreign: 1, fails: true, host: -1}, []string{raced}, modelcheck.Full},
		// With Prefetch the next node starts while one is out: its cordon
		// waits for the first to end; a failed node holds its slot and the
		// rest are skipped.
		{"firmware, 3 nodes, --max-parallel 1, keep going, failing helper", tConfig{kind: "firmware", nodes: 3, parallel: 1,
			keep: true, runs: -1, fails: true, host: -1}, []string{waits, woken, gap, full}, modelcheck.Full},
		// A failed node halts the run: the prefetched ones, waiting for
		// its slot or not yet at their cordon, are skipped.
		{"firmware, 3 nodes, --max-parallel 1, failing helper halts", tConfig{kind: "firmware", nodes: 3, parallel: 1,
			runs: -1, fails: true, host: -1}, []string{halted, "the run halted; skipped"}, modelcheck.Full},
		{"firmware, 3 nodes, --max-parallel 2, helpers succeed", tConfig{kind: "firmware", nodes: 3, parallel: 2, runs: -1, host: -1},
			nil, modelcheck.Full},
		// A node an earlier run left cordoned is in no slot of the new run;
		// the Exclusive cordon has the targets count it one at a time.
		{"firmware, 3 nodes, --max-parallel 2, an earlier run left n3 cordoned", tConfig{kind: "firmware", nodes: 3, parallel: 2,
			runs: -1, left: 3, host: -1}, []string{waits, woken, gap}, modelcheck.Full},
		// Longer runs (ROLLBOOK_MODEL_LONG=1, each half a minute).
		{"firmware, 3 nodes, --max-parallel 1, kill", tConfig{kind: "firmware", nodes: 3, parallel: 1, keep: true, runs: -1, kills: 1,
			fails: true, host: -1}, nil, modelcheck.Long},
		{"firmware, 3 nodes, --max-parallel 2, keep going, failing helper", tConfig{kind: "firmware", nodes: 3, parallel: 2, keep: true,
			runs: -1, fails: true, host: -1}, []string{full}, modelcheck.Long},
		{"firmware, 3 nodes, --max-parallel 2, failing helper halts", tConfig{kind: "firmware", nodes: 3, parallel: 2,
			runs: -1, fails: true, host: -1}, []string{halted, "the run halted; skipped"}, modelcheck.Long},
		{"firmware, 3 nodes, --max-parallel 2, runs per node, an earlier run left n3 cordoned", tConfig{kind: "firmware", nodes: 3,
			parallel: 2, runs: -1, subsets: true, left: 3, host: -1}, []string{waits, woken}, modelcheck.Long},
		{"firmware, 3 nodes, --max-parallel 2, keep going, failing helper, n3 left cordoned", tConfig{kind: "firmware", nodes: 3,
			parallel: 2, keep: true, runs: -1, fails: true, left: 3, host: -1}, []string{waits, woken, full}, modelcheck.Long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tier.Skip(t)
			if res := exploreTT(t, tc.c, tc.want...); res.Violation != nil {
				t.Fatalf("%s", res.Violation)
			}
		})
	}
}

// TestModelTTSeededBugs drops one guard (or a step's exclusion) at a time
// from the real runbooks: the explorer must find the rule it protects
// broken, and print how.
func TestModelTTSeededBugs(t *testing.T) {
	for _, tc := range []struct {
		name, rule string
		c          tConfig
	}{
		// With Prefetch the next node is in progress while one is out: only
		// the guard keeps it from cordoning.
		{"firmware cordon without the --max-parallel budget", "at most 1 node(s) out of service",
			tConfig{kind: "firmware", nodes: 2, parallel: 1, keep: true, runs: -1, fails: true, host: -1,
				drop: "tt.fw.cordon/no more than --max-parallel"}},
		{"firmware cordon not Exclusive", "at most 2 node(s) out of service",
			tConfig{kind: "firmware", nodes: 3, parallel: 2, runs: -1, left: 3, host: -1, shared: "tt.fw.cordon"}},
		{"firmware cordon after the run halted", ruleActs,
			tConfig{kind: "firmware", nodes: 3, parallel: 2, runs: -1, fails: true, host: -1, afterHalt: true}},
		{"kmd cordon without the probe's verdict", ruleActs,
			tConfig{kind: "kmd", nodes: 2, parallel: 1, runs: -1, host: 1, noDone: true,
				drop: "tt.kmd.cordon/the probe found nothing in the way"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := exploreTT(t, tc.c)
			if res.Violation == nil || res.Violation.Invariant != tc.rule {
				t.Fatalf("the dropped guard went unnoticed: want %q broken, got %v", tc.rule, res.Violation)
			}
			t.Logf("seeded bug caught:\n%s", res.Violation)
		})
	}
}
