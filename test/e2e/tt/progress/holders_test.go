//go:build e2e

package progress

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/internal/simtest"
)

// holders puts one pod holding /dev/tenstorrent on node under a PDB that
// allows no disruption, and waits until the PDB counts it healthy: the
// kmd upgrade then stops at its guard, before the cordon, for a person.
func holders(t *testing.T, ctx context.Context, ns, name, node string) {
	t.Helper()
	cs := simtest.Get(t).Client
	lbl := map[string]string{"app": name}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
				NodeName: node,
				Volumes: []corev1.Volume{{Name: "dev", VolumeSource: corev1.VolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: "/dev/tenstorrent"}}}},
				Containers: []corev1.Container{{Name: "c", Image: "example.com/" + name,
					VolumeMounts: []corev1.VolumeMount{{Name: "dev", MountPath: "/dev/tenstorrent"}}}}}}}}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := intstr.FromInt(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name + "-pdb", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: lbl}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name+"-pdb", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1 && p.Status.ExpectedPods == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("PDB %s/%s-pdb never counted its pod healthy", ns, name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
