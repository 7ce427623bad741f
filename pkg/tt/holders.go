package tt

import (
	"fmt"
	"path"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// DeviceResourcePrefix is the extended-resource namespace of Tenstorrent
// device plugins: a container given such a resource opens the device with
// no hostPath at all.
const DeviceResourcePrefix = "tenstorrent.com/"

// holdReason says how p holds the Tenstorrent device, or "" when it does
// not. A pod holds it when it mounts /dev/tenstorrent (or a device under
// it), requests a tenstorrent.com/* resource, or when the node agent found
// its processes with the device open (how a privileged pod with host /dev
// is told apart from, say, a CSI node plugin that mounts /dev for disks).
func holdReason(p *corev1.Pod, measured map[string]bool) string {
	for _, v := range p.Spec.Volumes {
		if hp := v.HostPath; hp != nil {
			c := path.Clean(hp.Path)
			if c == DevicePathPrefix || strings.HasPrefix(c, DevicePathPrefix+"/") {
				return "mounts " + c
			}
		}
	}
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, rl := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			for name := range rl {
				if strings.HasPrefix(string(name), DeviceResourcePrefix) {
					return "requests " + string(name)
				}
			}
		}
	}
	if measured[string(p.UID)] {
		return "has /dev/tenstorrent open (measured on the node)"
	}
	return ""
}

// measuredHolders are the pod UIDs the node agent last saw holding the
// device: the probe of this node, or the task helper's own report.
func (f *Facts) measuredHolders() map[string]bool {
	out := map[string]bool{}
	if f.Measured != nil {
		for _, h := range f.Measured.Holders {
			if h.PodUID != "" {
				out[h.PodUID] = true
			}
		}
	}
	if f.Helper.Result != nil {
		for _, h := range f.Helper.Result.Holders {
			if h.PodUID != "" && !h.Killed {
				out[h.PodUID] = true
			}
		}
	}
	return out
}

// holder is a pod that holds the device, and how.
type holder struct {
	Pod corev1.Pod
	Why string
}

// deviceHolders lists the running pods (not our helpers) holding the
// device.
func (f *Facts) deviceHolders() []holder {
	measured := f.measuredHolders()
	var out []holder
	for _, p := range f.Pods {
		if !active(&p) || isHelper(&p) {
			continue
		}
		if why := holdReason(&p, measured); why != "" {
			out = append(out, holder{Pod: p, Why: why})
		}
	}
	return out
}

// holdersThatStay names the device holders that neither the cordon nor the
// deploy gates take off the node, so the evict step would wait for them in
// vain: a DaemonSet's pod whose node selection still matches with the
// gates closed (its controller keeps one there), and a controller's pod
// that tolerates the cordon and still selects the node (its replacement
// may be placed here again). Killing their processes (--force-unload)
// cannot help either: they come back. Knowable before the cordon.
func (f *Facts) holdersThatStay(gates []string) []string {
	gated := f.Node.DeepCopy()
	if gated.Labels == nil {
		gated.Labels = map[string]string{}
	}
	for _, g := range gates {
		gated.Labels[g] = "false"
	}
	unschedulable := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	var out []string
	for _, h := range f.deviceHolders() {
		p := &h.Pod
		ds := daemonSetOf(p)
		selects := p
		if ds != "" {
			// The DaemonSet controller replaces its pods' required affinity
			// with their node's name: the template has the gate.
			tpl := f.HolderTemplates[p.Namespace+"/"+ds]
			if tpl == nil {
				continue // not read (gone): nothing to judge by
			}
			selects = &corev1.Pod{Spec: tpl.Spec}
		}
		if ok, err := nodeaffinity.GetRequiredNodeAffinity(selects).Match(gated); err != nil || !ok {
			continue // leaves once the gates close
		}
		pod := fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, h.Why)
		switch {
		case ds != "":
			gate := DefaultDeployGate
			if len(gates) > 0 {
				gate = gates[0]
			}
			out = append(out, fmt.Sprintf("DaemonSet %s/%s holds /dev/tenstorrent (pod %s) and stays on the node through the "+
				"cordon: its pods select none of the deploy gates (%s). Give it a deploy gate (nodeAffinity %s NotIn [\"false\"]), "+
				"or name a label it already selects on with --deploy-gate; --force-unload cannot help, the DaemonSet restarts it",
				p.Namespace, ds, pod, strings.Join(gates, ", "), gate))
		case metav1.GetControllerOf(p) != nil && tolerates(p, unschedulable):
			out = append(out, fmt.Sprintf("pod %s holds /dev/tenstorrent and tolerates the cordon (%s), so its controller's "+
				"replacement may be placed on the node again: drop that toleration, or scale its controller down while the node "+
				"is upgraded", pod, corev1.TaintNodeUnschedulable))
		}
	}
	sort.Strings(out)
	return out
}

// tolerates is the scheduler's toleration match for a taint without a
// value (an empty key with Exists tolerates every taint).
func tolerates(p *corev1.Pod, taint corev1.Taint) bool {
	for _, t := range p.Spec.Tolerations {
		keyMatches := t.Key == taint.Key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)
		valueMatches := t.Operator == corev1.TolerationOpExists || t.Value == taint.Value
		if (t.Effect == "" || t.Effect == taint.Effect) && keyMatches && valueMatches {
			return true
		}
	}
	return false
}

// describeHolderPods names holders; DaemonSet pods, which neither a drain
// nor an eviction moves, get the fix spelled out.
func describeHolderPods(hs []holder) string {
	var lines []string
	for _, h := range hs {
		s := fmt.Sprintf("%s/%s (%s)", h.Pod.Namespace, h.Pod.Name, h.Why)
		if ds := daemonSetOf(&h.Pod); ds != "" {
			s += fmt.Sprintf("; DaemonSet %s/%s does not leave when the node is cordoned: give it a deploy gate "+
				"(nodeAffinity %s NotIn [\"false\"], then --deploy-gate %s)", h.Pod.Namespace, ds,
				DefaultDeployGate, DefaultDeployGate)
		}
		lines = append(lines, s)
	}
	sort.Strings(lines)
	if len(lines) > 5 {
		lines = append(lines[:5], fmt.Sprintf("and %d more", len(lines)-5))
	}
	return strings.Join(lines, "; ")
}

func daemonSetOf(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return o.Name
		}
	}
	return ""
}
