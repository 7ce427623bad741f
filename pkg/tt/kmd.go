package tt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// KMDRunbookName owns the cordons and timers of tt-kmd upgrades.
const KMDRunbookName = "tt-kmd"

// KMDConfig is what `kubectl tt upgrade kmd` was asked to do.
type KMDConfig struct {
	Version string
	// Commit pins the commit the tag ttkmd-<Version> must resolve to; ""
	// pins the one the first probe sees, for the whole roll.
	Commit string
	// GitURL is the tt-kmd repository the helpers clone; "" is the
	// agent's default (upstream).
	GitURL      string
	DeployGates []string
	// Drain evicts device-holding pods (pass 1); FullNode also drains the
	// rest of the node (pass 2), limited to PodSelector when set.
	Drain        bool
	FullNode     bool
	PodSelector  labels.Selector
	DrainTimeout time.Duration
	ForceUnload  bool
	// Force evicts bare pods (no controller), as kubectl drain --force;
	// DeleteEmptyDirData and GracePeriod as kubectl drain's.
	Force              bool
	DeleteEmptyDirData bool
	GracePeriod        *int64
	Helper             HelperConfig
	RunID              string
	// MaxParallel bounds the nodes out of service at once (cordon to
	// uncordon), counted from the cluster; default 1, as the operator.
	MaxParallel int
	// MaxUnavailablePer bounds, per label key, the nodes sharing a value
	// of it that are out of service at once.
	MaxUnavailablePer map[string]int
	// Signing is the key kubectl tt signs the modules it vouches for with
	// (kernels that load only signed ones).
	Signing SigningConfig

	share *moduleShare
}

// TargetEnded tells the runbook a node's roll ended (any outcome): a
// module it was to build for its kernel group will not come from it, so
// the nodes waiting for it go on.
func (c *KMDConfig) TargetEnded(node string) {
	if c.share != nil {
		c.share.release(node)
	}
}

// HelperConfig says how helper pods are run.
type HelperConfig struct {
	Image     string
	Namespace string
	Timeout   time.Duration
	// PriorityClass of the helper pods (deploy/priorityclass.yaml).
	PriorityClass string
	// OnControlPlane lets helpers run on control-plane nodes; the admission
	// policy must allow it too (deploy/admission/helper-policy.yaml).
	OnControlPlane bool
	// NodeAccess is the label the admin requires of a helper's node
	// (the policy's parameters); empty: DefaultHelperNodeLabel.
	NodeAccess kube.NodeLabel
	// Proxy is the proxy environment (ProxyEnvNames) the helpers that
	// reach the network get: kubectl-tt's own, as git and curl read it.
	Proxy map[string]string
}

// Validate rejects bad input before any API call.
func (c *KMDConfig) Validate() error {
	if err := nodeagent.ValidateKMDVersion(c.Version); err != nil {
		return fmt.Errorf("--version: %v", err)
	}
	if err := nodeagent.ValidateCommit(c.Commit); err != nil {
		return fmt.Errorf("--kmd-commit: %v", err)
	}
	if c.GitURL != "" {
		if err := nodeagent.ValidateSourceURL(c.GitURL); err != nil {
			return fmt.Errorf("--git-url: %v", err)
		}
		if u, err := url.Parse(c.GitURL); err == nil && (u.RawQuery != "" || u.ForceQuery) {
			// It goes into the helper's argv, readable by more people than a Secret.
			return fmt.Errorf("--git-url %s: a git URL with a query string is not supported", nodeagent.RedactURL(c.GitURL))
		}
	}
	for _, g := range c.DeployGates {
		if errs := validateLabelKey(g); errs != "" {
			return fmt.Errorf("--deploy-gate %q: %s", g, errs)
		}
	}
	if c.Helper.Timeout != 0 && c.Helper.Timeout < time.Minute {
		return fmt.Errorf("--helper-timeout %s is too short: a module build takes minutes (at least 1m)", c.Helper.Timeout)
	}
	if c.MaxParallel < 0 {
		return fmt.Errorf("--max-parallel must be at least 1, not %d", c.MaxParallel)
	}
	if err := ValidateUnavailablePer(c.MaxUnavailablePer); err != nil {
		return err
	}
	if err := c.Signing.validate(); err != nil {
		return err
	}
	return c.Helper.validate()
}

