package ate

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// unplacedWorkerPods names the pods of the pools the move goes to (s.ToPools)
// whose lineage is short of free slots and that no node has taken, per pool,
// with the scheduler's reason. A wait for such a lineage's workers ends only
// once room is made for these pods on a node at s.To: the scheduler serves
// the oldest Pending pod first, so another pool's pods may take the room a
// deleted worker freed. "" when every such pod is placed.
func unplacedWorkerPods(ctx context.Context, cs kubernetes.Interface, s Sides, needs []Need) (string, error) {
	short := map[string]bool{}
	for _, n := range needs {
		if n.Actors > n.Free {
			short[n.Lineage] = true
		}
	}
	if len(short) == 0 {
		return "", nil
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: PoolLabel,
		FieldSelector: "spec.nodeName="})
	if err != nil {
		return "", fmt.Errorf("list unscheduled worker pods: %w", err)
	}
	to := map[string]bool{}
	for _, p := range s.ToPools {
		to[p.Key()] = true
	}
	count, reason := map[string]int{}, map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		key := p.Namespace + "/" + p.Labels[PoolLabel]
		if l := s.Lineage[key]; !to[key] || !short[l] && !short[""] || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
			continue
		}
		count[key]++
		if reason[key] == "" {
			reason[key] = unschedulableReason(p)
		}
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%d pod(s) of pool %s not scheduled (%s)", count[k], k, reason[k]))
	}
	return strings.Join(out, "; "), nil
}

// unschedulableReason is the scheduler's word on a Pending pod, without its
// account of preemption.
func unschedulableReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			m, _, _ := strings.Cut(c.Message, " preemption:")
			return strings.TrimSuffix(strings.TrimSpace(m), ".")
		}
	}
	return "not yet seen by the scheduler"
}

// pullFailure is a pod's image pull failure as its kubelet reports it
// ("container C: ImagePullBackOff: message"), and whether the image has no
// build for the node's platform at all: containerd's "no match for platform
// in manifest", Docker's "no matching manifest for linux/arm64 in the
// manifest list entries". Waiting cannot cure that one; the kubelet retries
// every other pull failure (a registry that was down, credentials fixed).
func pullFailure(p *corev1.Pod) (why string, wrongPlatform bool) {
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

// wrongPlatformPods names the target pools' pods on node whose image has no
// build for its platform, with the kubelet's message and the fix; "" when none.
func wrongPlatformPods(pods []corev1.Pod, node *corev1.Node) string {
	var out, edits []string
	seen := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if why, wrong := pullFailure(p); wrong && p.DeletionTimestamp == nil {
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
		node.Name, archOf(node.Labels), strings.Join(out, ", "), strings.Join(edits, "; "))
}
