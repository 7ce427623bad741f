package tt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// SMIRunbookName names the tt-smi runbook and its timers.
const SMIRunbookName = "tt-smi"

// SMIConfig is what `kubectl tt upgrade smi` was asked to do.
type SMIConfig struct {
	Version string
	Helper  HelperConfig
	RunID   string
}

// Validate rejects bad input before any API call.
func (c *SMIConfig) Validate() error {
	if err := nodeagent.ValidateVersion(c.Version); err != nil {
		return fmt.Errorf("--version: %v", err)
	}
	return c.Helper.validate()
}

// AnnSMIResult is the tt-smi version a helper measured on the host, by
// which run (JSON smiRecord).
const AnnSMIResult = "rollbook.dev/tt-smi-result"

type smiRecord struct {
	After string    `json:"after"`
	Run   string    `json:"run"`
	At    time.Time `json:"at"`
}

// measuredSMI is the host's tt-smi version as this run measured it: by its
// helper, or else by its probe (running the host's binary as the host does).
func measuredSMI(n *corev1.Node, run string) (string, bool) {
	var r smiRecord
	if raw, ok := n.Annotations[AnnSMIResult]; ok && json.Unmarshal([]byte(raw), &r) == nil && r.Run == run {
		return r.After, true
	}
	if p := probeRecordOf(n); p != nil && p.Run == run {
		return p.SMI, true
	}
	return "", false
}

// smiFinished: this run measured the target binary on the host and the
// label says so; a label alone never counts (as for tt-kmd).
func smiFinished(n *corev1.Node, want, run string) bool {
	v, ok := measuredSMI(n, run)
	return ok && v == want && n.Labels[LabelSMIVersion] == want
}

// smiBlockers: the smi helper refuses a host whose driver the OS manages.
func smiBlockers(v string) func(f *Facts) []string {
	return func(f *Facts) []string {
		r := f.Measured
		if r == nil {
			return []string{"no probe result"}
		}
		if r.SMI == v {
			return nil
		}
		var out []string
		if len(r.DKMS) > 0 {
			out = append(out, "the host's Tenstorrent software is managed by the OS ("+r.DKMS[0]+"); tt-smi is left to it")
		}
		for _, s := range r.SMIOnPath {
			if s.Owner != "" {
				out = append(out, nodeagent.PackagedSMIRefusal(s))
				break
			}
		}
		return out
	}
}

// SMIRunbook installs tt-smi on each node. Replacing the binary is atomic
// (rename over it), so concurrent `tt-smi -s` callers see the old or the new
// binary, never a partial one, and the node needs no cordon.
func SMIRunbook(cs kubernetes.Interface, rec kube.Recorder, cfg *SMIConfig) *runbook.Runbook[Facts] {
	cs = kube.RememberNodeWrites(cs)
	v := cfg.Version
	helperName := func(node string) string { return kube.HelperName("smi", node, v) }
	obs := observer{cs: cs, owner: SMIRunbookName, helperNS: cfg.Helper.Namespace, helper: helperName,
		probe:    func(node string) string { return probeHelperName(node, cfg.RunID) },
		finished: func(n *corev1.Node) bool { return smiFinished(n, v, cfg.RunID) }, run: cfg.RunID}
	b := newBuilder(cs, rec, cfg.RunID, cfg.Helper)
	blockers := smiBlockers(v)
	// The probe found the target binary on the host: only the label is missing.
	atTarget := func(f Facts) bool { return f.measuredFresh(cfg.RunID) && f.Measured.SMI == v }
	install := b.helperTask(task{
		id: "tt.smi.install", title: "Replace tt-smi on the host", name: "smi", key: v,
		command: smiCommand(v),
		doc: "Run the smi helper pod: sibling file, fsync, rename(2) over /usr/local/bin/tt-smi, then check the " +
			"version the new binary reports. Skipped when the probe measured the target binary already.",
		timeout: cfg.Helper.Timeout,
		guards: []runbook.Guard[Facts]{{Name: "the probe found nothing in the way", Check: func(f Facts) (bool, string) {
			if !f.measuredFresh(cfg.RunID) {
				return false, "the node was not probed by this run"
			}
			bl := blockers(&f)
			return len(bl) == 0, fmt.Sprintf("tt-smi will not be installed on %s: %s", f.Node.Name, strings.Join(bl, "; "))
		}}},
		succeeded: func(h helperFacts) bool { return h.reached(v) },
		describe:  func(*nodeagent.Result) string { return "helper installed " + v },
		failed: func(ctx context.Context, f Facts, h helperFacts) error {
			rec.Record(ctx, kube.NodeRef(f.Node), true, "TTSMIInstallFailed", helperError(h))
			return fmt.Errorf("%s", helperError(h))
		},
		waiting: func(f Facts) string { return "tt-smi at " + orUnknown(f.Node.Labels[LabelSMIVersion]) },
	})
	installed := install.Done
	install.Done = func(f Facts) (bool, string) {
		if f.Helper.Pod == nil && atTarget(f) {
			return true, "the host runs tt-smi " + v + " already (measured by the probe): only the label is written"
		}
		return installed(f)
	}
	return &runbook.Runbook[Facts]{
		Name:  SMIRunbookName,
		Title: "Install tt-smi on the host",
		Doc: `Per node: a probe runs the host's tt-smi --version as the host does (its libc); unless that is the
target already, a helper pod writes the new tt-smi next to /usr/local/bin/tt-smi and renames it
over the old one and verifies the version it reports; the node is labelled with the measured
version. A label alone never makes a node done.`,
		Observe:      func(ctx context.Context, t runbook.Target) (Facts, error) { return obs.observe(ctx, t.Name()) },
		ObserveParts: obs.observePartsOf,
		Annotation:   annotationOf,
		// A node that stops cordoned by this runbook keeps its --max-parallel slot.
		OutOfService: func(f Facts) bool { return f.ourCordon() },
		Steps: []runbook.Step[Facts]{
			b.probe("tt.smi.probe", agentCommand("probe"), blockers),
			install,
			{
				ID: "tt.smi.label", Title: "Label the node with the tt-smi version",
				Doc: "Write tt-smi.driver.tenstorrent.com/version from the version the helper measured.",
				Done: func(f Facts) (bool, string) {
					return f.Finished, LabelSMIVersion + "=" + orUnknown(f.Node.Labels[LabelSMIVersion])
				},
				Plan: func(f Facts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "label", Detail: LabelSMIVersion + "=" + v}}
				},
				Act: func(ctx context.Context, f Facts) error {
					after, why := v, "measured by the probe"
					if f.Helper.reached(v) {
						after, why = f.Helper.Result.After, "installed by the helper"
					}
					b, _ := json.Marshal(smiRecord{After: after, Run: cfg.RunID, At: kube.ServerNow().UTC()})
					_, err := kube.SetNodeKeysRecorded(ctx, cs, rec, f.Node.Name, kube.NodeChange{
						Labels:      map[string]*string{LabelSMIVersion: &after},
						Annotations: withClockTakenAlong(f.Node, SMIRunbookName, map[string]*string{AnnSMIResult: ptr.To(string(b))})},
						"TTSMIInstalled", LabelSMIVersion+"="+after+" ("+why+")")
					return err
				},
				Guards: []runbook.Guard[Facts]{{Name: "the target version was measured", Check: func(f Facts) (bool, string) {
					return f.Helper.reached(v) || atTarget(f), "no measurement of tt-smi " + v + " on the host"
				}}},
			},
			b.cleanup("tt.smi.cleanup", helperName),
		},
	}
}
