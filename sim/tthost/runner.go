package tthost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/clock"

	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/helperns"
	"github.com/rollbook/rollbook/sim/podloop"
)

// Runner plays the kubelet for rollbook helper pods (label
// rollbook.dev/helper) bound to simulated tt nodes: kwok leaves their
// status alone, and the runner executes their command for real against
// the node's host root and reports the outcome in the pod status.
// Each container runs inside the node-agent image's root filesystem (Image)
// in a mount namespace of its own (image.go, sim/helperns); without the
// image or root, helpers are refused with the reason.
//
// Guarantees: a pod is started at most once (Pending → Running → Succeeded
// or Failed) and never leaves a terminal phase; every status write is
// conditional on the resourceVersion it was computed from; a helper that
// outlives activeDeadlineSeconds is killed and Failed with reason
// DeadlineExceeded; a helper deleted while running gets, as from a kubelet,
// SIGTERM on its containers' main processes, SIGKILL at the end of its
// grace period (at once with none), and its final status written while it
// is Terminating; the pod reaper waits for that before it removes the pod
// (cluster.HoldExits); helpers on
// nodes without a host root, or whose command is not `kubectl-tt …`, fail
// with a message saying so.
type Runner struct {
	Client kubernetes.Interface
	Hosts  *Hosts
	// Agent is the kubectl-tt binary run for a helper's `kubectl-tt …`
	// command outside the image (OutsideImage); empty fails such helpers
	// with a message. Inside the image its own kubectl-tt runs.
	Agent string
	// AgentOverride, for tests of the runner itself, is bound over the
	// image's kubectl-tt; the sim never sets it.
	AgentOverride string
	// Image is the node-agent image helpers run from (LoadImage); a pod
	// naming any other image fails to pull. Nil refuses helpers.
	Image *Image
	// OutsideImage runs helpers as plain processes with the fake tools on
	// PATH (EnvOutsideImage; a developer opt-out, logged loudly).
	OutsideImage bool
	// Reachable are directories of this machine bound read-only at the same
	// path inside every helper: what a node reaches by URL (the firmware
	// bundles' file:// URLs name them).
	Reachable []string
	Logf      func(format string, a ...any)
	Clock     clock.Clock
	// Resync re-checks every helper this often; default 30s.
	Resync time.Duration
	// Ran, when set, is told the node of every helper run that ended (the
	// host events reader looks there next).
	Ran func(node string)

	log  *RunLog
	mu   sync.Mutex
	runs map[string]*run // by pod key
}

type run struct {
	uid    types.UID
	cancel context.CancelCauseFunc
	// term is closed to send SIGTERM to the containers (a graceful
	// deletion); terminating says it was.
	term        chan struct{}
	terminating bool
}

var (
	errDeleted  = errors.New("pod deleted")
	errDeadline = errors.New(messageDeadline)
)

// helperStarters is how many helpers the runner starts or finishes at once:
// each node's kubelet starts its own pods, so a start on one node never
// waits for another's.
const helperStarters = 8

// Run runs helpers until ctx is done.
func (r *Runner) Run(ctx context.Context) error {
	r.init()
	cluster.HoldExits(r.exitHold)
	c := &podloop.Controller{
		Name: "tt-helper-runner", Client: r.Client, Resync: r.Resync, Logf: r.Logf,
		Workers: helperStarters,
		Tweak:   func(o *metav1.ListOptions) { o.LabelSelector = HelperLabel },
		Sync:    r.sync,
	}
	return c.Run(ctx)
}

func (r *Runner) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]*run{}
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Logf == nil {
		r.Logf = func(string, ...any) {}
	}
	if r.Resync <= 0 {
		r.Resync = 30 * time.Second
	}
	if r.log == nil {
		r.log = &RunLog{Path: filepath.Join(r.Hosts.Dir, "runner.log")}
	}
}

