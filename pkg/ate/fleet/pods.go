package fleet

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
)

// PullFailure is a pod's image pull failure as its kubelet reports it
// ("container C: ImagePullBackOff: message"), and whether the image has no
// build for the node's platform at all: containerd's "no match for platform
// in manifest", Docker's "no matching manifest for linux/arm64 in the
// manifest list entries". Waiting cannot cure that one; the kubelet retries
// every other pull failure (a registry that was down, credentials fixed).
func PullFailure(p *corev1.Pod) (why string, wrongPlatform bool) {
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		w := s.State.Waiting
		if w == nil || (w.Reason != "ErrImagePull" && w.Reason != "ImagePullBackOff") {
			continue
		}
		m := strings.ToLower(w.Message)
		return fmt.Sprintf("container %s: %s: %s", s.Name, w.Reason, w.Message),
			strings.Contains(m, "no match for platform") || strings.Contains(m, "no matching manifest for")
	}
	return "", false
}

// WrongPlatformPods names the target pools' pods on node whose image has no
// build for its platform, with the kubelet's message and the fix; "" when none.
func WrongPlatformPods(pods []corev1.Pod, node *corev1.Node) string {
	var out, edits []string
	seen := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if why, wrong := PullFailure(p); wrong && p.DeletionTimestamp == nil {
			out = append(out, p.Namespace+"/"+p.Name+" of pool "+p.Labels[PoolLabel]+" ("+why+")")
			if e := "kubectl edit workerpool -n " + p.Namespace + " " + p.Labels[PoolLabel]; !seen[e] {
				seen[e] = true
				edits = append(edits, e)
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf("worker pod(s) on %s cannot pull their image for the node's platform (%s): %s. Waiting cannot fix this: "+
		"give the pool an image built for the nodes' architecture (a multi-arch image), or a nodeSelector/affinity for the "+
		"image's architecture (%s); then delete these pods (kubectl delete pod -n NS POD: they never ran, and they hold "+
		"the room on the node that their replacements need) and re-run",
		node.Name, ArchOf(node.Labels), strings.Join(out, ", "), strings.Join(edits, "; "))
}

// PoolPods lists the pods of pools with one label-selected list.
func PoolPods(ctx context.Context, cs kubernetes.Interface, pools []Pool) ([]corev1.Pod, error) {
	if len(pools) == 0 {
		return nil, nil
	}
	names := map[string]bool{}
	for _, p := range pools {
		names[p.Name] = true
	}
	var vals []string
	for n := range names {
		vals = append(vals, n)
	}
	sort.Strings(vals)
	req, err := labels.NewRequirement(PoolLabel, selection.In, vals)
	if err != nil {
		return nil, err
	}
	l, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: req.String()})
	if err != nil {
		return nil, fmt.Errorf("list worker pods: %w", err)
	}
	keys := PoolSet(pools)
	var out []corev1.Pod
	for _, p := range l.Items {
		if keys[p.Namespace+"/"+p.Labels[PoolLabel]] {
			out = append(out, p)
		}
	}
	return out, nil
}

// PoolDeployments are the worker pool Deployments by pool key
// ("namespace/pool"): how many, and why the Deployment controller cannot
// create a pool's pods, when it says so (its ReplicaFailure condition: a
// ResourceQuota, a LimitRange, an admission webhook refused them).
type PoolDeployments struct {
	Count   map[string]int
	Failure map[string]string
	// Template is each pool's pod template spec (one Deployment's).
	Template map[string]corev1.PodSpec
	// Nodes, when set, are the nodes in full (taints, labels): a clone
	// whose template fits none of them once flipped serves nowhere.
	Nodes []corev1.Node
}

// Deployments reads the worker pool Deployments (one list).
func Deployments(ctx context.Context, cs kubernetes.Interface) (PoolDeployments, error) {
	out := PoolDeployments{Count: map[string]int{}, Failure: map[string]string{}, Template: map[string]corev1.PodSpec{}}
	deps, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: PoolLabel})
	if err != nil {
		return out, fmt.Errorf("list worker pool Deployments: %w", err)
	}
	for _, d := range deps.Items {
		key := d.Namespace + "/" + d.Labels[PoolLabel]
		out.Count[key]++
		out.Template[key] = d.Spec.Template.Spec
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
				out.Failure[key] = fmt.Sprintf("Deployment %s/%s: %s: %s", d.Namespace, d.Name, c.Reason, c.Message)
			}
		}
	}
	return out, nil
}
