package fleet

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Unfit says why a clone's pod template fits none of nodes once they carry
// version (what the flip gives them): a NoSchedule or NoExecute taint it
// does not tolerate, or a node selector or required node affinity (the
// architecture, say) no node matches. "" when it fits one. Pods Pending
// before any node is at NEW are expected; a template no flipped node can
// take means the clone serves nowhere, whatever the roll flips.
func Unfit(spec corev1.PodSpec, nodes []corev1.Node, version string) string {
	if len(nodes) == 0 {
		return ""
	}
	pod := &corev1.Pod{Spec: spec}
	aff := nodeaffinity.GetRequiredNodeAffinity(pod)
	whys := map[string]bool{}
	for i := range nodes {
		n := nodes[i].DeepCopy()
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[VersionLabel] = version
		taint, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, spec.Tolerations,
			func(t *corev1.Taint) bool {
				return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
			}, false)
		ok, err := aff.Match(n)
		switch {
		case untolerated:
			whys[fmt.Sprintf("taint %s (no toleration)", taint.ToString())] = true
		case err != nil || !ok:
			whys[fmt.Sprintf("node selector/affinity %s does not match node labels (%s)", selectorOf(spec),
				ArchOf(n.Labels))] = true
		default:
			return ""
		}
	}
	out := make([]string, 0, len(whys))
	for w := range whys {
		out = append(out, w)
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func selectorOf(spec corev1.PodSpec) string {
	var parts []string
	if len(spec.NodeSelector) > 0 {
		parts = append(parts, labels.SelectorFromSet(spec.NodeSelector).String())
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range t.MatchExpressions {
				parts = append(parts, fmt.Sprintf("%s %s %v", e.Key, e.Operator, e.Values))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// ArchOf says the architecture and OS that labels (a node's, or a node
// selector) name.
func ArchOf(l map[string]string) string {
	return fmt.Sprintf("%s=%s, %s=%s", corev1.LabelArchStable, l[corev1.LabelArchStable], corev1.LabelOSStable, l[corev1.LabelOSStable])
}