func (r *Runner) sync(ctx context.Context, key string, pods corelisters.PodLister) error {
	ns, name, err := splitKey(key)
	if err != nil {
		return nil
	}
	pod, err := pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		r.stop(key, "", errDeleted)
		return nil
	}
	if err != nil {
		return err
	}
	r.stop(key, pod.UID, errDeleted) // a run of an older pod with this name
	r.mu.Lock()
	cur := r.runs[key]
	r.mu.Unlock()
	switch {
	case pod.DeletionTimestamp != nil:
		if g := pod.DeletionGracePeriodSeconds; g != nil && *g > 0 && cur != nil && cur.uid == pod.UID {
			r.terminate(key, pod)
			return nil
		}
		r.stop(key, "", errDeleted)
		return nil
	case terminal(pod):
		// Finished (by us, or by anyone else): nothing may run any more.
		r.stop(key, "", errors.New("pod is "+string(pod.Status.Phase)))
		return nil
	case pod.Spec.NodeName == "" || cur != nil:
		return nil
	case pod.Status.Phase == corev1.PodRunning:
		return r.refuse(ctx, pod, "SimRunnerLostHelper",
			"sim: the helper runner has no process for this Running helper (was the sim restarted?)")
	}
	return r.start(ctx, pod)
}

// stop cancels the run at key unless it belongs to keep (the current pod).
func (r *Runner) stop(key string, keep types.UID, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.runs[key]; cur != nil && (keep == "" || cur.uid != keep) {
		cur.cancel(cause)
		delete(r.runs, key)
	}
}

// graceLeft is what is left of a deleted pod's grace period: the kubelet
// sends SIGTERM at the deletion and SIGKILL at deletionTimestamp.
func graceLeft(p *corev1.Pod, now time.Time) time.Duration {
	if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds <= 0 {
		return 0
	}
	return p.DeletionTimestamp.Sub(now)
}

// terminate sends SIGTERM to the run of pod (once) and kills it when its
// grace period ends.
func (r *Runner) terminate(key string, pod *corev1.Pod) {
	r.mu.Lock()
	cur := r.runs[key]
	if cur == nil || cur.uid != pod.UID || cur.terminating {
		r.mu.Unlock()
		return
	}
	cur.terminating = true
	close(cur.term)
	r.mu.Unlock()
	left := max(graceLeft(pod, r.Clock.Now()), 0)
	r.log.Printf("TERMINATE %s: deleted; SIGTERM, SIGKILL in %s", key, left.Round(time.Millisecond))
	go func() {
		<-r.Clock.After(left)
		r.cancelRun(key, pod.UID, errDeleted)
	}()
}

