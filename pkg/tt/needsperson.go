package tt

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// AnnFlashNeedsPerson records on a node that tt-flash could not write a
// chip's SPI and said the board needs a person (ttflash.FailureSource).
// Every later kubectl tt run refuses the node until
// --acknowledge-failed-flash names it; a flash that then succeeds removes
// it. kubectl tt cleanup leaves it: it is not rollbook's bookkeeping.
const AnnFlashNeedsPerson = "rollbook.dev/tt-firmware-needs-person"

// AcknowledgeFlag is the flag that lets a run touch a node whose failed
// flash a person has dealt with.
const AcknowledgeFlag = "acknowledge-failed-flash"

// needsPersonRecord is what AnnFlashNeedsPerson holds.
type needsPersonRecord struct {
	// Firmware is the bundle version the failed flash was writing.
	Firmware string             `json:"firmware"`
	Message  string             `json:"message"`
	Devices  []nodeagent.Device `json:"devices,omitempty"`
	Run      string             `json:"run"`
	At       time.Time          `json:"at"`
}

// needsPersonOf is the node's recorded failed flash; ok false when none.
// A record that does not decode still counts: the node needs a person.
func needsPersonOf(n *corev1.Node) (rec needsPersonRecord, ok bool) {
	raw, found := n.Annotations[AnnFlashNeedsPerson]
	if !found {
		return rec, false
	}
	if decodeRecord(raw, &rec) != nil {
		rec = needsPersonRecord{Message: "unreadable record: " + raw}
	}
	return rec, true
}

// needsPersonChange records flash result r as needing a person.
func needsPersonChange(cfg *FirmwareConfig, r *nodeagent.Result, msg string) kube.NodeChange {
	rec := needsPersonRecord{Firmware: cfg.Readback, Message: msg, Run: cfg.RunID, At: kube.ServerNow().UTC()}
	if r != nil {
		rec.Devices = r.Devices
	}
	return rec.change()
}

// change writes rec on a node.
func (rec needsPersonRecord) change() kube.NodeChange {
	b, _ := json.Marshal(rec)
	return kube.NodeChange{Annotations: map[string]*string{AnnFlashNeedsPerson: ptr.To(string(b))}}
}

// OnlyRecordOfNeedsPerson says why cleanup must keep helper p: a flash
// helper whose failure needs a person, on a node whose record of it is
// gone (a run killed before it wrote it, or the annotation removed); ""
// when p may go. Deleted, nothing would tell a later run.
func OnlyRecordOfNeedsPerson(p *corev1.Pod, nodes []corev1.Node) string {
	h := helperOf(p)
	if p.Labels[kube.LabelHelper] != flashTask || h.Result == nil || h.Result.Error == nil ||
		h.Result.Error.Reason != nodeagent.ReasonFlashNeedsPerson {
		return ""
	}
	for i := range nodes {
		if nodes[i].Name != p.Spec.NodeName {
			continue
		}
		if _, recorded := needsPersonOf(&nodes[i]); recorded {
			return ""
		}
		return fmt.Sprintf("it is the only record that the flash on %s needs a person (tt-flash: %s), and the node's record "+
			"(%s) is gone; any kubectl tt upgrade that selects the node writes it again, then cleanup removes the helper",
			p.Spec.NodeName, strings.TrimSuffix(h.Result.Error.Message, "."), AnnFlashNeedsPerson)
	}
	return "" // the node is gone
}