// Validate rejects a helper configuration before any API call.
func (h HelperConfig) Validate() error { return h.validate() }

func (h HelperConfig) validate() error {
	if h.Image == "" {
		return errors.New(NoHelperImage())
	}
	if strings.ContainsAny(h.Image, " \t\n") {
		return fmt.Errorf("--helper-image %q is not an image reference", h.Image)
	}
	if h.Namespace == "" {
		return errors.New("--helper-namespace must not be empty")
	}
	for _, k := range ProxyEnvNames {
		if v := h.Proxy[k]; strings.Contains(v, "@") || strings.ContainsAny(v, "\n\r") {
			// The helpers' env is in their pod spec, which every viewer of
			// the helper namespace reads (and the admission policy refuses).
			return fmt.Errorf("$%s carries credentials (user:password@): the helpers that reach the network would carry them "+
				"in their pod spec, readable by anyone who may read pods in the helper namespace. Use a proxy the nodes reach "+
				"without credentials (e.g. one that authenticates by source address), or unset $%s for this run", k, k)
		}
	}
	return nil
}

// measuredKMD is the module version measured on the node by this run:
// its kmd helper's recorded result, else its probe.
func measuredKMD(n *corev1.Node, run string) (string, bool) {
	if raw, ok := n.Annotations[AnnKMDResult]; ok {
		var r kmdRecord
		if json.Unmarshal([]byte(raw), &r) == nil && r.Run == run {
			return r.After, true
		}
	}
	if p := probeRecordOf(n); p != nil && p.Run == run {
		return p.KMD, true
	}
	return "", false
}

// kmdFinished: this run measured the target version on the node and its
// label says so. A label alone (set by hand, from intent, or left from
// before a reboot into another kernel) never counts: every run measures.
// A node whose cards are gone is not done either: it is reported.
func kmdFinished(n *corev1.Node, want, run string) bool {
	if p := probeRecordOf(n); p != nil && p.Run == run && len(p.cardGone()) > 0 {
		return false
	}
	v, ok := measuredKMD(n, run)
	return ok && v == want && n.Labels[LabelKMDVersion] == want
}

func (c *KMDConfig) drainSelects(p *corev1.Pod) bool {
	return c.PodSelector == nil || c.PodSelector.Matches(labels.Set(p.Labels))
}

// kmdBlockers is what stops a probed node before its cordon: everything
// the kmd helper would fail on that the probe can know without changing
// the node.
func kmdBlockers(cfg *KMDConfig) func(f *Facts) []string {
	return func(f *Facts) []string {
		r := f.Measured
		if r == nil {
			return []string{"no probe result"}
		}
		atTarget := r.KMD == cfg.Version
		// At the target nothing is unloaded: a host holder is no obstacle.
		out := r.commonBlockers(cfg.ForceUnload || atTarget)
		if len(r.DKMS) > 0 {
			out = append(out, "tt-kmd is host-managed (DKMS) on this node: "+strings.Join(r.DKMS, "; ")+
				"; it is now labelled "+LabelInstallMode+"=host and later runs skip it")
		}
		out = append(out, r.cardGone()...)
		if atTarget {
			return out
		}
		if cfg.Drain {
			out = append(out, f.holdersThatStay(cfg.DeployGates)...)
			out = append(out, barePodBlockers(f, kmdEvicts(cfg), cfg.Force)...)
			out = append(out, localDataBlockers(f, kmdEvicts(cfg), cfg.DeleteEmptyDirData)...)
		}
		switch {
		case r.LoadRefused != "" && r.SignatureRequired:
			out = append(out, cfg.Signing.signatureBlockers(r)...) // kubectl tt signs with --signing-key
		case r.LoadRefused != "":
			out = append(out, r.LoadRefused+"; tt-kmd "+orUnknown(r.KMD)+" stays loaded")
		}
		out = append(out, otherKernelBlockers(r, cfg.Version)...)
		if f.Shared != nil {
			return out
		}
		// The node may build for its kernel group: what would stop it.
		if cfg.share == nil || !cfg.share.buildsElsewhere(f) {
			out = append(out, buildBlockers(cfg, r)...)
		}
		pin := cfg.Commit
		if cfg.share != nil {
			pin = cfg.share.pinned()
		}
		if t := r.Tag; t != nil && t.Tag == "ttkmd-"+cfg.Version { // not an earlier run's record of another version
			switch {
			case t.Error != "":
				out = append(out, fmt.Sprintf("the node cannot list tag %s at %s (%s); the build clones it from there: let the "+
					"helper namespace reach it", t.Tag, t.URL, t.Error))
			case !t.Found:
				out = append(out, fmt.Sprintf("%s has no tag %s: tt-kmd %s was never released (list them: git ls-remote --tags %s)",
					t.URL, t.Tag, cfg.Version, t.URL))
			case pin != "" && t.Commit != pin:
				out = append(out, fmt.Sprintf("tag %s of %s names commit %s, not the pinned %s: the tag moved or the repository "+
					"is not the one you pinned", t.Tag, t.URL, t.Commit, pin))
			}
		}
		return out
	}
}

