package tt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// KMDRunbookName owns the cordons and timers of tt-kmd upgrades.
const KMDRunbookName = "tt-kmd"

// KMDConfig is what `kubectl tt upgrade kmd` was asked to do.
type KMDConfig struct {
	Version     string
	DeployGates []string
	// Drain evicts device-holding pods (pass 1); FullNode also drains the
	// rest of the node (pass 2), limited to PodSelector when set.
	Drain        bool
	FullNode     bool
	PodSelector  labels.Selector
	DrainTimeout time.Duration
	ForceUnload  bool
	Helper       HelperConfig
	RunID        string
}

// HelperConfig says how helper pods are run.
type HelperConfig struct {
	Image     string
	Namespace string
	Timeout   time.Duration
}

// Validate rejects bad input before any API call.
func (c *KMDConfig) Validate() error {
	if err := nodeagent.ValidateVersion(c.Version); err != nil {
		return fmt.Errorf("--version: %v", err)
	}
	for _, g := range c.DeployGates {
		if errs := validateLabelKey(g); errs != "" {
			return fmt.Errorf("--deploy-gate %q: %s", g, errs)
		}
	}
	return c.Helper.validate()
}

func (h HelperConfig) validate() error {
	if h.Image == "" || strings.ContainsAny(h.Image, " \t\n") {
		return fmt.Errorf("--helper-image %q is not an image reference", h.Image)
	}
	if h.Namespace == "" {
		return errors.New("--helper-namespace must not be empty")
	}
	return nil
}

// kmdFacts is everything the kmd steps decide on for one node.
type kmdFacts struct {
	work
	cfg *KMDConfig
}

func (f kmdFacts) base() *work { return &f.work }

// finished: the node is labelled with the target version, measured.
func (f kmdFacts) finished() bool { return f.node.Labels[LabelKMDVersion] == f.cfg.Version }

func (f kmdFacts) drainPods() []corev1.Pod {
	var out []corev1.Pod
	for _, p := range f.pods {
		if kube.Evictable(&p) && f.drainSelects(&p) {
			out = append(out, p)
		}
	}
	return out
}

func (f kmdFacts) drainSelects(p *corev1.Pod) bool {
	return f.cfg.PodSelector == nil || f.cfg.PodSelector.Matches(labels.Set(p.Labels))
}

func podNames(pods []corev1.Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Namespace+"/"+p.Name)
	}
	sort.Strings(n)
	if len(n) > 5 {
		n = append(n[:5], fmt.Sprintf("and %d more", len(n)-5))
	}
	return strings.Join(n, ", ")
}

