package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/pager"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// NodeStatus is one row of `kubectl tt status`.
type NodeStatus struct {
	Node     string `json:"node"`
	KMD      string `json:"kmdVersion"`
	SMI      string `json:"ttSmiVersion"`
	Firmware string `json:"firmwareVersion"`
	// FirmwareDevices is what each device read back at the last flash.
	FirmwareDevices []string `json:"firmwareDevices,omitempty"`
	InstallMode     string   `json:"installMode"`
	Cordon          string   `json:"cordon"`
	// State is what is happening on the node: idle, skipped, or the runbook
	// step in progress.
	State string `json:"state"`
	// Why explains a stuck or skipped node.
	Why   string `json:"why,omitempty"`
	Since string `json:"since,omitempty"`
	Run   string `json:"run,omitempty"`
}

// Status reads every Tenstorrent node and rollbook's helper pods, together:
// a metadata-only list of the nodes (md; nil lists full Nodes), a list of
// the cordoned ones and one of the helper pods, whatever the fleet size.
// Only a drain that has stalled costs more: the PodDisruptionBudgets and
// that node's pods, read as soon as the cordoned nodes are (stalledDrains).
func Status(ctx context.Context, cs kubernetes.Interface, md metadata.Interface, sel Selection) ([]NodeStatus, error) {
	s, err := sel.selector()
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range sel.Nodes {
		want[n] = true
	}
	helpers := map[string][]corev1.Pod{} // node → helper pods
	var nodes []corev1.Node
	var drains map[string]string // node → what holds its drain
	helpersRead := make(chan struct{})
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(helpersRead)
		hp := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = kube.LabelHelper
			return cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		})
		err := hp.EachListItem(gctx, metav1.ListOptions{Limit: 500}, func(o runtime.Object) error {
			p := o.(*corev1.Pod)
			helpers[p.Spec.NodeName] = append(helpers[p.Spec.NodeName], *p)
			return nil
		})
		if err != nil {
			return fmt.Errorf("list helper pods: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		var err error
		// While the fleet's list is in flight, the cordoned nodes and the
		// helpers say which drains stalled, and those are read.
		nodes, err = kube.ListNodesLightThen(gctx, md, cs, s.String(), func(ctx context.Context, cordoned []corev1.Node) error {
			select {
			case <-helpersRead:
			case <-ctx.Done():
				return ctx.Err()
			}
			var stalled []string
			now := kube.ServerNow() // cordoned-at is on the API server's clock
			for i := range cordoned {
				n := &cordoned[i]
				if len(want) == 0 || want[n.Name] {
					if r := nodeStatus(n, helpers[n.Name]); r.Why == "" && drainStalled(n, helpers[n.Name], now) {
						stalled = append(stalled, n.Name)
					}
				}
			}
			var err error
			drains, err = explainDrains(ctx, cs, stalled)
			return err
		})
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rows := make([]NodeStatus, 0, len(nodes))
	for i := range nodes {
		if len(want) == 0 || want[nodes[i].Name] {
			r := nodeStatus(&nodes[i], helpers[nodes[i].Name])
			if r.Why == "" {
				r.Why = drains[r.Node]
			}
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Node < rows[j].Node })
	return rows, nil
}

// A drain is explained once it has stalled: its timed step has run this
// long, or, with no step clock (a run that stopped: a blocked step clears
// its clock), the node was cordoned this long ago. A drain that is moving
// costs status nothing, however many nodes a roll has in flight.
const (
	drainStalledAfter     = 10 * time.Second
	unclockedStalledAfter = 5 * time.Second
)

// drainStalled reports a node a tt runbook has out of service that is still
// being drained (no task helper since its cordon) and has been for long.
func drainStalled(n *corev1.Node, helpers []corev1.Pod, now time.Time) bool {
	st := kube.CordonStateOf(n)
	if !strings.HasPrefix(st.Owner, "tt-") {
		return false
	}
	since, err := time.Parse(time.RFC3339, st.Since)
	for i := range helpers {
		h := &helpers[i]
		if h.Labels[kube.LabelHelper] != "probe" && (err != nil || !h.CreationTimestamp.Time.Before(since)) {
			return false // a task helper came after the cordon: the drain is over
		}
	}
	if _, started, ok := runbook.StepClock(n.Annotations, st.Owner); ok {
		return now.Sub(started) >= drainStalledAfter
	}
	return err != nil || now.Sub(since) >= unclockedStalledAfter
}

// drainReads bounds the pod reads status makes at once: one per stalled
// drain, so at most --max-parallel in practice.
const drainReads = 32

// explainDrains says, for each stalled node whose pods a PDB allowing no
// disruption holds, which: one list of the PDBs, then the nodes' pods at
// once, none of it when no PDB is at zero.
func explainDrains(ctx context.Context, cs kubernetes.Interface, stalled []string) (map[string]string, error) {
	if len(stalled) == 0 {
		return nil, nil
	}
	l, err := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list PodDisruptionBudgets: %w", err)
	}
	atZero := kube.PDBsByNamespace{}
	for _, p := range l.Items {
		if p.Status.DisruptionsAllowed < 1 {
			atZero[p.Namespace] = append(atZero[p.Namespace], p)
		}
	}
	if len(atZero) == 0 {
		return nil, nil
	}
	whys := make([]string, len(stalled))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(drainReads)
	for i, node := range stalled {
		g.Go(func() error {
			pods, err := kube.PodsOnNode(gctx, cs, node)
			if err != nil {
				return err
			}
			whys[i] = drainBlockedWhy(kube.PDBBlockers(pods, atZero, nil))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, node := range stalled {
		if whys[i] != "" {
			out[node] = whys[i]
		}
	}
	return out, nil
}

// drainBlockedWhy names the PDBs holding a node's pods, "" when none does.
func drainBlockedWhy(all []kube.DrainBlocker) string {
	var blocked []string
	for _, b := range all {
		for _, pdb := range b.PDBs {
			blocked = append(blocked, fmt.Sprintf("%s/%s held by PodDisruptionBudget %s", b.Namespace, b.Name, pdb))
		}
	}
	if len(blocked) == 0 {
		return ""
	}
	return "drain blocked: " + strings.Join(blocked, "; ")
}

// nodeStatus is a pure function of the node and its helper pods.
func nodeStatus(n *corev1.Node, helpers []corev1.Pod) NodeStatus {
	l := n.Labels
	recs := recordsOf(n)
	r := NodeStatus{Node: n.Name, KMD: dash(l[LabelKMDVersion]), SMI: dash(l[LabelSMIVersion]),
		Firmware: dash(l[LabelFirmware]), InstallMode: dash(l[LabelInstallMode]), State: "idle"}
	if rec, ok := recs.Firmware(); ok {
		for _, d := range rec.Devices {
			r.FirmwareDevices = append(r.FirmwareDevices, fmt.Sprintf("%d:%s", d.Index, dash(d.After)))
		}
	}
	cs := kube.CordonStateOf(n)
	r.Cordon = map[bool]string{true: "cordoned", false: "-"}[cs.Cordoned]
	if cs.Cordoned {
		r.Cordon = "foreign"
		if cs.Owner != "" {
			r.Cordon = cs.Owner
			r.Since, r.Run = cs.Since, cs.Run
		}
	}
	if why := DriverSkipReason(n); why != "" {
		r.State, r.Why = "skipped", why
	}
	if cs.Owner != "" {
		r.State = cs.Owner + ": in progress"
		if step, _, ok := runbook.StepClock(n.Annotations, cs.Owner); ok {
			r.State = cs.Owner + ": " + step
		}
	}
	for i := range helpers {
		h := &helpers[i]
		key := h.Annotations[kube.AnnHelperKey]
		switch {
		case !kube.PodTerminal(h):
			r.State = fmt.Sprintf("%s helper running (%s)", h.Labels[kube.LabelHelper], key)
		case staleHelper(recs, h):
			// A newer result superseded it (an abandoned version): not news.
		case h.Status.Phase == corev1.PodFailed || !helperOK(h):
			r.Why = helperWhy(h)
		}
	}
	if gap := kmdKernelGap(recs); gap != "" && r.Why == "" && r.State == "idle" {
		r.State, r.Why = "needs work", gap
	}
	if d := measuredDisagrees(recs); d != "" && r.Why == "" {
		r.Why = d
	}
	if p := recs.Probe(); p != nil && r.Why == "" {
		if hh := p.hostHolders(); len(hh) > 0 {
			var s []string
			for _, h := range hh {
				s = append(s, fmt.Sprintf("pid %d (%s)", h.PID, h.Comm))
			}
			r.Why = "probe: host processes hold /dev/tenstorrent: " + strings.Join(s, ", ") + " (stop them, or --force-unload)"
		}
	}
	if cs.Foreign() && r.Why == "" {
		r.Why = "cordoned by someone else; rollbook will not touch it"
	}
	if state, why, ok := needsPersonStatus(n); ok {
		r.State, r.Why = state, why
	}
	return r
}

// staleHelper reports a finished helper older than the node's recorded
// result for its task.
func staleHelper(recs *nodeRecords, h *corev1.Pod) bool {
	var at time.Time
	switch h.Labels[kube.LabelHelper] {
	case "kmd":
		if r, ok := recs.KMD(); ok {
			at, _ = time.Parse(time.RFC3339, r.At)
		}
	case "flash":
		if r, ok := recs.Firmware(); ok {
			at = r.At
		}
	case "probe":
		if r := recs.Probe(); r != nil {
			at = r.At
		}
	}
	return !at.IsZero() && at.After(h.CreationTimestamp.Time)
}

func helperOK(p *corev1.Pod) bool {
	msg, _, ok := kube.TerminationMessage(p)
	if !ok {
		return false
	}
	res, err := nodeagent.ParseResult([]byte(msg))
	return err == nil && res.Success
}

func helperWhy(p *corev1.Pod) string {
	task := p.Labels[kube.LabelHelper]
	msg, _, ok := kube.TerminationMessage(p)
	if !ok {
		return task + " helper failed: " + kube.HelperFailureReason(p)
	}
	res, err := nodeagent.ParseResult([]byte(msg))
	if err != nil || res.Error == nil {
		return task + " helper failed: " + kube.HelperFailureReason(p)
	}
	why := fmt.Sprintf("%s helper: %s: %s", task, res.Error.Reason, res.Error.Message)
	if len(res.Holders) > 0 {
		var pids []string
		for _, h := range res.Holders {
			pids = append(pids, fmt.Sprint(h.PID))
		}
		why += " (holder pids " + strings.Join(pids, ",") + ")"
	}
	return why
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// DeviceSummary shortens per-device versions: "32×19.0.0.0", or the list
// when they differ.
func (r NodeStatus) DeviceSummary() string {
	if len(r.FirmwareDevices) == 0 {
		return "-"
	}
	first := r.FirmwareDevices[0][strings.IndexByte(r.FirmwareDevices[0], ':')+1:]
	for _, d := range r.FirmwareDevices[1:] {
		if d[strings.IndexByte(d, ':')+1:] != first {
			return strings.Join(r.FirmwareDevices, ",")
		}
	}
	return fmt.Sprintf("%d×%s", len(r.FirmwareDevices), first)
}