// restoreLostNeedsPerson records again, on each selected node (but those
// skip excludes, and those acknowledged), a failed flash that needs a
// person whose record never reached the node: the run that saw it was
// killed between the helper's failure and its write, or someone removed
// the annotation. The node's failed flash helper still says so; every run
// reads it here, whatever it upgrades, so a kmd or tt-smi run refuses the
// node as a firmware run does, and status shows it again. nodes are
// updated in place.
func (s Selection) restoreLostNeedsPerson(ctx context.Context, cs kubernetes.Interface, nodes []corev1.Node,
	skip func(*corev1.Node) string) error {
	if s.HelperNamespace == "" {
		return nil
	}
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		n := &nodes[i]
		if _, recorded := needsPersonOf(n); !recorded && (skip == nil || skip(n) == "") &&
			!slices.Contains(s.AcknowledgedFailedFlash, n.Name) {
			byName[n.Name] = n
		}
	}
	if len(byName) == 0 {
		return nil
	}
	l, err := cs.CoreV1().Pods(s.HelperNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{kube.LabelHelper: flashTask}.String()})
	if err != nil {
		return fmt.Errorf("list the flash helpers in namespace %s (a failed flash whose record was lost is found by its "+
			"helper): %w", s.HelperNamespace, err)
	}
	for i := range l.Items {
		p := &l.Items[i]
		n := byName[p.Spec.NodeName]
		h := helperOf(p)
		if n == nil || !h.finished() || h.Result == nil || h.Result.Error == nil ||
			h.Result.Error.Reason != nodeagent.ReasonFlashNeedsPerson {
			continue
		}
		rec := needsPersonRecord{Firmware: h.Result.Target, Message: h.Result.Error.Message, Devices: h.Result.Devices,
			Run: p.Labels[kube.LabelRun], At: h.Result.StartedAt}
		change := rec.change()
		if _, err := kube.SetNodeKeys(ctx, cs, n.Name, change); err != nil {
			return fmt.Errorf("%s: its flash helper %s says the flash needs a person, and recording that on the node again "+
				"failed: %w", n.Name, p.Name, err)
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[AnnFlashNeedsPerson] = *change.Annotations[AnnFlashNeedsPerson]
		delete(byName, n.Name)
	}
	return nil
}

// flashNeedsPerson records on node that its flash failed in a way that
// needs a person, and stops the node there, blocked (exit 3: the
// --in-cluster Job fails at once instead of retrying). The node keeps its
// cordon.
func flashNeedsPerson(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, node *corev1.Node, cfg *FirmwareConfig,
	h helperFacts) error {
	msg := h.Result.Error.Message
	desc := describeNeedsPerson(node.Name, needsPersonRecord{Firmware: cfg.Readback, Message: msg, Run: cfg.RunID,
		At: kube.ServerNow().UTC()})
	if _, err := kube.SetNodeKeysRecorded(ctx, cs, rec, node.Name, needsPersonChange(cfg, h.Result, msg), "FlashNeedsPerson",
		desc); err != nil {
		// Still blocked: a retry must not flash the board again.
		return runbook.Blocked(fmt.Errorf("%s; recording it on the node failed, so later runs will not refuse it by "+
			"themselves (annotate it %s, or keep it out of their selection): %w", desc, AnnFlashNeedsPerson, err))
	}
	return runbook.Blocked(fmt.Errorf("%s%s", desc, describeDevices(h.Result)))
}

// noFlashNeedsPerson refuses to replace a flash helper that failed in a
// way that needs a person, unacknowledged, even when its record never
// reached the node (the run was killed between the two): a retry must
// not flash the board again.
func noFlashNeedsPerson(cfg *FirmwareConfig) runbook.Guard[Facts] {
	return runbook.Guard[Facts]{Name: "no earlier flash of the node needs a person", Check: func(f Facts) (bool, string) {
		h := f.Helper
		if !h.finished() || h.Result == nil || h.Result.Error == nil || h.Result.Error.Reason != nodeagent.ReasonFlashNeedsPerson ||
			slices.Contains(cfg.Acknowledged, f.Node.Name) {
			return true, ""
		}
		return false, describeNeedsPerson(f.Node.Name, needsPersonRecord{Firmware: cfg.Readback, Message: h.Result.Error.Message,
			At: h.Result.StartedAt})
	}}
}

// describeNeedsPerson says what happened on node, when, and what to do.
func describeNeedsPerson(node string, rec needsPersonRecord) string {
	when := "at an unknown time"
	if !rec.At.IsZero() {
		when = "at " + rec.At.Format(time.RFC3339)
	}
	if rec.Run != "" {
		when += " (run " + rec.Run + ")"
	}
	return fmt.Sprintf("%s: the flash to %s failed %s and tt-flash said the board needs a person: %s. rollbook has not reset "+
		"the board since (tt-flash says not to reset or power it off): the chips whose write verified hold the new bundle in "+
		"their SPI but run their old firmware until a reset. Contact Tenstorrent support; once the board is fixed, re-run "+
		"with --%s=%s", node, orUnknown(rec.Firmware), when, strings.TrimSuffix(rec.Message, "."), AcknowledgeFlag, node)
}

// NeedsPersonError names selected nodes with a failed flash no one has
// acknowledged: the run refuses them before any cordon (exit 3).
type NeedsPersonError struct{ Details []string }