// KMDRunbook builds the tt-kmd upgrade runbook.
func KMDRunbook(cs kubernetes.Interface, rec kube.Recorder, cfg *KMDConfig) *runbook.Runbook[kmdFacts] {
	helperName := func(node string) string { return kube.HelperName("kmd", node, cfg.Version) }
	v := cfg.Version
	return &runbook.Runbook[kmdFacts]{
		Name:  KMDRunbookName,
		Title: "Upgrade (or downgrade) the Tenstorrent kernel module, tt-kmd",
		Doc: `One node at a time: cordon it, make the pods that hold /dev/tenstorrent leave
(deploy-gate labels for sibling DaemonSets, then evictions), run a helper pod on the node
that swaps the module, label the node with the version the helper measured, restore the
gates and uncordon. Unlike the operator, the drain waits for the pods to be gone, and a
failed helper never crash-loops: its structured result says why.`,
		Observe: func(ctx context.Context, t runbook.Target) (kmdFacts, error) {
			name := strings.TrimPrefix(t.Name(), "node/")
			w, err := observeWork(ctx, cs, KMDRunbookName, name, cfg.Helper.Namespace, helperName(name),
				func(n *corev1.Node) bool { return n.Labels[LabelKMDVersion] == cfg.Version })
			return kmdFacts{work: w, cfg: cfg}, err
		},
		Notes:      func(f kmdFacts) []string { return workNotes(&f.work) },
		Annotation: func(f kmdFacts, key string) (string, bool) { v, ok := f.node.Annotations[key]; return v, ok },
		Steps: []runbook.Step[kmdFacts]{
			cordonStep[kmdFacts]("tt.kmd.cordon", cs, rec, cfg.RunID),
			closeGatesStep[kmdFacts]("tt.kmd.close-gates", cfg.DeployGates, cs, rec),
			evictDevicePodsStep[kmdFacts]("tt.kmd.evict-device-pods", cfg.Drain, cfg.DrainTimeout, "tt-kmd "+v+" upgrade", cs, rec),
			{
				ID: "tt.kmd.drain", Title: "Drain the rest of the node",
				Doc:     "With --full-node (the default), evict every other pod kubectl drain would (DaemonSet pods stay), optionally only those matching --pod-selector, and wait until they are gone.",
				Timeout: cfg.DrainTimeout,
				Done: func(f kmdFacts) (bool, string) {
					if f.finished() || !cfg.Drain || !cfg.FullNode {
						return true, "not requested"
					}
					left := f.drainPods()
					if len(left) == 0 {
						return f.ourCordon(), "node drained"
					}
					return false, fmt.Sprintf("%d pod(s) to evict: %s", len(left), podNames(left))
				},
				Plan: func(f kmdFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.node.Name, Action: "drain", Detail: "every non-DaemonSet pod"}}
				},
				Act: func(ctx context.Context, f kmdFacts) error {
					return blockedIfDrain(kube.Drain(ctx, cs, rec, f.node.Name, kube.DrainOptions{
						PodFilter: f.drainSelects, Why: "tt-kmd " + v + " upgrade (full-node drain)",
						Timeout: remaining(ctx, cfg.DrainTimeout),
					}))
				},
			},
			{
				ID: "tt.kmd.install", Title: "Swap the kernel module",
				Doc:     "Run the kmd helper pod on the node: it checks that nothing holds the device (with --force-unload it kills the holders), unloads tt-kmd, loads the target version from the node's module cache or builds it, verifies /sys/module/tenstorrent/version and makes the module load again after a reboot. Its measured result is read from the pod's termination message.",
				Timeout: cfg.Helper.Timeout,
				Done: func(f kmdFacts) (bool, string) {
					switch {
					case f.finished():
						return true, "node labelled " + v
					case f.helper.succeeded(v):
						return true, describeKMDResult(f.helper.Result)
					case f.helper.finished():
						return false, "last helper failed: " + helperError(f.helper)
					case f.helper.Pod != nil:
						return false, "helper " + f.helper.Pod.Name + " is " + string(f.helper.Pod.Status.Phase)
					}
					return false, "module at " + orUnknown(f.node.Labels[LabelKMDVersion])
				},
				Guards: []runbook.Guard[kmdFacts]{{
					Name: "the node is cordoned by tt-kmd",
					Check: func(f kmdFacts) (bool, string) {
						return f.ourCordon(), "the node is not cordoned by rollbook tt-kmd; a module swap needs the node out of service"
					},
				}},
				Plan: func(f kmdFacts) []runbook.Change {
					return []runbook.Change{
						{Object: "pod/" + cfg.Helper.Namespace + "/" + helperName(f.node.Name), Action: "create", Detail: "kubectl-tt node-agent kmd --version " + v},
						{Object: "node/" + f.node.Name, Action: "unlabel", Detail: LabelKMDVersion + " (unknown while the module changes)"},
					}
				},
				Act: func(ctx context.Context, f kmdFacts) error {
					if f.helper.finished() {
						// A failed earlier attempt: replace it with a fresh one.
						if err := deleteHelper(ctx, cs, rec, f.helper.Pod); err != nil {
							return err
						}
					}
					// Never leave the old version on the label while the module changes.
					if _, err := kube.SetNodeKeys(ctx, cs, f.node.Name, kube.NodeChange{Labels: map[string]*string{LabelKMDVersion: nil}}); err != nil {
						return err
					}
					_, _, err := kube.EnsureHelper(ctx, cs, rec, kmdHelperSpec(cfg, f.node.Name))
					return err
				},
				Wait: func(ctx context.Context, f kmdFacts) error {
					p, err := kube.WaitForHelper(ctx, cs, cfg.Helper.Namespace, helperName(f.node.Name))
					if err != nil {
						return err
					}
					h := helperOf(p)
					if h.succeeded(v) {
						return nil
					}
					return kmdFailure(ctx, cs, rec, f, h)
				},
			},
			{
				ID: "tt.kmd.label", Title: "Label the node with the measured version",
				Doc: "Write driver.tenstorrent.com/kmd-version from what the helper measured in /sys/module (never the intent) and install-mode=container, and keep the helper's result in an annotation.",
				Done: func(f kmdFacts) (bool, string) {
					return f.finished(), LabelKMDVersion + "=" + orUnknown(f.node.Labels[LabelKMDVersion])
				},
				Guards: []runbook.Guard[kmdFacts]{{
					Name: "the helper measured the target version",
					Check: func(f kmdFacts) (bool, string) {
						return f.helper.succeeded(v), "no successful helper result for " + v
					},
				}},
				Plan: func(f kmdFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.node.Name, Action: "label", Detail: LabelKMDVersion + "=" + v + ", " + LabelInstallMode + "=container"}}
				},
				Act: func(ctx context.Context, f kmdFacts) error {
					return recordKMDResult(ctx, cs, rec, f.node, f.helper.Result, cfg.RunID)
				},
			},
			openGatesStep[kmdFacts]("tt.kmd.open-gates", cs, rec),
			uncordonStep[kmdFacts]("tt.kmd.uncordon", cs, rec),
			cleanupStep[kmdFacts]("tt.kmd.cleanup", cfg.Helper.Namespace, helperName, cs, rec),
		},
	}
}

