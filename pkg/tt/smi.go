package tt

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

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

// SMIRunbook installs tt-smi on each node. Replacing the binary is atomic
// (rename over it), so concurrent `tt-smi -s` callers see the old or the new
// binary, never a partial one, and the node needs no cordon.
func SMIRunbook(cs kubernetes.Interface, rec kube.Recorder, cfg *SMIConfig) *runbook.Runbook[Facts] {
	cs = kube.RememberNodeWrites(cs)
	v := cfg.Version
	helperName := func(node string) string { return kube.HelperName("smi", node, v) }
	obs := observer{cs: cs, owner: SMIRunbookName, helperNS: cfg.Helper.Namespace, helper: helperName,
		finished: func(n *corev1.Node) bool { return n.Labels[LabelSMIVersion] == v }}
	b := newBuilder(cs, rec, cfg.RunID, cfg.Helper)
	return &runbook.Runbook[Facts]{
		Name:  SMIRunbookName,
		Title: "Install tt-smi on the host",
		Doc: `Per node: a helper pod writes the new tt-smi next to /usr/local/bin/tt-smi and renames it
over the old one, verifies the version it reports, and the node is labelled with it.`,
		Observe:      func(ctx context.Context, t runbook.Target) (Facts, error) { return obs.observe(ctx, t.Name()) },
		ObserveParts: obs.observePartsOf,
		Annotation:   annotationOf,
		// A node that stops cordoned by this runbook keeps its --max-parallel slot.
		OutOfService: func(f Facts) bool { return f.ourCordon() },
		Steps: []runbook.Step[Facts]{
			b.helperTask(task{
				id: "tt.smi.install", title: "Replace tt-smi on the host", name: "smi", key: v,
				command: []string{"kubectl-tt", "node-agent", "smi", "--version", v},
				doc: "Run the smi helper pod: sibling file, fsync, rename(2) over /usr/local/bin/tt-smi, then check the " +
					"version the new binary reports.",
				timeout:   cfg.Helper.Timeout,
				succeeded: func(h helperFacts) bool { return h.reached(v) },
				describe:  func(*nodeagent.Result) string { return "helper installed " + v },
				failed: func(ctx context.Context, f Facts, h helperFacts) error {
					rec.Record(ctx, kube.NodeRef(f.Node), true, "TTSMIInstallFailed", helperError(h))
					return fmt.Errorf("%s", helperError(h))
				},
				waiting: func(f Facts) string { return "tt-smi at " + orUnknown(f.Node.Labels[LabelSMIVersion]) },
			}),
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
					after := f.Helper.Result.After
					_, err := kube.SetNodeKeysRecorded(ctx, cs, rec, f.Node.Name, kube.NodeChange{
						Labels:      map[string]*string{LabelSMIVersion: &after},
						Annotations: withClockTakenAlong(f.Node, SMIRunbookName, nil)}, "TTSMIInstalled", LabelSMIVersion+"="+after)
					return err
				},
				Guards: []runbook.Guard[Facts]{{Name: "the helper measured the target version", Check: func(f Facts) (bool, string) {
					return f.Helper.reached(v), "no successful helper result for " + v
				}}},
			},
			b.cleanup("tt.smi.cleanup", helperName),
		},
	}
}
