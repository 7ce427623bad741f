package tt

import (
	"context"
	"encoding/json"
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
func Status(ctx context.Context, cs kubernetes.Interface, md metadata.Interface, sel Selection) ([]NodeStatus, error) {
	s, err := sel.selector()
	if err != nil {
		return nil, err
	}
	helpers := map[string][]corev1.Pod{} // node → helper pods
	var nodes []corev1.Node
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
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
		nodes, err = kube.ListNodesLight(gctx, md, cs, s.String())
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range sel.Nodes {
		want[n] = true
	}
	rows := make([]NodeStatus, 0, len(nodes))
	for i := range nodes {
		if len(want) == 0 || want[nodes[i].Name] {
			rows = append(rows, nodeStatus(&nodes[i], helpers[nodes[i].Name]))
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Node < rows[j].Node })
	// Only nodes stuck in a drain cost more reads: their pods and PDBs.
	for i := range rows {
		if rows[i].Why == "" && mayBeDraining(rows[i]) {
			why, err := drainBlockers(ctx, cs, rows[i].Node)
			if err != nil {
				return nil, err
			}
			rows[i].Why = why
		}
	}
	return rows, nil
}

// mayBeDraining reports a node a tt runbook has out of service with no
// helper running yet: the only steps there move pods off the node.
func mayBeDraining(r NodeStatus) bool {
	return strings.HasPrefix(r.Cordon, "tt-") && !strings.Contains(r.State, "helper running")
}

// drainBlockers names the PDBs holding pods on node, if any.
func drainBlockers(ctx context.Context, cs kubernetes.Interface, node string) (string, error) {
	all, err := kube.DrainBlockers(ctx, cs, node, nil)
	if err != nil {
		return "", err
	}
	var blocked []string
	for _, b := range all {
		for _, pdb := range b.PDBs {
			blocked = append(blocked, fmt.Sprintf("%s/%s held by PodDisruptionBudget %s", b.Namespace, b.Name, pdb))
		}
	}
	if len(blocked) == 0 {
		return "", nil
	}
	return "drain blocked: " + strings.Join(blocked, "; "), nil
}

// nodeStatus is a pure function of the node and its helper pods.
func nodeStatus(n *corev1.Node, helpers []corev1.Pod) NodeStatus {
	l := n.Labels
	r := NodeStatus{Node: n.Name, KMD: dash(l[LabelKMDVersion]), SMI: dash(l[LabelSMIVersion]),
		Firmware: dash(l[LabelFirmware]), InstallMode: dash(l[LabelInstallMode]), State: "idle"}
	if rec, ok := firmwareRecordOf(n); ok {
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
		case staleHelper(n, h):
			// A newer result superseded it (an abandoned version): not news.
		case h.Status.Phase == corev1.PodFailed || !helperOK(h):
			r.Why = helperWhy(h)
		}
	}
	if gap := kmdKernelGap(n); gap != "" && r.Why == "" && r.State == "idle" {
		r.State, r.Why = "needs work", gap
	}
	if d := measuredDisagrees(n); d != "" && r.Why == "" {
		r.Why = d
	}
	if p := probeRecordOf(n); p != nil && r.Why == "" {
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
	return r
}

// staleHelper reports a finished helper older than the node's recorded
// result for its task.
func staleHelper(n *corev1.Node, h *corev1.Pod) bool {
	var at time.Time
	switch h.Labels[kube.LabelHelper] {
	case "kmd":
		var r kmdRecord
		if json.Unmarshal([]byte(n.Annotations[AnnKMDResult]), &r) == nil {
			at, _ = time.Parse(time.RFC3339, r.At)
		}
	case "flash":
		if r, ok := firmwareRecordOf(n); ok {
			at = r.At
		}
	case "probe":
		if r := probeRecordOf(n); r != nil {
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