func kmdHelperSpec(cfg *KMDConfig, node string) kube.HelperSpec {
	cmd := []string{"kubectl-tt", "node-agent", "kmd", "--version", cfg.Version}
	if cfg.ForceUnload {
		cmd = append(cmd, "--force-unload")
	}
	return helperSpec(cfg.Helper, "kmd", node, cfg.Version, cmd, cfg.ForceUnload, cfg.RunID)
}

func helperSpec(h HelperConfig, task, node, key string, cmd []string, hostPID bool, run string) kube.HelperSpec {
	s := kube.HelperSpec{
		Task: task, Node: node, Key: key, Namespace: h.Namespace, Image: h.Image, Command: cmd,
		Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		Deadline: h.Timeout, Privileged: true, HostPID: hostPID, RunID: run,
		HostPaths: []kube.HostPathMount{{Name: "host", HostPath: "/", MountPath: "/host"}},
	}
	if h.Namespace == metav1.NamespaceSystem {
		s.PriorityClass = "system-node-critical"
	}
	return s
}

func deleteHelper(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, p *corev1.Pod) error {
	err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete helper %s/%s: %w", p.Namespace, p.Name, err)
	}
	rec.Record(ctx, kube.PodRef(p), false, "HelperDeleted", "deleted finished helper pod")
	return kube.WaitForPodGone(ctx, cs, p.Namespace, p.Name)
}