// otherKernelBlockers: an installed kernel (not running) with headers the
// module cannot be built against, known before the cordon. The helper
// would only warn, but a boot into that kernel would come back without
// tt-kmd. A kernel without headers is no blocker: it is listed by the
// helper's warnings.
func otherKernelBlockers(r *ProbeRecord, version string) []string {
	var out []string
	for _, k := range r.Kernels {
		if !k.NeedsBuild() || k.Toolchain {
			continue
		}
		need := "make and gcc (build-essential)"
		if k.CC != "" {
			need = k.CC + " (named by its headers' .kernelvariables) and make"
		}
		out = append(out, fmt.Sprintf("installed kernel %s has headers but tt-kmd %s cannot be built for it: the node lacks %s, "+
			"and a boot into it would come back without tt-kmd; install them on the node, or remove linux-headers-%s to skip "+
			"that kernel", k.Release, version, need, k.Release))
	}
	return out
}

// KMDRunbook builds the tt-kmd upgrade runbook.
func KMDRunbook(cs kubernetes.Interface, rec kube.Recorder, cfg *KMDConfig) *runbook.Runbook[Facts] {
	cs = kube.RememberNodeWrites(cs)
	v := cfg.Version
	helperName := func(node string) string { return kube.HelperName("kmd", node, v) }
	obs := observer{cs: cs, owner: KMDRunbookName, helperNS: cfg.Helper.Namespace, helper: helperName,
		probe:    func(node string) string { return probeHelperName(node, cfg.RunID) },
		finished: func(n *corev1.Node) bool { return kmdFinished(n, v, cfg.RunID) }, skip: DriverSkipReason, countOut: true, run: cfg.RunID,
		daemonSets: &templateCache{}}
	if cfg.Drain {
		obs.evicts = kmdEvicts(cfg)
	}
	// preflight's pdb check, decided at the cordon: one PDB that needs a
	// person refuses; one whose pods are being replaced is waited for.
	pdb := pdbGuards(cs, "tt-kmd", cfg.Drain, kmdEvicts(cfg), cfg.DrainTimeout)
	share := newModuleShare(cs, rec, cfg)
	cfg.share = share
	obs.shared = share.read
	b := newBuilder(cs, rec, cfg.RunID, cfg.Helper)
	// The kmd helper: with the module this run vouched for the node's
	// kernel group; one an interrupted run started, as it was created.
	render := func(f Facts, existing *corev1.Pod) kube.HelperSpec {
		if existing != nil {
			return KMDHelperSpec(cfg, f.Node.Name, commitIn(existing), vouchedIn(existing))
		}
		var m *VouchedModule
		if sh := share.vouchedFor(share.key(&f)); sh != nil {
			m = &sh.VouchedModule
		}
		return KMDHelperSpec(cfg, f.Node.Name, share.pinned(), m)
	}
	blockers := kmdBlockers(cfg)
	// A node this run's probe found at the target, with nothing in the way,
	// lacks only its label: no cordon, drain or helper for that.
	labelOnly := func(s runbook.Step[Facts]) runbook.Step[Facts] {
		done := s.Done
		s.Done = func(f Facts) (bool, string) {
			if !f.ourCordon() && f.measuredFresh(cfg.RunID) && f.Measured.KMD == v && len(blockers(&f)) == 0 {
				return true, "tt-kmd " + v + " is loaded already (measured by the probe): only the label is written"
			}
			return done(f)
		}
		return s
	}
	return &runbook.Runbook[Facts]{
		Name:  KMDRunbookName,
		Title: "Upgrade (or downgrade) the Tenstorrent kernel module, tt-kmd",
		Doc: `One node at a time (or --max-parallel): probe it, wait for the module its kernel group's first node builds and
shares (one build per kernel), cordon it, make the pods that hold the device leave
(deploy-gate labels for sibling DaemonSets, then evictions), run a helper pod on the node
that swaps the module, label the node with the version the helper measured, restore the
gates and uncordon. Unlike the operator, the drain waits for the pods to be gone, and a
failed helper never crash-loops: its structured result says why. A node is done only when
the target version is measured on it, whatever its label says.`,
		Observe:      func(ctx context.Context, t runbook.Target) (Facts, error) { return obs.observe(ctx, t.Name()) },
		ObserveParts: obs.observePartsOf,
		Notes:        workNotes,
		Annotation:   annotationOf,
		// A node that stops cordoned by this runbook keeps its --max-parallel slot.
		OutOfService: func(f Facts) bool { return f.ourCordon() },
		Steps: []runbook.Step[Facts]{
			b.probe("tt.kmd.probe", kmdProbeCommand(cfg), blockers),
			share.moduleStep(b, cfg, blockers),
			// One node at a time by default, like the operator's DaemonSet rollout.
			labelOnly(b.cordon("tt.kmd.cordon", cfg.DeployGates, cordonGuards(probeClear("tt-kmd", cfg.RunID, blockers), pdb,
				append([]runbook.Guard[Facts]{outOfServiceBudget(max(cfg.MaxParallel, 1))},
					perLabelBudget(cfg.MaxUnavailablePer)...)...)...)),
			labelOnly(b.closeGates("tt.kmd.close-gates", cfg.DeployGates)),
			labelOnly(b.evictDevicePods("tt.kmd.evict-device-pods", cfg.Drain, cfg.drainFlags(), cfg.DrainTimeout,
				"tt-kmd "+v+" upgrade")),
			labelOnly(kmdDrainStep(cs, rec, cfg)),
			labelOnly(b.helperTask(task{
				id: "tt.kmd.install", title: "Swap the kernel module", name: kmdTask, key: v, render: render,
				doc: "Run the kmd helper pod on the node: it checks that nothing holds the device (with --force-unload it kills " +
					"the holders), checks the module kubectl tt vouched for (its SHA-256 and signature, given in its argv) before " +
					"anything changes, unloads tt-kmd, loads that module (from the node's cache when it holds those very bytes, " +
					"else from the shared ConfigMap), verifies " +
					"/sys/module/tenstorrent/version and that the module bound every Tenstorrent PCI device (else it restores " +
					"the previous module, and a verified restore gives the node back), and makes the module load again after " +
					"a reboot. Its measured result is " +
					"read from the pod's termination message.",
				hostPID: cfg.ForceUnload, timeout: cfg.Helper.Timeout,
				guards: []runbook.Guard[Facts]{{
					Name: "the node is cordoned by tt-kmd",
					Check: func(f Facts) (bool, string) {
						return f.ourCordon(), "the node is not cordoned by rollbook tt-kmd; a module swap needs the node out of service"
					},
				}, {
					Name: "a module is vouched for the node's kernel",
					Check: func(f Facts) (bool, string) {
						ok := f.Helper.Pod != nil || (f.Measured != nil && f.Measured.KMD == v) || share.vouchedFor(share.key(&f)) != nil
						return ok, "no module of this run is vouched for node " + f.Node.Name + "'s kernel; re-run the same command"
					},
				}},
				succeeded: func(h helperFacts) bool { return h.reached(v) },
				describe:  describeKMDResult,
				before: func(ctx context.Context, f Facts) error {
					// Never leave the old version on the label while the module changes.
					_, err := kube.SetNodeKeys(ctx, cs, f.Node.Name, kube.NodeChange{Labels: map[string]*string{LabelKMDVersion: nil}})
					return err
				},
				failed: func(ctx context.Context, f Facts, h helperFacts) error {
					return kmdFailure(ctx, cs, rec, f, h)
				},
				waiting: func(f Facts) string { return "module at " + orUnknown(f.Node.Labels[LabelKMDVersion]) },
			})),
			{
				ID: "tt.kmd.label", Title: "Label the node with the measured version",
				Reads: readNode | readPods,
				// The observation after it serves the cleanup: the gates and
				// uncordon steps between have nothing left to write (giveBack).
				DoneReads: readNode | readPods,
				Doc: "Write driver.tenstorrent.com/kmd-version from what was measured in /sys/module (never the intent) and " +
					"install-mode=container, and keep the measurement in an annotation. The same write reopens the deploy " +
					"gates and lifts the cordon (the next two steps), so those have nothing left to write.",
				Done: func(f Facts) (bool, string) {
					return f.Finished, LabelKMDVersion + "=" + orUnknown(f.Node.Labels[LabelKMDVersion])
				},
				Guards: []runbook.Guard[Facts]{{
					Name: "the target version was measured",
					Check: func(f Facts) (bool, string) {
						m, _ := measuredKMD(f.Node, cfg.RunID)
						return f.Helper.reached(v) || m == v, "no measurement of " + v + " on the node"
					},
				}},
				Plan: func(f Facts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "label",
						Detail: LabelKMDVersion + "=" + v + ", " + LabelInstallMode + "=container"}}
				},
				Act: func(ctx context.Context, f Facts) error {
					if f.Helper.reached(v) {
						change, msg := kmdResultChange(f.Node, f.Helper.Result, cfg.RunID)
						return giveBack(ctx, cs, rec, f.Node, f.Owner, change, "KMDUpgraded", msg, obs.finished)
					}
					mode := InstallModeContainer
					return giveBack(ctx, cs, rec, f.Node, f.Owner, kube.NodeChange{
						Labels:      map[string]*string{LabelKMDVersion: &v, LabelInstallMode: &mode},
						Annotations: withClockTakenAlong(f.Node, KMDRunbookName, nil)}, "", "", obs.finished)
				},
			},
			b.openGates("tt.kmd.open-gates"),
			b.uncordon("tt.kmd.uncordon"),
			b.cleanup("tt.kmd.cleanup", helperName, kmdBuildTask),
		},
	}
}