func (e *NeedsPersonError) Error() string {
	return fmt.Sprintf("%d selected node(s) had a flash fail in a way that needs a person; nothing was changed:\n  %s",
		len(e.Details), strings.Join(e.Details, "\n  "))
}

// refuseNeedsPerson writes back the lost records of nodes, then refuses as
// checkNeedsPerson does: what every run and --in-cluster submission does.
func (s Selection) refuseNeedsPerson(ctx context.Context, cs kubernetes.Interface, nodes []corev1.Node,
	skip func(*corev1.Node) string) error {
	if err := s.restoreLostNeedsPerson(ctx, cs, nodes, skip); err != nil {
		return err
	}
	return s.checkNeedsPerson(nodes, skip)
}

// checkNeedsPerson is a *NeedsPersonError naming the nodes (but those skip
// excludes) with a failed flash on record that the selection does not
// acknowledge, or a *SelectionError when it acknowledges a node it does
// not select.
func (s Selection) checkNeedsPerson(nodes []corev1.Node, skip func(*corev1.Node) string) error {
	var details []string
	for i := range nodes {
		n := &nodes[i]
		if skip != nil && skip(n) != "" {
			continue
		}
		if rec, ok := needsPersonOf(n); ok && !slices.Contains(s.AcknowledgedFailedFlash, n.Name) {
			details = append(details, describeNeedsPerson(n.Name, rec))
		}
	}
	for _, a := range s.AcknowledgedFailedFlash {
		if !slices.ContainsFunc(nodes, func(n corev1.Node) bool { return n.Name == a }) {
			return &SelectionError{msg: fmt.Sprintf("--%s %s: the node is not selected (or does not exist); nothing was changed",
				AcknowledgeFlag, a)}
		}
	}
	if len(details) > 0 {
		return &NeedsPersonError{Details: details}
	}
	return nil
}

// validateAcknowledged checks --acknowledge-failed-flash's node names.
func (s Selection) validateAcknowledged() error {
	for _, a := range s.AcknowledgedFailedFlash {
		if errs := validation.IsDNS1123Subdomain(a); len(errs) > 0 {
			return fmt.Errorf("--%s %q: not a node name: %s", AcknowledgeFlag, a, strings.Join(errs, "; "))
		}
	}
	return nil
}

// CheckNeedsPerson is what targets refuses for a failed flash that needs
// a person (a *NeedsPersonError, or a *SelectionError for an acknowledged
// node sel does not select), read before an --in-cluster Job is made.
// firmware picks the firmware runbook's skips, else the driver's.
func CheckNeedsPerson(ctx context.Context, cs kubernetes.Interface, sel Selection, firmware bool) error {
	nodes, err := ListNodes(ctx, cs, sel)
	if err != nil {
		return err
	}
	skip := DriverSkipReason
	if firmware {
		skip = FirmwareSkipReason
	}
	return sel.refuseNeedsPerson(ctx, cs, nodes, skip)
}

// NeedPerson are the nodes of r this run stopped at its flash with a
// failure recorded as needing a person, for the summary's next command.
func NeedPerson(ctx context.Context, cs kubernetes.Interface, r runbook.Result, run string) []string {
	var out []string
	for _, t := range r.Targets {
		if t.Outcome != runbook.OutcomeBlocked || t.State != "tt.fw.flash" || t.Ref.Name == "" {
			continue
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, t.Ref.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if rec, ok := needsPersonOf(n); ok && rec.Run == run {
			out = append(out, n.Name)
		}
	}
	return out
}

// NeedPersonNext is the summary's next command for nodes that need a person.
func NeedPersonNext(nodes []string, version string) string {
	list := strings.Join(nodes, ",")
	return fmt.Sprintf("contact Tenstorrent support about %s (tt-flash: do not reset or power off the board); once fixed: "+
		"kubectl tt upgrade firmware --version %s --nodes %s --%s=%s", list, version, list, AcknowledgeFlag, list)
}

// needsPersonStatus is the status of a node with a failed flash on
// record: state and what to do.
func needsPersonStatus(n *corev1.Node) (state, why string, ok bool) {
	rec, ok := needsPersonOf(n)
	if !ok {
		return "", "", false
	}
	return "needs a person", describeNeedsPerson(n.Name, rec), true
}
