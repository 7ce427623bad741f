package tt

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func hostPathPod(uid, p string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID("uid-" + uid)},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: p}}}}}}
}

func TestHoldReason(t *testing.T) {
	plugin := corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-plugin"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"tenstorrent.com/n300": resource.MustParse("1")}}}}}}
	gpu := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
	for _, tc := range []struct {
		name     string
		pod      corev1.Pod
		measured map[string]bool
		want     string
	}{
		{"device dir", hostPathPod("a", "/dev/tenstorrent"), nil, "mounts /dev/tenstorrent"},
		{"one device", hostPathPod("b", "/dev/tenstorrent/0/"), nil, "mounts /dev/tenstorrent/0"},
		{"csi plugin mounting /dev", hostPathPod("c", "/dev"), nil, ""},
		{"privileged /dev pod seen holding it", hostPathPod("d", "/dev"), map[string]bool{"uid-d": true}, "measured on the node"},
		{"lookalike path", hostPathPod("e", "/dev/tenstorrent-backup"), nil, ""},
		{"device plugin resource", plugin, nil, "requests tenstorrent.com/n300"},
		{"other extended resource", gpu, nil, ""},
	} {
		got := holdReason(&tc.pod, tc.measured)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: holdReason = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func nodeWith(labels, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels, Annotations: ann}}
}

