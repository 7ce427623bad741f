package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// HelperPDB is the PodDisruptionBudget that keeps other tools' drains
// (kured, a node-termination handler, kubectl drain, the cluster
// autoscaler: all evict through the eviction API) from evicting the
// running helper pod p: minAvailable 1 over p alone, so every eviction is
// refused while it runs (a Pending or finished pod the API server evicts
// regardless). It is owned by p, so the garbage collector removes it with
// the pod, whoever deletes it; its name carries p's UID, so a PDB left by
// an earlier pod of the same name is never taken for this one's. A drain
// that deletes instead of evicting (--disable-eviction) meets the helper's
// grace period instead (HelperSpec.GracePeriod).
func HelperPDB(p *corev1.Pod) *policyv1.PodDisruptionBudget {
	sel := map[string]string{}
	for _, k := range []string{LabelHelper, LabelNode, LabelRun} {
		sel[k] = p.Labels[k]
	}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			Name:            HelperPDBName(p),
			Namespace:       p.Namespace,
			Labels:          map[string]string{LabelHelper: p.Labels[LabelHelper], LabelNode: p.Labels[LabelNode]},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: sel},
		},
	}
}

// HelperPDBName is the name of p's PodDisruptionBudget: its name and the
// start of its UID.
func HelperPDBName(p *corev1.Pod) string {
	uid := string(p.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return p.Name + "-" + uid
}

// ProtectHelper creates p's PodDisruptionBudget (HelperPDB) unless it
// exists. It is not recorded: like the pod, it is the helper's own.
func ProtectHelper(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) error {
	if p.UID == "" || PodTerminal(p) {
		return nil
	}
	_, err := cs.PolicyV1().PodDisruptionBudgets(p.Namespace).Create(ctx, HelperPDB(p), metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("protect helper pod %s/%s from other tools' drains: %w (the tt-operator role of deploy/rbac "+
			"grants poddisruptionbudgets create in the helper namespace; re-apply it)", p.Namespace, p.Name, err)
	}
	return fmt.Errorf("protect helper pod %s/%s from other tools' drains: %w", p.Namespace, p.Name, err)
}