// probeClear guards a cordon: this run probed the node and found nothing
// that would make the task fail.
func probeClear(rb, run string, blockers func(*Facts) []string) runbook.Guard[Facts] {
	return runbook.Guard[Facts]{
		Name: "the probe found nothing in the way",
		Check: func(f Facts) (bool, string) {
			if !f.measuredFresh(run) {
				return false, "the node was not probed by this run"
			}
			bl := blockers(&f)
			return len(bl) == 0, fmt.Sprintf("%s will not take node %s out of service: %s", rb, f.Node.Name, strings.Join(bl, "; "))
		},
	}
}

func kmdDrainStep(cs kubernetes.Interface, rec kube.Recorder, cfg *KMDConfig) runbook.Step[Facts] {
	return runbook.Step[Facts]{
		ID: "tt.kmd.drain", Title: "Drain the rest of the node", Reads: readNode | readPods,
		Doc: "With --full-node (the default), evict every other pod kubectl drain would (DaemonSet pods stay), optionally " +
			"only those matching --pod-selector, and wait until they are gone.",
		Timeout: cfg.DrainTimeout,
		Done: func(f Facts) (bool, string) {
			if f.Finished || !cfg.Drain || !cfg.FullNode {
				return true, "not requested"
			}
			var left []corev1.Pod
			for _, p := range f.Pods {
				if kube.Evictable(&p) && cfg.drainSelects(&p) {
					left = append(left, p)
				}
			}
			if len(left) == 0 {
				return f.ourCordon(), "node drained"
			}
			return false, fmt.Sprintf("%d pod(s) to evict: %s", len(left), podNames(left))
		},
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "drain", Detail: "every non-DaemonSet pod"}}
		},
		Act: func(ctx context.Context, f Facts) error {
			return blockedIfDrain(kube.Drain(ctx, cs, rec, f.Node.Name, kube.DrainOptions{
				PodFilter: cfg.drainSelects, Why: "tt-kmd " + cfg.Version + " upgrade (full-node drain)",
				Timeout: remaining(ctx, cfg.DrainTimeout), Force: cfg.Force, DeleteEmptyDirData: cfg.DeleteEmptyDirData,
				GracePeriodSeconds: cfg.GracePeriod, Pods: f.Pods,
			}))
		},
	}
}