// kmdFailure turns a failed helper into a clear error: device holders and
// missing kernel headers need a person (blocked); the rest failed.
func kmdFailure(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, f kmdFacts, h helperFacts) error {
	if h.Result == nil {
		return fmt.Errorf("helper %s failed without a result: %s", h.Pod.Name, h.ResultErr)
	}
	r := h.Result
	// Record what is really loaded now; the label must never lie.
	if r.After != "" {
		_, _ = kube.SetNodeKeys(ctx, cs, f.node.Name, kube.NodeChange{Labels: map[string]*string{LabelKMDVersion: &r.After}})
	}
	rec.Record(ctx, kube.NodeRef(f.node), true, "KMDUpgradeFailed", helperError(h))
	msg := fmt.Errorf("%s", helperError(h))
	if r.Error == nil {
		return msg
	}
	switch r.Error.Reason {
	case nodeagent.ReasonDeviceInUse, nodeagent.ReasonHoldersRemain:
		pods, _ := kube.PodsOnNode(ctx, cs, f.node.Name)
		return runbook.Blocked(fmt.Errorf("%s\n%s\nStop those processes or drain their pods, or re-run with --force-unload to kill them (their in-flight work is lost)",
			helperError(h), describeHolders(r.Holders, pods)))
	case nodeagent.ReasonNoKernelHeaders, nodeagent.ReasonHostManaged:
		return runbook.Blocked(msg)
	}
	return msg
}

func describeHolders(holders []nodeagent.Holder, pods []corev1.Pod) string {
	byUID := map[string]string{}
	for _, p := range pods {
		byUID[string(p.UID)] = p.Namespace + "/" + p.Name
	}
	var lines []string
	for _, h := range holders {
		owner := "a host process (no pod)"
		if h.PodUID != "" {
			owner = "pod uid " + h.PodUID
			if n, ok := byUID[h.PodUID]; ok {
				owner = "pod " + n
			}
		}
		lines = append(lines, fmt.Sprintf("  holder pid %d (%s): %s", h.PID, h.Comm, owner))
	}
	return strings.Join(lines, "\n")
}

func helperError(h helperFacts) string {
	if h.Result == nil {
		return h.ResultErr
	}
	if h.Result.Error != nil {
		return fmt.Sprintf("%s: %s", h.Result.Error.Reason, h.Result.Error.Message)
	}
	return fmt.Sprintf("helper reported %s, want %s", orUnknown(h.Result.After), h.Result.Target)
}

func describeKMDResult(r *nodeagent.Result) string {
	s := fmt.Sprintf("helper measured %s (was %s", r.After, orUnknown(r.Before))
	if r.CacheHit != nil {
		s += map[bool]string{true: ", module cache hit", false: ", built from source"}[*r.CacheHit]
	}
	return s + ")"
}

// kmdRecord is the compact result kept on the node.
type kmdRecord struct {
	Before    string `json:"before,omitempty"`
	After     string `json:"after"`
	Kernel    string `json:"kernel,omitempty"`
	CacheHit  *bool  `json:"cacheHit,omitempty"`
	Persisted bool   `json:"persisted"`
	Duration  int64  `json:"durationMs"`
	Run       string `json:"run"`
	At        string `json:"at"`
}

func recordKMDResult(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, node *corev1.Node, r *nodeagent.Result, run string) error {
	mode := r.InstallMode
	if mode == "" {
		mode = InstallModeContainer
	}
	b, _ := json.Marshal(kmdRecord{Before: r.Before, After: r.After, Kernel: r.Kernel, CacheHit: r.CacheHit,
		Persisted: r.Persisted, Duration: r.DurationMS, Run: run, At: time.Now().UTC().Format(time.RFC3339)})
	n, err := kube.SetNodeKeys(ctx, cs, node.Name, kube.NodeChange{
		Labels:      map[string]*string{LabelKMDVersion: &r.After, LabelInstallMode: &mode},
		Annotations: map[string]*string{AnnKMDResult: ptr.To(string(b))},
	})
	if err != nil {
		return err
	}
	rec.Record(ctx, kube.NodeRef(n), false, "KMDUpgraded", fmt.Sprintf("%s=%s (%s)", LabelKMDVersion, r.After, describeKMDResult(r)))
	return nil
}

func blockedIfDrain(err error) error {
	var de *kube.DrainError
	if errors.As(err, &de) {
		return runbook.Blocked(err)
	}
	return err
}

// remaining is what is left of the step's budget (the context deadline).
func remaining(ctx context.Context, fallback time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if r := time.Until(d); r > 0 {
			return r
		}
		return time.Second
	}
	if fallback == 0 {
		return 10 * time.Minute
	}
	return fallback
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
