package tt

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The hint names a node's platform only when its helper failed to start
// and the node says it is not the release image's platform.
func TestPlatformHintNamesOnlyAnotherPlatform(t *testing.T) {
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels}}
	}
	arm := node(map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: "arm64"})
	pull := "ErrImagePull: no match for platform in manifest"
	for _, c := range []struct {
		name   string
		node   *corev1.Node
		failed string
		want   string
	}{
		{"arm64, pull failed", arm, pull, "node n1 is linux/arm64, and rollbook's release helper image is built for linux/amd64 only"},
		{"arm64, started", arm, "", ""},
		{"amd64", node(map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}), pull, ""},
		{"no platform labels", node(nil), pull, ""},
		{"no node", nil, pull, ""},
	} {
		got := platformHint(c.node, c.failed)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if startFailure(nil) != "" {
		t.Error("startFailure of no pod names a failure")
	}
}
