package tt

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// KMDRunbookName owns the cordons and timers of tt-kmd upgrades.
const KMDRunbookName = "tt-kmd"

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
		out = append(out, r.cardsNotServing()...)
		if atTarget {
			return append(out, loadedCommitBlockers(cfg, r)...)
		}
		out = append(out, r.undriven(cfg.Version)...)
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

// loadedCommitBlockers: with --kmd-commit, a node at the version is only
// labelled when the build it runs is the pinned commit's. The loaded
// module's srcversion names its sources; the node's module cache says
// which commit each build it holds came from. A build of the version from
// other sources, or one rollbook did not make on the node, is refused
// with the way on: the label would vouch for a commit that may not run.
func loadedCommitBlockers(cfg *KMDConfig, r *ProbeRecord) []string {
	pin := cfg.Commit
	switch {
	case pin == "" || r.LoadedCommit == pin:
		return nil
	case r.LoadedCommit != "":
		return []string{fmt.Sprintf("tt-kmd %s is loaded, built from commit %s (srcversion %s, in the node's module cache), "+
			"not --kmd-commit %s: labelling it would vouch for another build; to load the pinned build, roll the node to "+
			"another version and back, or leave out --kmd-commit to label the build it runs", r.KMD, r.LoadedCommit,
			orUnknown(r.LoadedSrcVersion), pin)}
	default:
		return []string{fmt.Sprintf("tt-kmd %s is loaded, but no build in the node's module cache has its sources "+
			"(srcversion %s): it was built elsewhere (the operator, by hand) and its commit is unknown, so --kmd-commit %s "+
			"cannot be checked; leave out --kmd-commit to label the build it runs, or roll the node to another version "+
			"and back to load the pinned build", r.KMD, orUnknown(r.LoadedSrcVersion), pin)}
	}
}

// pinHolds: this run's probe found no loaded build of the version that
// --kmd-commit refuses (a labelled node is not done on its label alone).
func pinHolds(cfg *KMDConfig, n *corev1.Node) bool {
	p := probeRecordOf(n)
	return cfg.Commit == "" || p == nil || p.Run != cfg.RunID || p.KMD != cfg.Version || len(loadedCommitBlockers(cfg, p)) == 0
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
			need = k.CC + " (the compiler its headers say the kernel was built with) and make"
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
		finished: func(n *corev1.Node) bool { return kmdFinished(n, v, cfg.RunID) && pinHolds(cfg, n) }, skip: DriverSkipReason,
		countOut: true, run: cfg.RunID,
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
	blockers := kmdBlockers(cfg)
	// A node this run found at the target, with nothing in the way, whose
	// other installed kernels lack the target: its kmd helper runs without
	// a cordon, given no vouched module (kernelsToPersist says why).
	persistOnly := func(f *Facts) bool {
		return !f.ourCordon() && f.measuredFresh(cfg.RunID) && f.Measured.KMD == v && len(blockers(f)) == 0 &&
			len(f.Measured.kernelsToPersist(v)) > 0
	}
	// The kmd helper: with the module this run vouched for the node's
	// kernel group; one an interrupted run started, as it was created.
	render := func(f Facts, existing *corev1.Pod) kube.HelperSpec {
		if existing != nil {
			return KMDHelperSpec(cfg, f.Node.Name, commitIn(existing), vouchedIn(existing))
		}
		var m *VouchedModule
		if sh := share.vouchedFor(share.key(&f)); sh != nil && !persistOnly(&f) {
			m = &sh.VouchedModule // never on a node in service: without it the helper swaps nothing
		}
		return KMDHelperSpec(cfg, f.Node.Name, share.pinned(), m)
	}
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
	persistOrLabelOnly := func(s runbook.Step[Facts]) runbook.Step[Facts] {
		done := labelOnly(s).Done
		helperDone := s.Done
		s.Done = func(f Facts) (bool, string) {
			if persistOnly(&f) {
				if ok, why := helperDone(f); ok || f.Helper.Pod != nil {
					return ok, why
				}
				return false, "tt-kmd " + v + " is loaded; its helper persists it for installed kernel(s) " +
					strings.Join(f.Measured.kernelsToPersist(v), ", ") + " without a cordon (the loaded module stays)"
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
			persistOrLabelOnly(kmdInstallStep(b, cs, rec, cfg, share, render, persistOnly)),
			kmdLabelStep(cs, rec, cfg, obs.finished),
			b.openGates("tt.kmd.open-gates"),
			b.uncordon("tt.kmd.uncordon"),
			b.cleanup("tt.kmd.cleanup", helperName, kmdBuildTask),
		},
	}
}

// kmdInstallStep runs the kmd helper pod that swaps the module, with the
// module this run vouched for (render).
func kmdInstallStep(b *builder, cs kubernetes.Interface, rec kube.Recorder, cfg *KMDConfig, share *moduleShare,
	render func(f Facts, existing *corev1.Pod) kube.HelperSpec, persistOnly func(*Facts) bool,
) runbook.Step[Facts] {
	v := cfg.Version
	return b.helperTask(task{
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
			Name: "the node is cordoned by tt-kmd, or its helper only persists the loaded version for other kernels",
			Check: func(f Facts) (bool, string) {
				return f.ourCordon() || persistOnly(&f), "the node is not cordoned by rollbook tt-kmd; a module swap needs the " +
					"node out of service"
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
			if !f.ourCordon() {
				return nil // persisting for other kernels: the loaded module stays, and so does its label
			}
			// Never leave the old version on the label while the module changes.
			_, err := kube.SetNodeKeys(ctx, cs, f.Node.Name, kube.NodeChange{Labels: map[string]*string{LabelKMDVersion: nil}})
			return err
		},
		failed: func(ctx context.Context, f Facts, h helperFacts) error {
			return kmdFailure(ctx, cs, rec, f, h)
		},
		waiting: func(f Facts) string { return "module at " + orUnknown(f.Node.Labels[LabelKMDVersion]) },
	})
}

// kmdLabelStep writes the version the helper measured (never the intent);
// the same write gives the node back (finished says when it has).
func kmdLabelStep(cs kubernetes.Interface, rec kube.Recorder, cfg *KMDConfig, finished func(*corev1.Node) bool) runbook.Step[Facts] {
	v := cfg.Version
	return runbook.Step[Facts]{
		ID: "tt.kmd.label", Title: "Label the node with the measured version",
		Reads: readNode | readPods,
		// The observation after it serves the cleanup: the gates and
		// uncordon steps between have nothing left to write (giveBack).
		// The helper pods the cleanup deletes are as the swap left them:
		// the node's write is the observation, with no pod list.
		DoneReads: readNode | readPods, Unchanged: readPods,
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
				return giveBack(ctx, cs, rec, f.Node, f.Owner, change, "KMDUpgraded", msg, finished)
			}
			mode := InstallModeContainer
			return giveBack(ctx, cs, rec, f.Node, f.Owner, kube.NodeChange{
				Labels:      map[string]*string{LabelKMDVersion: &v, LabelInstallMode: &mode},
				Annotations: withClockTakenAlong(f.Node, KMDRunbookName, nil)}, "", "", finished)
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