func probeJSON(t *testing.T, r ProbeRecord) string {
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestKMDFinishedIsMeasured(t *testing.T) {
	rec := func(after, run string) string {
		b, _ := json.Marshal(kmdRecord{After: after, Run: run})
		return string(b)
	}
	label := map[string]string{LabelKMDVersion: "2.8.0"}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"label only (set by hand)", nodeWith(label, nil), false},
		{"label and this run's helper", nodeWith(label, map[string]string{AnnKMDResult: rec("2.8.0", "r1")}), true},
		{"label and an older run's helper (maybe another kernel since)", nodeWith(label, map[string]string{AnnKMDResult: rec("2.8.0",
			"r0")}), false},
		{"measured but not labelled", nodeWith(nil, map[string]string{AnnKMDResult: rec("2.8.0", "r1")}), false},
		{"this run's probe measured the target", nodeWith(label, map[string]string{AnnProbe: probeJSON(t, ProbeRecord{Run: "r1",
			KMD: "2.8.0"})}), true},
		{"this run's probe found no module (reboot)", nodeWith(label, map[string]string{AnnKMDResult: rec("2.8.0", "r0"),
			AnnProbe: probeJSON(t, ProbeRecord{Run: "r1"})}), false},
		{"this run's helper wins over its probe", nodeWith(label, map[string]string{AnnKMDResult: rec("2.8.0", "r1"),
			AnnProbe: probeJSON(t, ProbeRecord{Run: "r1", KMD: "2.7.0"})}), true},
	} {
		if got := kmdFinished(tc.node, "2.8.0", "r1"); got != tc.want {
			t.Errorf("%s: finished = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestKMDBlockers(t *testing.T) {
	clean := ProbeRecord{Run: "r1", Kernel: "6.8.0-45-generic", KMD: "2.7.0", Headers: true, Toolchain: true}
	for _, tc := range []struct {
		name  string
		rec   ProbeRecord
		force bool
		want  string // "" = no blocker
	}{
		{"clean", clean, false, ""},
		{"DKMS", func() ProbeRecord { r := clean; r.DKMS = []string{"/var/lib/dkms/tenstorrent"}; return r }(), false, "host-managed"},
		{"cache miss without headers", func() ProbeRecord { r := clean; r.Headers = false; return r }(), false,
			"linux-headers-6.8.0-45-generic"},
		// The node's own cache is no voucher: a node without headers needs
		// the module another node built and kubectl tt vouched for.
		{"cached here, without headers", func() ProbeRecord { r := clean; r.Headers, r.Cached = false, true; return r }(), false,
			"linux-headers-6.8.0-45-generic"},
		{"vouched, without headers", func() ProbeRecord { r := clean; r.Headers, r.Run = false, "vouched"; return r }(), false, ""},
		{"host process holds the device", func() ProbeRecord {
			r := clean
			r.Holders = []nodeagent.Holder{{PID: 7777, Comm: "bench"}, {PID: 8, PodUID: "p"}}
			return r
		}(), false, "pid 7777 (bench)"},
		{"host process, --force-unload", func() ProbeRecord { r := clean; r.Holders = []nodeagent.Holder{{PID: 7777}}; return r }(), true,
			""},
		{"host process, at the target", func() ProbeRecord {
			r := clean
			r.KMD, r.Holders, r.LoadedCommit = "2.8.0", []nodeagent.Holder{{PID: 7777}}, strings.Repeat("c", 40)
			return r
		}(), false, ""},
		{"at the target, another commit's build", func() ProbeRecord {
			r := clean
			r.KMD, r.LoadedCommit = "2.8.0", strings.Repeat("e", 40)
			return r
		}(), false, "built from commit eeee"},
		{"no tag", func() ProbeRecord { r := clean; r.Tag = &nodeagent.TagCheck{Tag: "ttkmd-2.8.0", URL: "u"}; return r }(), false,
			"u has no tag ttkmd-2.8.0"},
		{"remote unreachable", func() ProbeRecord {
			r := clean
			r.Tag = &nodeagent.TagCheck{Tag: "ttkmd-2.8.0", URL: "u", Error: "exit 128"}
			return r
		}(), false, "cannot list tag ttkmd-2.8.0 at u (exit 128)"},
		{"no tag, but vouched", func() ProbeRecord { r := clean; r.Run, r.Tag = "vouched", &nodeagent.TagCheck{}; return r }(), false, ""},
		{"the tag moved from the pin", func() ProbeRecord {
			r := clean
			r.Tag = &nodeagent.TagCheck{Tag: "ttkmd-2.8.0", URL: "u", Found: true, Commit: strings.Repeat("d", 40)}
			return r
		}(), false, "names commit dddd"},
		{"signed modules only, no key", func() ProbeRecord {
			r := clean
			r.LoadRefused, r.SignatureRequired = "the kernel refuses unsigned modules", true
			return r
		}(), false, "refuses unsigned modules; tt-kmd 2.7.0 stays loaded"},
		{"headers name a missing compiler", func() ProbeRecord { r := clean; r.Toolchain, r.CC = false, "gcc-12"; return r }(), false,
			"install gcc-12"},
		{"unsigned modules refused", func() ProbeRecord { r := clean; r.LoadRefused = "kernel.modules_disabled is 1"; return r }(),
			false, "kernel.modules_disabled is 1; tt-kmd 2.7.0 stays loaded"},
		{"unsigned modules refused, at the target", func() ProbeRecord {
			r := clean
			r.KMD, r.LoadRefused, r.LoadedCommit = "2.8.0", "kernel.modules_disabled is 1", strings.Repeat("c", 40)
			return r
		}(), false, ""},
		{"cards gone", func() ProbeRecord { r := clean; r.KMD, r.PCIDevices = "2.8.0", ptr.To(0); return r }(), false,
			"no Tenstorrent PCI device"},
		{"cards there", func() ProbeRecord { r := clean; r.PCIDevices, r.BoundDevices = ptr.To(2), 2; return r }(), false, ""},
	} {
		f := &Facts{Measured: &tc.rec}
		if tc.rec.Run == "vouched" {
			f.Shared = &SharedModule{}
		}
		got := strings.Join(kmdBlockers(&KMDConfig{Version: "2.8.0", Commit: strings.Repeat("c", 40), ForceUnload: tc.force})(f), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: blockers %q, want %q", tc.name, got, tc.want)
		}
	}
}

// stepsByID indexes a runbook's steps.
func stepsByID(rb *runbook.Runbook[Facts]) map[string]runbook.Step[Facts] {
	out := map[string]runbook.Step[Facts]{}
	for _, s := range rb.Steps {
		out[s.ID] = s
	}
	return out
}

func TestKMDStepsDoneAndGuards(t *testing.T) {
	cfg := &KMDConfig{Version: "2.8.0", Drain: true, FullNode: true, DeployGates: []string{DefaultDeployGate},
		Helper: HelperConfig{Image: "img", Namespace: "kube-system"}, RunID: "r1"}
	steps := stepsByID(KMDRunbook(nil, nil, cfg))
	ours := func(n *corev1.Node) *corev1.Node {
		n.Spec.Unschedulable = true
		n.Annotations = map[string]string{kube.AnnCordonedBy: KMDRunbookName}
		return n
	}
	fresh := &ProbeRecord{Run: "r1", KMD: "2.7.0", Headers: true, Toolchain: true}
	telemetry := hostPathPod("telemetry", "/dev/tenstorrent")
	csi := hostPathPod("csi", "/dev")
	for _, tc := range []struct {
		name string
		f    Facts
		step string
		done bool
	}{
		{"finished skips the probe", Facts{Finished: true, Node: nodeWith(nil, nil)}, "tt.kmd.probe", true},
		{"unprobed node is probed", Facts{Node: nodeWith(nil, nil)}, "tt.kmd.probe", false},
		{"probed by this run", Facts{Node: nodeWith(nil, nil), Measured: fresh}, "tt.kmd.probe", true},
		{"probed by an older run", Facts{Node: nodeWith(nil, nil), Measured: &ProbeRecord{Run: "r0"}}, "tt.kmd.probe", false},
		{"not cordoned yet", Facts{Node: nodeWith(nil, nil), Measured: fresh}, "tt.kmd.cordon", false},
		{"cordoned by us", Facts{Node: ours(nodeWith(nil, nil))}, "tt.kmd.cordon", true},
		{"a device pod is left", Facts{Node: ours(nodeWith(nil, nil)), Pods: []corev1.Pod{telemetry}}, "tt.kmd.evict-device-pods", false},
		{"only a CSI pod mounting /dev", Facts{Node: ours(nodeWith(nil, nil)), Pods: []corev1.Pod{csi}}, "tt.kmd.evict-device-pods", true},
		{"gates open", Facts{Node: ours(nodeWith(map[string]string{DefaultDeployGate: "true"}, nil))}, "tt.kmd.close-gates", false},
	} {
		tc.f.Owner = KMDRunbookName
		if done, ev := steps[tc.step].Done(tc.f); done != tc.done {
			t.Errorf("%s: %s done = %v (%s), want %v", tc.name, tc.step, done, ev, tc.done)
		}
	}
	// At the target with nothing in the way, only the label is written.
	atTarget := &ProbeRecord{Run: "r1", KMD: "2.8.0", PCIDevices: ptr.To(2), BoundDevices: 2}
	for _, id := range []string{"tt.kmd.cordon", "tt.kmd.close-gates", "tt.kmd.evict-device-pods", "tt.kmd.drain", "tt.kmd.install"} {
		f := Facts{Owner: KMDRunbookName, Node: nodeWith(map[string]string{DefaultDeployGate: "true"}, nil), Measured: atTarget,
			Pods: []corev1.Pod{telemetry}}
		if done, ev := steps[id].Done(f); !done || !strings.Contains(ev, "only the label") {
			t.Errorf("at the target: %s done = %v (%s), want done for a label", id, done, ev)
		}
		gone := *atTarget
		gone.PCIDevices = ptr.To(0)
		f.Measured = &gone
		if done, _ := steps[id].Done(f); done && id == "tt.kmd.cordon" {
			t.Errorf("cards gone: %s done, want the cordon refused by the probe", id)
		}
	}
	// A skip label written after the run started is honoured before the probe.
	probe := steps["tt.kmd.probe"]
	if ok, why := probe.Guards[0].Check(Facts{Node: nodeWith(nil, nil), Skip: LabelDriverSkip + "=true"}); ok ||
		!strings.Contains(why, "excluded") {
		t.Errorf("a node labelled skip mid-run was not left alone: %v %q", ok, why)
	}
	// The cordon waits for this run's probe and refuses what it found.
	cordon := steps["tt.kmd.cordon"]
	guard := func(f Facts) (bool, string) {
		f.Owner = KMDRunbookName
		for _, g := range cordon.Guards {
			if ok, why := g.Check(f); !ok {
				return false, why
			}
		}
		return true, ""
	}
	if ok, _ := guard(Facts{Node: nodeWith(nil, nil)}); ok {
		t.Error("cordon allowed without a probe")
	}
	if ok, why := guard(Facts{Node: nodeWith(nil, nil), Measured: fresh}); !ok {
		t.Errorf("cordon refused after a clean probe: %s", why)
	}
	other := nodeWith(nil, map[string]string{kube.AnnCordonedBy: FirmwareRunbookName})
	other.Spec.Unschedulable = true
	if ok, why := guard(Facts{Node: other, Measured: fresh}); ok || !strings.Contains(why, "rollbook tt-firmware") {
		t.Errorf("a node cordoned by tt-firmware must be foreign to tt-kmd: %v %q", ok, why)
	}
}

// The pods kubectl tt renders: the probe reads the host unprivileged, the
// tasks have requests, limits and the PriorityClass, and only an explicit
// choice puts a helper on a control-plane node.
func TestHelperPodShape(t *testing.T) {
	h := HelperConfig{Image: "img", Namespace: "rollbook-system", PriorityClass: "rollbook-helper"}
	probe := probeSpec(h, "n1", "r1", agentCommand("probe")).Pod()
	c := probe.Spec.Containers[0]
	if *c.SecurityContext.Privileged || !c.VolumeMounts[0].ReadOnly || c.SecurityContext.Capabilities == nil ||
		len(c.SecurityContext.Capabilities.Drop) != 1 || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("probe: privileged %v, read-only %v, capabilities %+v", *c.SecurityContext.Privileged, c.VolumeMounts[0].ReadOnly,
			c.SecurityContext.Capabilities)
	}
	kmd := helperSpec(h, "kmd", "n1", "2.8.0", []string{"kubectl-tt", "node-agent", "kmd"}, true, "r1").Pod()
	k := kmd.Spec.Containers[0]
	if !*k.SecurityContext.Privileged || k.VolumeMounts[0].ReadOnly || k.Resources.Requests.Memory().IsZero() ||
		k.Resources.Limits.Memory().IsZero() || kmd.Spec.PriorityClassName != "rollbook-helper" || *kmd.Spec.AutomountServiceAccountToken {
		t.Errorf("kmd helper: %+v", kmd.Spec)
	}
	// The admin's node label is required, and the control-plane role absent.
	terms := kmd.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 || terms[0].MatchExpressions[0].Key != LabelPCIPresent ||
		terms[0].MatchExpressions[0].Operator != corev1.NodeSelectorOpIn || len(terms[0].MatchExpressions[0].Values) != 1 ||
		terms[0].MatchExpressions[0].Values[0] != "true" || terms[0].MatchExpressions[1].Key != kube.LabelControlPlane || terms[0].MatchExpressions[1].Operator != corev1.NodeSelectorOpDoesNotExist {
		t.Errorf("kmd helper affinity: %+v", terms)
	}
	h.OnControlPlane = true
	p := helperSpec(h, "kmd", "n1", "2.8.0", []string{"kubectl-tt", "node-agent", "kmd"}, true, "r1").Pod()
	if terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; len(terms) != 1 ||
		len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Key != LabelPCIPresent {
		t.Errorf("--helper-on-control-plane: the admin's node label must stay, the control-plane term go: %+v", terms)
	}
}

// --git-url reaches the kmd helper's command; without it the upstream
// repository is named there all the same, so the admission policy always
// sees which repository the node builds from.
func TestKMDGitURL(t *testing.T) {
	c := &KMDConfig{Version: "2.8.0", Helper: HelperConfig{Image: "registry.example/node-agent:1", Namespace: "ns"}}
	if cmd := strings.Join(kmdArgv(c), " "); !strings.Contains(cmd, "--git-url "+nodeagent.DefaultKMDGitURL) {
		t.Errorf("no --git-url given, and the upstream repository is not named: %s", cmd)
	}
	c.GitURL = "file:///srv/mirror/tt-kmd.git"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if cmd := strings.Join(kmdArgv(c), " "); !strings.Contains(cmd, "--git-url "+c.GitURL) {
		t.Errorf("--git-url missing from the helper command: %s", cmd)
	}
	if cmd := strings.Join(kmdProbeCommand(c), " "); !strings.Contains(cmd, "--git-url "+c.GitURL) {
		t.Errorf("--git-url missing from the probe (it looks the tag up where the build clones): %s", cmd)
	}
	c.GitURL = "https://mirror.example/tt-kmd.git?token=secret"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a query string: %v", err)
	}
}

