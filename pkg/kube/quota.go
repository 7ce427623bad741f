package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// QuotaRefusal says whether err is a ResourceQuota's refusal of a create.
// The quota admission plugin answers 403 Forbidden like an RBAC denial,
// told apart only by its message ("exceeded quota: …", "failed quota: …",
// "status unknown for quota: …", "quota usage is negative …",
// "insufficient quota to consume: …" in k8s.io/apiserver's
// pkg/admission/plugin/resourcequota/controller.go), and the fix is
// another person's: the namespace's quota, not a Role.
func QuotaRefusal(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"exceeded quota: ", "failed quota: ", "status unknown for quota: ",
		"quota usage is negative for resource(s): ", "insufficient quota to consume: "} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// QuotaRoom is how many more pods like pod the ResourceQuotas in quotas
// admit — the tightest of them, over the pod count and the CPU, memory
// and ephemeral-storage requests and limits they count — and the quota
// and resource that set it; room is -1 when none limits such pods. A
// quota with scopes is left out: whether it covers the pod depends on
// what admission alone decides (its priority class, deadline, QoS).
func QuotaRoom(quotas []corev1.ResourceQuota, pod *corev1.Pod) (room int64, quota string, resource corev1.ResourceName) {
	need := podQuotaUse(pod)
	room = -1
	for i := range quotas {
		q := &quotas[i]
		if len(q.Spec.Scopes) > 0 || q.Spec.ScopeSelector != nil {
			continue
		}
		for r, hard := range q.Status.Hard {
			n, ok := need[r]
			if !ok || n <= 0 {
				continue
			}
			used := q.Status.Used[r]
			left := max(hard.MilliValue()-used.MilliValue(), 0) / n
			if room < 0 || left < room || (left == room && string(r) < string(resource)) {
				room, quota, resource = left, q.Name, r
			}
		}
	}
	return room, quota, resource
}

// podQuotaUse is what one pod counts against each quota resource, in
// milli-units (the quota evaluator's names: k8s.io/kubernetes
// pkg/quota/v1/evaluator/core/pods.go).
func podQuotaUse(p *corev1.Pod) map[corev1.ResourceName]int64 {
	use := map[corev1.ResourceName]int64{corev1.ResourcePods: 1000, "count/pods": 1000}
	for _, c := range p.Spec.Containers {
		for name, q := range c.Resources.Requests {
			use["requests."+name] += q.MilliValue()
			if name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage {
				use[name] += q.MilliValue()
			}
		}
		for name, q := range c.Resources.Limits {
			use["limits."+name] += q.MilliValue()
		}
	}
	return use
}
