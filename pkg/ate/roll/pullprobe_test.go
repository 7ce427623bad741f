package roll

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func probeNode(name, arch, version string, pulls string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{fleet.VersionLabel: version,
		corev1.LabelArchStable: arch, corev1.LabelOSStable: "linux"}, Annotations: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if pulls != "" {
		n.Annotations[AnnImagePulls] = pulls
	}
	return n
}

// One probe per platform still to move and namespace, only for images no
// node of that platform has pulled; nodes already at the version need none.
func TestPullProbesNeededOncePerPlatform(t *testing.T) {
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "ateom", Image: "img-a"}, {Name: "side", Image: "img-b"}}}
	sets := []pullSet{pullSetOf("ns/p1", "ns", spec), pullSetOf("ns/p2", "ns", spec)}
	keyA := sets[0].imageKey("img-a")
	nodes := []corev1.Node{
		probeNode("b-amd", "amd64", "v1", ""), probeNode("a-amd", "amd64", "v1", ""),
		probeNode("c-arm", "arm64", "v1", keyA), probeNode("d-arm", "arm64", "v2", ""),
		probeNode("e-x86-new", "s390x", "v2", ""),
	}
	got := pullProbesNeeded(sets, nodes, "v2")
	if len(got) != 2 {
		t.Fatalf("%d probes, want 2 (amd64, arm64): %+v", len(got), got)
	}
	amd, arm := got[0], got[1]
	if amd.platform != "linux/amd64" || amd.node.Name != "a-amd" || len(amd.set.images) != 2 || amd.set.pool != "ns/p1, ns/p2" {
		t.Errorf("amd64 probe: %s on %s, images %v, pools %q", amd.platform, amd.node.Name, amd.set.images, amd.set.pool)
	}
	if arm.platform != "linux/arm64" || arm.node.Name != "c-arm" || len(arm.set.images) != 1 || arm.set.images[0] != "img-b" {
		t.Errorf("arm64 probe: %s on %s, images %v (img-a was pulled on c-arm)", arm.platform, arm.node.Name, arm.set.images)
	}
	// Everything pulled everywhere: nothing to probe.
	keyB := sets[0].imageKey("img-b")
	for i := range nodes {
		nodes[i].Annotations[AnnImagePulls] = keyA + "," + keyB
	}
	if got := pullProbesNeeded(sets, nodes, "v2"); len(got) != 0 {
		t.Errorf("%d probes after every pull was recorded", len(got))
	}
}

func TestPullVerdictPerContainer(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Image: "ok", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "StartError"}}},
		{Image: "created", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError"}}},
		{Image: "arm", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull",
			Message: "failed to pull and unpack image: no match for platform in manifest: not found"}}},
		{Image: "down", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: "Back-off pulling image: dial tcp: i/o timeout"}}},
		{Image: "pulling", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
	}}}
	for img, want := range map[string][2]bool{"ok": {true, false}, "created": {true, false}, "arm": {false, true},
		"down": {false, false}, "pulling": {false, false}, "absent": {false, false}} {
		pulled, wrong, _ := pullVerdict(pod, img)
		if pulled != want[0] || (wrong != "") != want[1] {
			t.Errorf("%s: pulled %v, wrong platform %q; want %v, %v", img, pulled, wrong, want[0], want[1])
		}
	}
}

// Pools of one namespace that pull with other credentials (another
// ServiceAccount, other pull Secrets) are each proven with their own, in a
// probe pod of that ServiceAccount; a pull proven with one says nothing of
// another.
func TestPullProbesPerCredentials(t *testing.T) {
	spec := func(sa string, secrets ...string) corev1.PodSpec {
		s := corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "ateom", Image: "img-a"}}}
		for _, n := range secrets {
			s.ImagePullSecrets = append(s.ImagePullSecrets, corev1.LocalObjectReference{Name: n})
		}
		return s
	}
	sets := []pullSet{
		pullSetOf("ns/default", "ns", spec("")), pullSetOf("ns/named-default", "ns", spec("default")),
		pullSetOf("ns/puller", "ns", spec("puller")), pullSetOf("ns/secret", "ns", spec("", "regcred")),
	}
	got := pullProbesNeeded(sets, []corev1.Node{probeNode("a", "amd64", "v1", "")}, "v2")
	if len(got) != 3 {
		t.Fatalf("%d probes, want 3 (default account, puller, regcred): %+v", len(got), got)
	}
	accounts := map[string]string{}
	for _, p := range got {
		pod := p.probePod(DefaultPullTimeout)
		accounts[p.set.pool] = pod.Spec.ServiceAccountName
	}
	if accounts["ns/puller"] != "puller" || accounts["ns/default, ns/named-default"] != "" || accounts["ns/secret"] != "" {
		t.Errorf("probe pods' ServiceAccounts by pools: %v", accounts)
	}
	if sets[0].imageKey("img-a") == sets[2].imageKey("img-a") || sets[0].imageKey("img-a") == sets[3].imageKey("img-a") {
		t.Error("an image pulled with one account's credentials counts for another's")
	}
}