// exitHold keeps a deleted helper's pod until its run has ended and its
// final status is written, as a kubelet removes a pod only once its
// containers stopped (never past the grace period: the reaper's bound).
func (r *Runner) exitHold(p *corev1.Pod) (time.Duration, string) {
	if p.Labels[HelperLabel] == "" {
		return 0, ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Held while its run lasts: the reaper may see the deletion before
	// the runner sends SIGTERM.
	if cur := r.runs[podKey(p)]; cur != nil && cur.uid == p.UID {
		return time.Second, "the helper is stopping after SIGTERM"
	}
	return 0, ""
}

// NotReadyLabel set to "true" on a node means its kubelet is down (the sim's
// kwok stages hold the node's Ready condition False): nothing starts there,
// the helper stays Pending until the label goes.
const NotReadyLabel = "sim.rollbook.dev/not-ready"

// notReadyRecheck is how often a helper waiting for a down node is re-checked.
const notReadyRecheck = time.Second

func (r *Runner) start(ctx context.Context, pod *corev1.Pod) error {
	node, err := r.Client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && node.Labels[NotReadyLabel] == "true" {
		return podloop.RetryAfter{D: notReadyRecheck, Why: "node " + node.Name + " is down (" + NotReadyLabel + "=true)"}
	}
	if err == nil {
		// A kubelet admits a pinned pod only when its node matches the
		// pod's required node affinity (Pod Predicate NodeAffinity): a
		// helper kept off control-plane nodes never runs on one.
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
			why := "Pod was rejected: Predicate NodeAffinity failed: node " + node.Name + " does not match the pod's required node affinity"
			r.log.Printf("REJECTED %s node=%s: %s", podKey(pod), node.Name, why)
			return r.finish(ctx, pod, rejectedStatus("NodeAffinity", why, r.Clock.Now()))
		}
	}
	root, ok := r.Hosts.Root(pod.Spec.NodeName)
	if !ok {
		return r.refuse(ctx, pod, "SimNoTTHost",
			fmt.Sprintf("sim: node %s is not a simulated Tenstorrent host; the helper runner runs helpers only on nodes with a host root",
				pod.Spec.NodeName))
	}
	if err != nil {
		node = nil
	}
	if _, bad := r.unpullable(pod, node); bad {
		return r.pullFailed(ctx, pod, node)
	}
	if !r.OutsideImage {
		if why := r.imageProblem(); why != "" {
			return r.refuse(ctx, pod, "SimNoImage", why)
		}
	}
	argvs, why := r.commands(pod)
	if why != "" {
		return r.refuse(ctx, pod, "", why)
	}
	secrets, why := secretEnv(ctx, r.Client, pod)
	if why != "" {
		return podloop.RetryAfter{D: notReadyRecheck, Why: why}
	}
	dir := filepath.Join(r.Hosts.Dir, ".runs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if !r.OutsideImage {
		for _, c := range pod.Spec.Containers {
			if _, _, why := r.containerFS(pod, c, root, dir, "", ""); why != "" {
				_ = os.RemoveAll(dir)
				return r.refuse(ctx, pod, "", why)
			}
		}
	}
	now := r.Clock.Now()
	runCtx, cancel := context.WithCancelCause(ctx)
	key := podKey(pod)
	r.mu.Lock()
	term := make(chan struct{})
	r.runs[key] = &run{uid: pod.UID, cancel: cancel, term: term}
	r.mu.Unlock()
	running := runningStatus(pod, r.imageID(), now)
	updated, err := r.patchStatus(ctx, pod, running)
	if err != nil {
		r.endRun(key, pod.UID)
		return err
	}
	where := "image"
	if r.OutsideImage {
		where = "OUTSIDE-THE-IMAGE"
		r.Logf("tt-helper-runner: %s runs OUTSIDE the node-agent image (%s=1)", key, EnvOutsideImage)
	}
	r.log.Printf("START %s node=%s in=%s argv=%q", key, pod.Spec.NodeName, where, argvs)
	go r.execute(runCtx, updated, root, dir, argvs, running.StartTime.Time, secrets, term)
	return nil
}

// commands returns each container's argv with argv[0] replaced by the
// agent, or why the pod cannot run here.
func (r *Runner) commands(pod *corev1.Pod) ([][]string, string) {
	if len(pod.Spec.InitContainers) > 0 {
		return nil, "sim: the helper runner does not run init containers"
	}
	var out [][]string
	for _, c := range pod.Spec.Containers {
		argv := append(append([]string(nil), c.Command...), c.Args...)
		if len(argv) == 0 || filepath.Base(argv[0]) != AgentName {
			return nil, fmt.Sprintf("sim: the helper runner only runs `%s …` on simulated tt hosts; container %s has command %q",
				AgentName, c.Name, argv)
		}
		if !r.OutsideImage {
			out = append(out, argv) // run from the image's PATH
			continue
		}
		if r.Agent == "" {
			return nil, fmt.Sprintf("sim: no %s binary to run (start the sim with --tt-agent PATH)", AgentName)
		}
		out = append(out, append([]string{r.Agent}, argv[1:]...))
	}
	return out, ""
}