// The commit pin reaches the kmd helper's command; a short one is refused.
func TestKMDCommitPin(t *testing.T) {
	pin := strings.Repeat("c", 40)
	c := &KMDConfig{Version: "2.8.0", Commit: pin, Helper: HelperConfig{Image: "registry.example/node-agent:1", Namespace: "ns"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if cmd := strings.Join(kmdArgv(c), " "); !strings.Contains(cmd, "--commit "+pin) {
		t.Errorf("pin missing from the helper command: %s", cmd)
	}
	c.Commit = "cccccc"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--kmd-commit") {
		t.Errorf("an abbreviated commit: %v", err)
	}
}

// --helper-timeout bounds the kmd agent too, inside the pod's deadline.
func TestKMDHelperTimeout(t *testing.T) {
	c := &KMDConfig{Version: "2.8.0", Helper: HelperConfig{Image: "img", Namespace: "ns", Timeout: 40 * time.Minute}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if cmd := strings.Join(kmdArgv(c), " "); !strings.Contains(cmd, "--timeout 39m30s") {
		t.Errorf("the helper's deadline is not the agent's: %s", cmd)
	}
	c.Helper.Timeout = 20 * time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--helper-timeout") {
		t.Errorf("a 20s helper timeout: %v", err)
	}
}

// kmdArgv is the kmd helper's command for a run of c, with c's pin.
func kmdArgv(c *KMDConfig) []string {
	return KMDHelperSpec(c, "n1", c.Commit, nil).Command
}
