package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every volume kind but emptyDir keeps its data past an eviction (or is
// not the node's to lose); rollbook's own runner holds only scratch.
func TestHasLocalData(t *testing.T) {
	vol := func(src corev1.VolumeSource) corev1.Pod {
		return corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: src}}}}
	}
	for _, c := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"no volumes", corev1.Pod{}, false},
		{"emptyDir", vol(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}), true},
		{"emptyDir in memory", vol(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}), true},
		{"hostPath", vol(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/tenstorrent"}}), false},
		{"configMap", vol(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}), false},
		{"persistentVolumeClaim", vol(corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}), false},
		{"the in-cluster runner's scratch", func() corev1.Pod {
			p := vol(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})
			p.ObjectMeta = metav1.ObjectMeta{Labels: map[string]string{LabelInCluster: "tt"}}
			return p
		}(), false},
	} {
		if got := HasLocalData(&c.pod); got != c.want {
			t.Errorf("%s: HasLocalData = %v, want %v", c.name, got, c.want)
		}
	}
}
