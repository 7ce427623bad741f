package cluster

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rollbook/rollbook/sim/podloop"
)

// EnvSingleArchImages lists images the sim's registry holds for one
// architecture only: "REF=ARCH[,REF=ARCH…]". A kwok pod with such an image on
// a node whose kubernetes.io/arch differs never starts: its container waits
// in ErrImagePull, then ImagePullBackOff, as a kubelet reports containerd's
// pull of a manifest list without the node's platform.
const EnvSingleArchImages = "ROLLBOOK_SIM_SINGLE_ARCH_IMAGES"

// PulledLabel marks a pod whose single-arch images the sim let pull (the
// node's architecture matches): only then may kwok's pod-ready stage run it.
const PulledLabel = "sim.rollbook.dev/image-pulled"

// SingleArchImages parses EnvSingleArchImages (nil when unset).
func SingleArchImages() (map[string]string, error) {
	v := strings.TrimSpace(os.Getenv(EnvSingleArchImages))
	if v == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		ref, arch, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || ref == "" || arch == "" || strings.ContainsAny(ref, "'\"") {
			return nil, fmt.Errorf("%s=%q: want IMAGE=ARCH[,IMAGE=ARCH…]", EnvSingleArchImages, v)
		}
		out[ref] = arch
	}
	return out, nil
}

// awaitPull keeps kwok's pod-ready stage off pods that use a single-arch
// image until pullImages labelled them pulled.
func awaitPull(stage string, images map[string]string) string {
	const anchor = "    matchExpressions:\n"
	if len(images) == 0 {
		return stage
	}
	if !strings.Contains(stage, anchor) {
		panic("pod stage without selector.matchExpressions")
	}
	refs := make([]string, 0, len(images))
	for r := range images {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	expr := "    - key: 'if .metadata.labels[\"" + PulledLabel + "\"] == \"true\" then \"pulled\" else .spec.containers.[].image end'\n" +
		"      operator: 'NotIn'\n      values:\n"
	for _, r := range refs {
		expr += "      - '" + r + "'\n"
	}
	return strings.Replace(stage, anchor, anchor+expr, 1)
}

// pullImages plays the kubelet's image pull for kwok pods with a single-arch
// image: on a node of that architecture the pod is labelled pulled (kwok
// then runs it); on another, the pod stays Pending with its container
// waiting in ErrImagePull, and ImagePullBackOff a few seconds later.
func pullImages(ctx context.Context, cs kubernetes.Interface, images map[string]string) error {
	nf := informers.NewSharedInformerFactory(cs, 0)
	nodes := nf.Core().V1().Nodes().Lister()
	nf.Start(ctx.Done())
	nf.WaitForCacheSync(ctx.Done())
	c := &podloop.Controller{
		Name: "sim-image-pull", Client: cs, Logf: log.Printf, Workers: 4,
		Tweak: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.AndSelectors(
				fields.OneTermNotEqualSelector("spec.nodeName", ""),
				fields.OneTermEqualSelector("status.phase", string(corev1.PodPending)),
			).String()
		},
		Sync: func(ctx context.Context, key string, pods corelisters.PodLister) error {
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				return nil
			}
			p, err := pods.Pods(ns).Get(name)
			if err != nil || p.DeletionTimestamp != nil || p.Labels[HelperLabel] != "" || p.Labels[PulledLabel] == "true" {
				return nil
			}
			n, err := nodes.Get(p.Spec.NodeName)
			if err != nil {
				return podloop.RetryAfter{D: time.Second, Why: "node " + p.Spec.NodeName + " not seen yet"}
			}
			wrong := wrongArch(p, images, n.Labels[corev1.LabelArchStable])
			if len(wrong) == 0 {
				if len(singleArchOf(p, images)) == 0 {
					return nil // not ours: kwok's stages run it
				}
				_, err := cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType,
					[]byte(`{"metadata":{"labels":{"`+PulledLabel+`":"true"}}}`), metav1.PatchOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			}
			reason, next := "ErrImagePull", true
			if waitingReason(p) == "ErrImagePull" {
				reason, next = "ImagePullBackOff", false
			} else if waitingReason(p) == "ImagePullBackOff" {
				return nil
			}
			p = p.DeepCopy()
			p.Status = pullFailedStatus(p, wrong, reason, time.Now())
			_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return nil
			}
			if err == nil && next {
				return podloop.RetryAfter{D: 3 * time.Second, Why: "back-off after ErrImagePull"}
			}
			return err
		},
	}
	return c.Run(ctx)
}

func singleArchOf(p *corev1.Pod, images map[string]string) []string {
	var out []string
	for _, c := range p.Spec.Containers {
		if _, ok := images[c.Image]; ok {
			out = append(out, c.Image)
		}
	}
	return out
}

// wrongArch returns each container image of p that has no build for arch.
func wrongArch(p *corev1.Pod, images map[string]string, arch string) map[string]bool {
	out := map[string]bool{}
	for _, c := range p.Spec.Containers {
		if a, ok := images[c.Image]; ok && a != arch {
			out[c.Image] = true
		}
	}
	return out
}

func waitingReason(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil && (s.State.Waiting.Reason == "ErrImagePull" || s.State.Waiting.Reason == "ImagePullBackOff") {
			return s.State.Waiting.Reason
		}
	}
	return ""
}

// pullFailedStatus is a kubelet's status for a pod an image of which has no
// build for the node's platform: Pending, that container waiting with the
// kubelet's wording of containerd's error (images.Manifest: "no match for
// platform in manifest", errdefs.ErrNotFound), the others PodInitializing.
func pullFailedStatus(p *corev1.Pod, wrong map[string]bool, reason string, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	st := corev1.PodStatus{Phase: corev1.PodPending, StartTime: &t, HostIP: p.Status.HostIP, HostIPs: p.Status.HostIPs,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
				Message: "containers with unready status", LastTransitionTime: t},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
				Message: "containers with unready status", LastTransitionTime: t},
		}}
	if p.Status.StartTime != nil {
		st.StartTime = p.Status.StartTime
	}
	f := false
	for _, c := range p.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: &f,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
		if wrong[c.Image] {
			msg := `Failed to pull image "` + c.Image + `": rpc error: code = NotFound desc = failed to pull and unpack image "` +
				c.Image + `": no match for platform in manifest: not found`
			if reason == "ImagePullBackOff" {
				msg = `Back-off pulling image "` + c.Image + `": ErrImagePull: ` + msg
			}
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	return st
}
