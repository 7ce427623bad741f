package tt

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

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

type smiFacts struct {
	node   *corev1.Node
	helper helperFacts
}

// SMIRunbook installs tt-smi on each node. Replacing the binary is atomic
// (rename over it), so concurrent `tt-smi -s` callers see the old or the new
// binary, never a partial one, and the node needs no cordon.
func SMIRunbook(cs kubernetes.Interface, rec kube.Recorder, cfg *SMIConfig) *runbook.Runbook[smiFacts] {
	v := cfg.Version
	helperName := func(node string) string { return kube.HelperName("smi", node, v) }
	at := func(f smiFacts) bool { return f.node.Labels[LabelSMIVersion] == v }
	return &runbook.Runbook[smiFacts]{
		Name:  "tt-smi",
		Title: "Install tt-smi on the host",
		Doc: `Per node: a helper pod writes the new tt-smi next to /usr/local/bin/tt-smi and renames it
over the old one, verifies the version it reports, and the node is labelled with it.`,
		Observe: func(ctx context.Context, t runbook.Target) (smiFacts, error) {
			name := strings.TrimPrefix(t.Name(), "node/")
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return smiFacts{}, err
			}
			h, err := observeHelper(ctx, cs, cfg.Helper.Namespace, helperName(name))
			return smiFacts{node: n, helper: h}, err
		},
		Steps: []runbook.Step[smiFacts]{
			{
				ID: "tt.smi.install", Title: "Replace tt-smi on the host",
				Doc:     "Run the smi helper pod: sibling file, fsync, rename(2) over /usr/local/bin/tt-smi, then check the version the new binary reports.",
				Timeout: cfg.Helper.Timeout,
				Done: func(f smiFacts) (bool, string) {
					switch {
					case at(f):
						return true, LabelSMIVersion + "=" + v
					case f.helper.succeeded(v):
						return true, "helper installed " + v
					case f.helper.finished():
						return false, "last helper failed: " + helperError(f.helper)
					}
					return false, "tt-smi at " + orUnknown(f.node.Labels[LabelSMIVersion])
				},
				Plan: func(f smiFacts) []runbook.Change {
					return []runbook.Change{{Object: "pod/" + cfg.Helper.Namespace + "/" + helperName(f.node.Name), Action: "create", Detail: "kubectl-tt node-agent smi --version " + v}}
				},
				Act: func(ctx context.Context, f smiFacts) error {
					if f.helper.finished() {
						if err := deleteHelper(ctx, cs, rec, f.helper.Pod); err != nil {
							return err
						}
					}
					spec := helperSpec(cfg.Helper, "smi", f.node.Name, v, []string{"kubectl-tt", "node-agent", "smi", "--version", v}, false, cfg.RunID)
					_, _, err := kube.EnsureHelper(ctx, cs, rec, spec)
					return err
				},
				Wait: func(ctx context.Context, f smiFacts) error {
					p, err := kube.WaitForHelper(ctx, cs, cfg.Helper.Namespace, helperName(f.node.Name))
					if err != nil {
						return err
					}
					h := helperOf(p)
					if h.succeeded(v) {
						return nil
					}
					rec.Record(ctx, kube.NodeRef(f.node), true, "TTSMIInstallFailed", helperError(h))
					return fmt.Errorf("%s", helperError(h))
				},
			},
			{
				ID: "tt.smi.label", Title: "Label the node with the tt-smi version",
				Doc: "Write tt-smi.driver.tenstorrent.com/version from the version the helper measured.",
				Done: func(f smiFacts) (bool, string) {
					return at(f), LabelSMIVersion + "=" + orUnknown(f.node.Labels[LabelSMIVersion])
				},
				Plan: func(f smiFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.node.Name, Action: "label", Detail: LabelSMIVersion + "=" + v}}
				},
				Act: func(ctx context.Context, f smiFacts) error {
					n, err := kube.SetNodeKeys(ctx, cs, f.node.Name, kube.NodeChange{Labels: map[string]*string{LabelSMIVersion: &f.helper.Result.After}})
					if err == nil {
						rec.Record(ctx, kube.NodeRef(n), false, "TTSMIInstalled", LabelSMIVersion+"="+f.helper.Result.After)
					}
					return err
				},
				Guards: []runbook.Guard[smiFacts]{{Name: "the helper measured the target version", Check: func(f smiFacts) (bool, string) {
					return f.helper.succeeded(v), "no successful helper result for " + v
				}}},
			},
			{
				ID: "tt.smi.cleanup", Title: "Remove the helper pod",
				Doc:  "Delete the finished helper pod.",
				Done: func(f smiFacts) (bool, string) { return at(f) && f.helper.Pod == nil, "no helper left" },
				Act: func(ctx context.Context, f smiFacts) error {
					if f.helper.Pod == nil {
						return nil
					}
					return deleteHelper(ctx, cs, rec, f.helper.Pod)
				},
			},
		},
	}
}
