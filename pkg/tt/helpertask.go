package tt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// A helper pod's task on a node, from its start to its result, and the
// deletion of helpers that ended.

// task is one helper-pod step: kmd, smi and firmware differ only in these.
type task struct {
	id, title, doc string
	name           string // helper task label, e.g. "kmd"
	key            string // what distinguishes runs (version, forced campaign)
	command        []string
	env            []corev1.EnvVar // added to the helper's env (a Secret's key)
	hostPID        bool
	timeout        time.Duration
	guards         []runbook.Guard[Facts]
	// render, when set, is the helper the node's pod must be (kmd: its
	// argv and volumes depend on the node's vouched module), in place of
	// command, env and hostPID; existing is a pod an earlier attempt made.
	render func(f Facts, existing *corev1.Pod) kube.HelperSpec
	// succeeded decides a finished helper's result; describe shows it.
	succeeded func(h helperFacts) bool
	describe  func(r *nodeagent.Result) string
	// before runs ahead of creating the helper (e.g. unlabel).
	before func(ctx context.Context, f Facts) error
	// failed turns a finished, unsuccessful helper into the step's error.
	failed func(ctx context.Context, f Facts, h helperFacts) error
	// waiting is the evidence while no helper has run yet.
	waiting func(f Facts) string
	// after runs once a helper succeeded.
	after func(ctx context.Context, f Facts, h helperFacts)
}

// helperTask is the one helper-pod step kmd, smi and firmware share:
// replace a failed helper, start a fresh one, wait for it (noticing a
// helper that cannot start within seconds) and read its measured result.
func (b *builder) helperTask(t task) runbook.Step[Facts] {
	name := func(node string) string { return kube.HelperName(t.name, node, t.key) }
	// spec is the helper the node's pod must be: the one an earlier
	// attempt created (adopted as it was made), or the one created now.
	spec := func(f Facts, existing *corev1.Pod) kube.HelperSpec {
		if t.render != nil {
			return t.render(f, existing)
		}
		s := helperSpec(b.helper, t.name, f.Node.Name, t.key, t.command, t.hostPID, b.run)
		s.Env = append(s.Env, t.env...)
		return s
	}
	return runbook.Step[Facts]{
		ID: t.id, Title: t.title, Doc: t.doc, Timeout: t.timeout, Guards: t.guards,
		Reads: readNode | readPods,
		Done: func(f Facts) (bool, string) {
			switch h := trusted(f.Helper, spec(f, f.Helper.Pod)); {
			case f.Finished:
				return true, "measured at the target"
			case h.finished() && t.succeeded(h):
				return true, t.describe(h.Result)
			case h.finished():
				return false, "last helper failed: " + helperError(h)
			case h.Pod != nil && h.ResultErr != "": // not our spec
				return false, h.ResultErr
			case h.Pod != nil:
				return false, "helper " + h.Pod.Name + " is " + string(h.Pod.Status.Phase)
			}
			return false, t.waiting(f)
		},
		Plan: func(f Facts) []runbook.Change {
			return []runbook.Change{{Object: "pod/" + b.helperNS + "/" + name(f.Node.Name), Action: "create",
				Detail: strings.Join(spec(f, nil).Command[1:], " ")}}
		},
		Act: func(ctx context.Context, f Facts) error {
			existing := f.Helper.Pod // one still running (an interrupted run's) is adopted as it was created
			if f.Helper.finished() { // a failed earlier attempt: replace it
				if err := deleteHelper(ctx, b.cs, b.rec, f.Helper.Pod); err != nil {
					return err
				}
				existing = nil
			}
			if t.before != nil {
				if err := t.before(ctx, f); err != nil {
					return err
				}
			}
			_, _, err := kube.EnsureHelper(ctx, b.cs, b.rec, spec(f, existing))
			var foreign *kube.ForeignHelperError
			if errors.As(err, &foreign) {
				return runbook.Blocked(err)
			}
			return err
		},
		Wait: func(ctx context.Context, f Facts) error {
			h, err := waitHelper(ctx, b.cs, b.helperNS, name(f.Node.Name), f.Helper)
			if err != nil {
				if h.Pod != nil {
					b.dropHelper(ctx, h.Pod)
					return runbook.Blocked(err)
				}
				return err
			}
			h = trusted(h, spec(f, h.Pod))
			if t.succeeded(h) {
				if t.after != nil {
					t.after(ctx, f, h)
				}
				return nil
			}
			err = t.failed(ctx, f, h)
			if h.Result != nil && h.Result.Error != nil && h.Result.Error.Reason == nodeagent.ReasonStopped {
				// Not this run's doing: its pod was deleted while it ran.
				return runbook.Blocked(fmt.Errorf("%w\nhelper pod %s/%s was deleted while it ran (another tool's drain? the node "+
					"shutting down?) and stopped after the device change in flight; once that is over, run the same command again",
					err, h.Pod.Namespace, h.Pod.Name))
			}
			return err
		},
	}
}

// trusted is h with its result only when its pod is the helper s renders:
// a pod that merely has the helper's name (another image, command or
// mounts) reports nothing, and the step replaces it.
func trusted(h helperFacts, s kube.HelperSpec) helperFacts {
	if h.Pod == nil || kube.HelperMatches(h.Pod, s) {
		return h
	}
	return helperFacts{Pod: h.Pod, ResultErr: fmt.Sprintf("pod %s/%s has the helper's name but not the spec this run creates "+
		"(annotation %s); its result is ignored, and once it has ended it is replaced", h.Pod.Namespace, h.Pod.Name, kube.AnnSpecHash)}
}

func deleteHelper(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, p *corev1.Pod) error {
	deleted, err := kube.DeleteHelperIfUnchanged(ctx, cs, rec, p, "deleted helper pod ("+string(p.Status.Phase)+")")
	if err != nil {
		return fmt.Errorf("delete helper %s/%s: %w", p.Namespace, p.Name, err)
	}
	if !deleted || (kube.PodTerminal(p) && len(p.Finalizers) == 0 && p.DeletionTimestamp == nil) {
		// Gone or replaced already; or finished, without finalizers, and
		// not being deleted yet: the API server removes it at once (no
		// grace period). One being deleted (another tool's drain) keeps
		// its grace period, finished or not.
		return nil
	}
	return kube.WaitForPodGone(ctx, cs, p.Namespace, p.Name)
}

// dropHelper deletes a helper that never started, within a short budget of
// its own (the step's may be spent).
func (b *builder) dropHelper(ctx context.Context, p *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_ = deleteHelper(ctx, b.cs, b.rec, p)
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