// execute runs the containers, enforces the deadline and reports.
func (r *Runner) execute(ctx context.Context, pod *corev1.Pod, root, dir string, argvs [][]string, started time.Time,
	secrets map[string]string, term <-chan struct{}) {
	key := podKey(pod)
	if ads := pod.Spec.ActiveDeadlineSeconds; ads != nil {
		left := started.Add(time.Duration(*ads) * time.Second).Sub(r.Clock.Now())
		go func() {
			select {
			case <-r.Clock.After(left):
				r.cancelRun(key, pod.UID, errDeadline)
			case <-ctx.Done():
			}
		}()
	}
	res := make([]result, len(argvs))
	var wg sync.WaitGroup
	for i, c := range pod.Spec.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = r.runContainer(ctx, pod, c, root, dir, argvs[i], secrets, term)
		}()
	}
	wg.Wait()
	cause := context.Cause(ctx)
	// Forget the run only once its final status is written: a sync in
	// between would find a Running helper with no run and fail it as lost
	// (a probe's result was once replaced so).
	defer r.endRun(key, pod.UID)
	defer os.RemoveAll(dir)
	if r.Ran != nil {
		defer r.Ran(pod.Spec.NodeName)
	}
	graceful := r.terminating(key, pod.UID)
	switch {
	case errors.Is(cause, errDeleted) && !graceful:
		r.log.Printf("KILLED %s: deleted while running", key)
		return
	case graceful:
		// Deleted with a grace period: it stopped after SIGTERM (or was
		// killed at the end of it); the kubelet reports how, while the pod
		// is Terminating.
		st := finalStatus(pod, started, res, false, r.Clock.Now())
		if err := r.finishTerminating(context.WithoutCancel(ctx), pod, st); err != nil {
			r.Logf("tt-helper-runner: %s: final status: %v", key, err)
		}
		r.log.Printf("TERMINATED %s phase=%s exit=%v killed=%v msg=%q", key, st.Phase, exitCodes(res), errors.Is(cause, errDeleted),
			firstBytes(res, 300))
		return
	case cause != nil && !errors.Is(cause, errDeadline):
		// Finished by someone else, or the sim is stopping: no report.
		r.log.Printf("STOPPED %s: %v", key, cause)
		return
	}
	st := finalStatus(pod, started, res, cause != nil, r.Clock.Now())
	if err := r.finish(context.WithoutCancel(ctx), pod, st); err != nil {
		r.Logf("tt-helper-runner: %s: final status: %v", key, err)
	}
	r.log.Printf("END %s phase=%s%s exit=%v msg=%q", key, st.Phase, prefixed(" reason=", st.Reason), exitCodes(res), firstBytes(res, 300))
}

// endRun forgets the finished run of pod uid at key.
func (r *Runner) endRun(key string, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.runs[key]; cur != nil && cur.uid == uid {
		cur.cancel(nil)
		delete(r.runs, key)
	}
}

func (r *Runner) terminating(key string, uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.runs[key]
	return cur != nil && cur.uid == uid && cur.terminating
}

func (r *Runner) cancelRun(key string, uid types.UID, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.runs[key]; cur != nil && cur.uid == uid {
		cur.cancel(cause)
	}
}

func (r *Runner) runContainer(ctx context.Context, pod *corev1.Pod, c corev1.Container, root, dir string, argv []string,
	secrets map[string]string, term <-chan struct{}) result {
	cdir := filepath.Join(dir, c.Name)
	res := result{name: c.Name, image: c.Image, imageID: r.imageID(), started: r.Clock.Now()}
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		res.exitCode, res.startErr, res.finished = exitStartError, err.Error(), r.Clock.Now()
		return res
	}
	termLog := filepath.Join(cdir, "termination-log")
	vols, err := mountConfigMaps(ctx, r.Client, pod, c, cdir)
	if err != nil {
		res.exitCode, res.startErr, res.finished = exitStartError, err.Error(), r.Clock.Now()
		return res
	}
	p := proc{argv: argv, dir: cdir, outPath: filepath.Join(cdir, "output.log"), term: term,
		env: append(helperEnv(pod, c, r.Hosts, root, termLog, cdir, secrets), vols...)}
	if !r.OutsideImage {
		spec, why := r.launchSpec(pod, c, root, dir, cdir, termLog, secrets)
		if why != "" {
			res.exitCode, res.startErr, res.finished = exitStartError, why, r.Clock.Now()
			return res
		}
		p.argv, p.env, p.newNS = []string{r.Hosts.ToolExe, helperns.Subcommand, spec}, []string{}, true
	}
	code, err := p.run(ctx)
	res.finished = r.Clock.Now()
	if err == nil {
		if lerr := r.serveLog(ctx, pod, c.Name, p.outPath); lerr != nil {
			r.Logf("tt-helper-runner: %s: log: %v", podKey(pod), lerr)
		}
	}
	if err != nil {
		res.exitCode, res.startErr = exitStartError, fmt.Sprintf("failed to start %s: %v", argv[0], err)
		return res
	}
	res.exitCode = int32(code)
	res.message = terminationMessage(termLog, p.outPath, c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError,
		code != 0)
	return res
}