// helperWorkTimeout is the agent's deadline in a helper pod of deadline t:
// 30s earlier, to write its result.
func helperWorkTimeout(t time.Duration) time.Duration { return t - 30*time.Second }

func kmdProbeCommand(cfg *KMDConfig) []string {
	// The tag is looked up where the build clones.
	return agentCommand("probe", "--kmd-version", cfg.Version, "--git-url", cfg.gitURL())
}

// gitURL is the repository the helpers clone: always named in their
// command, so the admission policy checks it against the admin's list.
func (c *KMDConfig) gitURL() string {
	if c.GitURL == "" {
		return nodeagent.DefaultKMDGitURL
	}
	return c.GitURL
}

// commitIn is the --commit a kmd helper pod was created with.
func commitIn(p *corev1.Pod) string {
	if p == nil || len(p.Spec.Containers) == 0 {
		return ""
	}
	cmd := p.Spec.Containers[0].Command
	for i := 0; i+1 < len(cmd); i++ {
		if cmd[i] == "--commit" {
			return cmd[i+1]
		}
	}
	return ""
}

// kmdFailure turns a failed helper into a clear error: device holders and
// missing kernel headers need a person (blocked); the rest failed.
func kmdFailure(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, f Facts, h helperFacts) error {
	if h.Result == nil {
		return fmt.Errorf("helper %s failed without a result: %s", h.Pod.Name, h.ResultErr)
	}
	r := h.Result
	// Record what is really loaded now; the label must never lie.
	if r.After != "" {
		_, _ = kube.SetNodeKeys(ctx, cs, f.Node.Name, kube.NodeChange{Labels: map[string]*string{LabelKMDVersion: &r.After}})
	}
	rec.Record(ctx, kube.NodeRef(f.Node), true, "KMDUpgradeFailed", helperError(h))
	msg := fmt.Errorf("%s", helperError(h))
	if r.Error == nil {
		return msg
	}
	switch r.Error.Reason {
	case nodeagent.ReasonDeviceInUse, nodeagent.ReasonHoldersRemain:
		pods, _ := kube.PodsOnNode(ctx, cs, f.Node.Name)
		return runbook.Blocked(fmt.Errorf("%s\n%s\nStop those processes or drain their pods, "+
			"or re-run with --force-unload to kill them (their in-flight work is lost)",
			helperError(h), describeHolders(r.Holders, pods)))
	case nodeagent.ReasonNoKernelHeaders, nodeagent.ReasonHostManaged:
		return runbook.Blocked(msg)
	case nodeagent.ReasonDevicesUnbound:
		if r.Restored != "" && r.After == r.Restored {
			// The helper put the previous module back and verified it serves
			// the cards it served: the node is as before, so give it back.
			// It still failed; the run says so.
			return restoredNode(ctx, cs, rec, f, msg)
		}
	}
	return msg
}

