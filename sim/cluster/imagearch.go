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

// EnvPrivateImages lists images the sim's registry serves only with a pull
// Secret: "REF=SECRET[,REF=SECRET…]". A kwok pod with such an image whose
// spec.imagePullSecrets (the ServiceAccount admission plugin copies its
// ServiceAccount's there when the pod names none) does not name SECRET, or
// names one missing from its namespace, never starts: ErrImagePull with
// containerd's "pull access denied", as a kubelet reports a registry's 401.
const EnvPrivateImages = "ROLLBOOK_SIM_PRIVATE_IMAGES"

// pullRules are the sim registry's images a kubelet cannot always pull.
type pullRules struct {
	arch   map[string]string // image → the one architecture it is built for
	secret map[string]string // image → the pull Secret it needs
}

// gated are the images whose pods wait for the sim's pull.
func (r pullRules) gated() map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{r.arch, r.secret} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// loadPullRules reads EnvSingleArchImages and EnvPrivateImages.
func loadPullRules() (pullRules, error) {
	arch, err := SingleArchImages()
	if err != nil {
		return pullRules{}, err
	}
	secret, err := imageList(EnvPrivateImages, "SECRET")
	return pullRules{arch: arch, secret: secret}, err
}

// SingleArchImages parses EnvSingleArchImages (nil when unset).
func SingleArchImages() (map[string]string, error) { return imageList(EnvSingleArchImages, "ARCH") }

func imageList(env, what string) (map[string]string, error) {
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		ref, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || ref == "" || val == "" || strings.ContainsAny(ref, "'\"") {
			return nil, fmt.Errorf("%s=%q: want IMAGE=%s[,IMAGE=%s…]", env, v, what, what)
		}
		out[ref] = val
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

// pullImages plays the kubelet's image pull for kwok pods with a gated
// image: on a node of its architecture, with its pull Secret, the pod is
// labelled pulled (kwok then runs it); else the pod stays Pending with its
// container waiting in ErrImagePull, and ImagePullBackOff a few seconds
// later.
func pullImages(ctx context.Context, cs kubernetes.Interface, rules pullRules) error {
	nf := informers.NewSharedInformerFactory(cs, 0)
	nodes := nf.Core().V1().Nodes().Lister()
	secrets := nf.Core().V1().Secrets().Lister()
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
			wrong := wrongArch(p, rules.arch, n.Labels[corev1.LabelArchStable])
			for img, msg := range denied(p, rules.secret, secrets) {
				wrong[img] = msg
			}
			if len(wrong) == 0 {
				if len(singleArchOf(p, rules.gated())) == 0 {
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

// wrongArch returns each container image of p that has no build for arch,
// with containerd's error (images.Manifest: errdefs.ErrNotFound).
func wrongArch(p *corev1.Pod, images map[string]string, arch string) map[string]string {
	out := map[string]string{}
	for _, c := range p.Spec.Containers {
		if a, ok := images[c.Image]; ok && a != arch {
			out[c.Image] = `rpc error: code = NotFound desc = failed to pull and unpack image "` + c.Image +
				`": no match for platform in manifest: not found`
		}
	}
	return out
}

// denied returns each container image of p whose pull Secret the pod does
// not name, or that its namespace lacks: the kubelet pulls with the pod's
// spec.imagePullSecrets only, and the registry answers 401 (containerd's
// resolver: "pull access denied … may require authorization").
func denied(p *corev1.Pod, images map[string]string, secrets corelisters.SecretLister) map[string]string {
	out := map[string]string{}
	for _, c := range p.Spec.Containers {
		need, ok := images[c.Image]
		if !ok {
			continue
		}
		named := false
		for _, r := range p.Spec.ImagePullSecrets {
			named = named || r.Name == need
		}
		if named {
			if _, err := secrets.Secrets(p.Namespace).Get(need); err == nil {
				continue
			}
		}
		out[c.Image] = `rpc error: code = Unknown desc = failed to pull and unpack image "` + c.Image +
			`": failed to resolve reference "` + c.Image + `": pull access denied, repository does not exist or may require ` +
			`authorization: server message: insufficient_scope: authorization failed`
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
func pullFailedStatus(p *corev1.Pod, wrong map[string]string, reason string, now time.Time) corev1.PodStatus {
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
		if why, ok := wrong[c.Image]; ok {
			msg := `Failed to pull image "` + c.Image + `": ` + why
			if reason == "ImagePullBackOff" {
				msg = `Back-off pulling image "` + c.Image + `": ErrImagePull: ` + msg
			}
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	return st
}