// imageID is the image containers run from, by digest ("" outside it).
func (r *Runner) imageID() string {
	if r.Image == nil || r.OutsideImage {
		return ""
	}
	return r.Image.Ref()
}

// pullFailed reports the pod's image as unpullable, as a kubelet does:
// ErrImagePull first, ImagePullBackOff a few seconds later; the pod stays
// Pending and nothing runs.
func (r *Runner) pullFailed(ctx context.Context, pod *corev1.Pod, node *corev1.Node) error {
	pullErr := r.pullErrorOn(node)
	reason := ""
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
			reason = w.Reason
		}
	}
	if reason == "ImagePullBackOff" {
		return nil
	}
	if reason == "" {
		img, _ := r.unpullable(pod, node)
		r.log.Printf("PULL-FAILED %s node=%s image=%s", podKey(pod), pod.Spec.NodeName, img)
		updated, err := r.patchStatus(ctx, pod, pullFailedStatus(pod, pullErr, "ErrImagePull", r.Clock.Now()))
		if err != nil {
			return err
		}
		pod = updated
	}
	go func() {
		select {
		case <-r.Clock.After(pullBackoffAfter):
		case <-ctx.Done():
			return
		}
		cur, err := r.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil || terminal(cur) {
			return
		}
		if _, err := r.patchStatus(ctx, cur, pullFailedStatus(cur, pullErr, "ImagePullBackOff", r.Clock.Now())); err != nil {
			r.Logf("tt-helper-runner: %s: back-off status: %v", podKey(pod), err)
		}
	}()
	return nil
}

// refuse fails a pending pod without running anything.
func (r *Runner) refuse(ctx context.Context, pod *corev1.Pod, reason, why string) error {
	r.log.Printf("REFUSED %s node=%s: %s", podKey(pod), pod.Spec.NodeName, why)
	return r.finish(ctx, pod, refusedStatus(pod, reason, why, r.Clock.Now()))
}

// finish writes a terminal status, re-reading the pod on conflicts; it
// gives up silently once the pod is gone, terminating, terminal or
// replaced.
func (r *Runner) finish(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) error {
	cur := pod
	for attempt := 0; ; attempt++ {
		_, err := r.patchStatus(ctx, cur, st)
		if err == nil || !apierrors.IsConflict(err) || attempt >= 5 {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		cur, err = r.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || cur.DeletionTimestamp != nil || terminal(cur) {
			return nil
		}
	}
}

// finishTerminating writes the final status of a helper deleted with a
// grace period, on the Terminating pod (re-read on conflicts: the deletion
// changed it), unless the pod is gone or another.
func (r *Runner) finishTerminating(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) error {
	cur := pod
	for attempt := 0; ; attempt++ {
		_, err := r.patchStatus(ctx, cur, st)
		if err == nil || !apierrors.IsConflict(err) || attempt >= 5 {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		cur, err = r.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || terminal(cur) {
			return nil
		}
	}
}

// patchStatus writes st over pod's status if pod is unchanged since it was
// read, and never over a terminal phase (the apiserver would accept it, H1).
func (r *Runner) patchStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) (*corev1.Pod, error) {
	if terminal(pod) {
		return nil, fmt.Errorf("pod %s is already %s", podKey(pod), pod.Status.Phase)
	}
	b, err := statusPatch(pod.ResourceVersion, st)
	if err != nil {
		return nil, err
	}
	return r.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func exitCodes(res []result) []int32 {
	out := make([]int32, len(res))
	for i, r := range res {
		out[i] = r.exitCode
	}
	return out
}

func firstBytes(res []result, n int) string {
	var b strings.Builder
	for _, r := range res {
		b.WriteString(r.message + r.startErr)
	}
	return cutMessage(b.String(), n)
}
