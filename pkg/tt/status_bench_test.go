package tt

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rolledFleet is n nodes as a kmd roll leaves them: a probe record and a
// kmd result on each (what status parses per node), the label at the
// result's version.
func rolledFleet(n int) []corev1.Node {
	out := make([]corev1.Node, n)
	for i := range out {
		out[i] = corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tt-node-%d", i),
			Labels: map[string]string{LabelKMDVersion: "2.8.1", LabelInstallMode: "container", LabelFirmware: "18.2.0.0",
				LabelSMIVersion: "5.0.0", "feature.node.kubernetes.io/kernel-version.full": "6.1.0-29-amd64"},
			Annotations: map[string]string{
				AnnKMDResult: `{"before":"2.7.0","after":"2.8.1","kernel":"6.1.0-29-amd64","commit":"6a8145181d14672aef0bc9ab6773cc9f49026eb2",` +
					`"cacheHit":true,"persisted":true,"kernels":["6.1.0-29-amd64"],"durationMs":5449,"run":"20261204-165249-1451ca",` +
					`"at":"2026-12-04T16:58:30Z"}`,
				AnnProbe: `{"run":"20261204-165249-1451ca","at":"2026-12-04T16:58:11Z","kernel":"6.1.0-29-amd64","kmd":"2.7.0",` +
					`"headers":true,"toolchain":true,"smi":"5.0.0","agentVersion":"v0.9.0","firmware":["18.2.0.0","18.2.0.0"],` +
					`"boards":["n300","n300"],"holders":[{"pid":40718,"comm":"inference","via":"fd","podUID":` +
					`"ae42fc10-7b8a-4dbd-b561-414d601447f1","containerID":` +
					`"cfc2b282ae3dc52e2b7e6a6545c5c42351ba97f7245bdd8e69af08921d5ba64b"},{"pid":41578,"comm":"telemetry","via":"fd",` +
					`"podUID":"fc928715-980c-42ff-b98e-a6b164620065","containerID":` +
					`"9dc239dc31c0037e8bc76a1e8b6b920af8c2a4c1939f6ac65fe8e35ac952550b"}],"tag":{"tag":"ttkmd-2.8.1","url":` +
					`"https://github.com/tenstorrent/tt-kmd.git","found":true,"commit":"6a8145181d14672aef0bc9ab6773cc9f49026eb2"},` +
					`"pciDevices":2,"boundDevices":2}`,
			}}}
	}
	return out
}

// BenchmarkNodeStatusRolledFleet is status's own work per node on 5,000
// nodes a roll has been through (`go test -bench NodeStatus ./pkg/tt`).
func BenchmarkNodeStatusRolledFleet(b *testing.B) {
	nodes := rolledFleet(5000)
	b.ReportAllocs()
	for b.Loop() {
		for i := range nodes {
			if r := nodeStatus(&nodes[i], nil); r.Why != "" {
				b.Fatalf("%s: %s", r.Node, r.Why)
			}
		}
	}
}