// heldHow says how a holder holds the device when not by an open fd: from
// tt-kmd 2.10 a dma-buf or a mapping keeps it busy after close().
func heldHow(h nodeagent.Holder) string {
	switch h.Via {
	case nodeagent.HeldByDmaBuf:
		return ", through a tenstorrent dma-buf"
	case nodeagent.HeldByMmap:
		return ", through an mmap of the device"
	}
	return ""
}

// restoredNode reopens the deploy gates and lifts our cordon of a node the
// kmd helper restored to its previous, verified module, then returns err.
func restoredNode(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, f Facts, err error) error {
	if gerr := openGates(ctx, cs, rec, f.Node); gerr != nil {
		return fmt.Errorf("%w; reopening the deploy gates failed, the node stays cordoned: %v", err, gerr)
	}
	n, gerr := cs.CoreV1().Nodes().Get(ctx, f.Node.Name, metav1.GetOptions{})
	if gerr == nil {
		_, gerr = kube.UncordonNode(ctx, cs, rec, n, KMDRunbookName)
	}
	if gerr != nil {
		return fmt.Errorf("%w; uncordon failed, the node stays cordoned: %v", err, gerr)
	}
	// Not half-way any more: nothing for cleanup or a re-run to resume.
	if _, gerr := kube.SetNodeKeys(ctx, cs, f.Node.Name, kube.NodeChange{
		Annotations: map[string]*string{runbook.TimerKey(KMDRunbookName): nil}}); gerr != nil {
		return fmt.Errorf("%w; uncordoned, but its step clock stays: %v", err, gerr)
	}
	return fmt.Errorf("%w (previous module restored: node uncordoned, deploy gates reopened)", err)
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
		lines = append(lines, fmt.Sprintf("  holder pid %d (%s%s): %s", h.PID, h.Comm, heldHow(h), owner))
	}
	return strings.Join(lines, "\n")
}

func describeKMDResult(r *nodeagent.Result) string {
	s := fmt.Sprintf("helper measured %s (was %s", r.After, orUnknown(r.Before))
	if r.Commit != "" {
		s += ", commit " + r.Commit[:12]
	}
	if m := r.Module; m != nil && m.SHA256 != "" {
		s += ", module " + short(m.SHA256) + "… built by " + orUnknown(m.BuiltBy)
		if r.CacheHit != nil && *r.CacheHit {
			s += ", from the node's cache"
		}
	}
	s += ")"
	if !r.Persisted {
		// The driver runs, but a reboot would come back without it: say so
		// on the node's event and in the step's line.
		s += "; NOT reboot-persistent"
	}
	if len(r.PersistedKernels) > 1 {
		s += "; boots with it on kernels " + strings.Join(r.PersistedKernels, ", ")
	}
	if len(r.Warnings) > 0 {
		s += "; helper warnings: " + strings.Join(r.Warnings, "; ")
	}
	return s
}

// kmdRecord is the compact result kept on the node.
type kmdRecord struct {
	Before   string `json:"before,omitempty"`
	After    string `json:"after"`
	Kernel   string `json:"kernel,omitempty"`
	Commit   string `json:"commit,omitempty"`
	CacheHit *bool  `json:"cacheHit,omitempty"`
	// Module is the SHA-256 of the module loaded (the one kubectl tt
	// vouched for), BuiltBy the node that built it.
	Module    string `json:"module,omitempty"`
	BuiltBy   string `json:"builtBy,omitempty"`
	Persisted bool   `json:"persisted"`
	// Kernels are those whose boot loads After (the running one when
	// persisted, and the other installed kernels built for): status
	// compares them with the kernel the node reports.
	Kernels  []string `json:"kernels,omitempty"`
	Duration int64    `json:"durationMs"`
	Run      string   `json:"run"`
	At       string   `json:"at"`
}

// kmdResultChange is the write that records helper result r on node, and
// the KMDUpgraded Event's message.
func kmdResultChange(node *corev1.Node, r *nodeagent.Result, run string) (kube.NodeChange, string) {
	mode := r.InstallMode
	if mode == "" {
		mode = InstallModeContainer
	}
	rec := kmdRecord{Before: r.Before, After: r.After, Kernel: r.Kernel, Commit: r.Commit, CacheHit: r.CacheHit,
		Persisted: r.Persisted, Kernels: r.PersistedKernels, Duration: r.DurationMS, Run: run,
		At: kube.ServerNow().UTC().Format(time.RFC3339)}
	if m := r.Module; m != nil {
		rec.Module, rec.BuiltBy = m.SHA256, m.BuiltBy
	}
	b, _ := json.Marshal(rec)
	return kube.NodeChange{
		Labels:      map[string]*string{LabelKMDVersion: &r.After, LabelInstallMode: &mode},
		Annotations: withClockTakenAlong(node, KMDRunbookName, map[string]*string{AnnKMDResult: ptr.To(string(b))}),
	}, fmt.Sprintf("%s=%s (%s)", LabelKMDVersion, r.After, describeKMDResult(r))
}

func (c *KMDConfig) drainFlags() drainFlags {
	return drainFlags{force: c.Force, deleteEmptyDirData: c.DeleteEmptyDirData, gracePeriod: c.GracePeriod}
}
