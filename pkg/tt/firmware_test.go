package tt

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

func TestFirmwareFinishedIsMeasured(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	rec := func(readback, run string, at time.Time) string {
		b, _ := json.Marshal(firmwareRecord{Readback: readback, Run: run, At: at})
		return string(b)
	}
	label := map[string]string{LabelFirmware: "19.9.0.0"}
	cfg := &FirmwareConfig{Version: "19.9.0", Readback: "19.9.0.0", RunID: "r1"}
	forced := &FirmwareConfig{Version: "19.9.0", Readback: "19.9.0.0", RunID: "r1", ForceWrite: true, ForceSince: t0}
	for _, tc := range []struct {
		name string
		cfg  *FirmwareConfig
		node *corev1.Node
		want bool
	}{
		{"label only", cfg, nodeWith(label, nil), false},
		{"this run's flash", cfg, nodeWith(label, map[string]string{AnnFirmwareResult: rec("19.9.0.0", "r1", t0)}), true},
		{"an older run's flash", cfg, nodeWith(label, map[string]string{AnnFirmwareResult: rec("19.9.0.0", "r0", t0)}), false},
		{"this run's probe read every device at the target", cfg, nodeWith(label, map[string]string{
			AnnProbe: probeJSON(t, ProbeRecord{Run: "r1", Firmware: []string{"19.9.0.0", "19.9.0.0"}})}), true},
		{"this run's probe found a chip behind", cfg, nodeWith(label, map[string]string{
			AnnProbe: probeJSON(t, ProbeRecord{Run: "r1", Firmware: []string{"19.9.0.0", "18.2.0.0"}})}), false},
		{"forced: flashed before the campaign", forced, nodeWith(label, map[string]string{
			AnnFirmwareResult: rec("19.9.0.0", "r0", t0.Add(-time.Minute))}), false},
		{"forced: flashed during the campaign", forced, nodeWith(label, map[string]string{
			AnnFirmwareResult: rec("19.9.0.0", "r0", t0.Add(time.Minute))}), true},
	} {
		if got := tc.cfg.fwFinished(tc.node); got != tc.want {
			t.Errorf("%s: finished = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFirmwareCordonGuards(t *testing.T) {
	cfg := &FirmwareConfig{Version: "19.9.0", Readback: "19.9.0.0", RunID: "r1", MaxParallel: 2,
		Helper: HelperConfig{Image: "img", Namespace: "kube-system"}}
	cordon := stepsByID(FirmwareRunbook(nil, nil, cfg))["tt.fw.cordon"]
	loaded := &ProbeRecord{Run: "r1", KMD: "2.8.0"}
	for _, tc := range []struct {
		name string
		f    Facts
		why  string // "" = allowed
	}{
		{"clean", Facts{Measured: loaded}, ""},
		{"no module", Facts{Measured: &ProbeRecord{Run: "r1"}}, "tt-kmd is not loaded"},
		{"host holder", Facts{Measured: &ProbeRecord{Run: "r1", KMD: "2.8.0", Holders: []nodeagent.Holder{{PID: 9, Comm: "x"}}}},
			"pid 9 (x)"},
		{"budget spent by nodes left cordoned", Facts{Measured: loaded, OthersOut: 2}, "already out of service"},
		{"budget left", Facts{Measured: loaded, OthersOut: 1}, ""},
		{"minor downgrade", Facts{Measured: &ProbeRecord{Run: "r1", KMD: "2.8.0", Firmware: []string{"19.10.0.0"}}}, ""},
		{"major downgrade, per board with the case", Facts{Measured: &ProbeRecord{Run: "r1", KMD: "2.8.0",
			Firmware: []string{"19.9.0.0", "20.1.0.0"}, Boards: []string{"n150", "p150a"}}},
			"major downgrade to 19.9.0.0: device 1 (p150a) runs 20.1.0.0; tt-flash refuses it without --allow-major-downgrades — " +
				"re-run with --allow-major-downgrade if this bundle is really wanted (same ×1, major downgrade ×1)"},
		// The pre-18 scheme is normalised as tt-flash does: 80.19 is 19.
		{"80.x scheme: one major up", Facts{Measured: &ProbeRecord{Run: "r1", KMD: "2.8.0", Firmware: []string{"80.18.2.0"}}}, ""},
		{"80.x scheme: two majors up", Facts{Measured: &ProbeRecord{Run: "r1", KMD: "2.8.0", Firmware: []string{"80.17.2.0"}}},
			"device 0 (unknown) runs 80.17.2.0 (upgrade across more than one major); tt-flash refuses these without --force"},
		{"Galaxy's 0xffffffff", Facts{Measured: &ProbeRecord{Run: "r1", KMD: "2.8.0", Firmware: []string{"19.0.0.0", "255.255.255.255"},
			Boards: []string{"galaxy", "galaxy"}}}, "device 1 (galaxy) runs 255.255.255.255 (no running version)"},
		// The bundle as the probe read it on the node.
		{"the bundle fits", Facts{Measured: withBundle(&nodeagent.BundleFacts{URL: "file:///b", Version: "19.9.0.0",
			Boards: []string{"NEBULA_X1"}}, "n150", "a-card-tt-flash-has-no-name-for")}, ""},
		{"the bundle is another version", Facts{Measured: withBundle(&nodeagent.BundleFacts{URL: "file:///b", Version: "19.0.0.0",
			Boards: []string{"NEBULA_X1"}}, "n150")},
			"the firmware bundle file:///b is version 19.0.0.0, but --version 19.9.0 expects 19.9.0.0: give the bundle of 19.9.0"},
		{"the bundle has no image for a board", Facts{Measured: withBundle(&nodeagent.BundleFacts{URL: "file:///b", Version: "19.9.0.0",
			Boards: []string{"P150A-1"}}, "n150", "n150")},
			"has no image for n150 (device 0; tt-flash looks for NEBULA_X1/image.bin); it has P150A-1"},
		{"the bundle cannot be read", Facts{Measured: withBundle(&nodeagent.BundleFacts{URL: "file:///b", Error: "not readable"})},
			"the firmware bundle file:///b cannot be used: not readable — fix --bundle-url"},
	} {
		tc.f.Owner, tc.f.Node = FirmwareRunbookName, nodeWith(nil, nil)
		why := ""
		for _, g := range cordon.Guards {
			if ok, reason := g.Check(tc.f); !ok {
				why = reason
				break
			}
		}
		if (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s: guard says %q, want %q", tc.name, why, tc.why)
		}
	}
}

func TestSMISteps(t *testing.T) {
	cfg := &SMIConfig{Version: "5.2.0", Helper: HelperConfig{Image: "img", Namespace: "kube-system"}, RunID: "r1"}
	steps := stepsByID(SMIRunbook(nil, nil, cfg))
	ok, _ := nodeagent.EncodeResult(nodeagent.Result{Op: nodeagent.OpSMI, Success: true, After: "5.2.0"})
	done := helperOf(renderedHelper(helperSpec(cfg.Helper, "smi", "n1", "5.2.0", agentCommand("smi", "--version", "5.2.0"), false, "r1"), corev1.PodSucceeded, string(ok)))
	// The same name and a success message, but another image: not ours.
	forgedPod := renderedHelper(helperSpec(cfg.Helper, "smi", "n1", "5.2.0", agentCommand("smi", "--version", "5.2.0"), false, "r1"), corev1.PodSucceeded, string(ok))
	forgedPod.Spec.Containers[0].Image = "example.com/other"
	forged := helperOf(forgedPod)
	for _, tc := range []struct {
		name, step string
		f          Facts
		want       bool
	}{
		{"not installed", "tt.smi.install", Facts{Node: nodeWith(nil, nil)}, false},
		{"a pod with the helper's name and another image", "tt.smi.install", Facts{Node: nodeWith(nil, nil), Helper: forged}, false},
		{"helper measured it", "tt.smi.install", Facts{Node: nodeWith(nil, nil), Helper: done}, true},
		{"label missing", "tt.smi.label", Facts{Node: nodeWith(nil, nil), Helper: done}, false},
		{"labelled", "tt.smi.label", Facts{Node: nodeWith(nil, nil), Finished: true}, true},
		{"helper left", "tt.smi.cleanup", Facts{Node: nodeWith(nil, nil), Finished: true, Helper: done}, false},
		{"clean", "tt.smi.cleanup", Facts{Node: nodeWith(nil, nil), Finished: true}, true},
	} {
		if got, ev := steps[tc.step].Done(tc.f); got != tc.want {
			t.Errorf("%s: %s done = %v (%s), want %v", tc.name, tc.step, got, ev, tc.want)
		}
	}
	if ok, _ := steps["tt.smi.label"].Guards[0].Check(Facts{Node: nodeWith(nil, nil)}); ok {
		t.Error("labelled without a measurement")
	}
	// The probe measured the target binary: no helper, only the label.
	atTarget := Facts{Node: nodeWith(nil, nil), Measured: &ProbeRecord{Run: "r1", SMI: "5.2.0"}}
	if done, _ := steps["tt.smi.install"].Done(atTarget); !done {
		t.Error("a host measured at the target gets a helper")
	}
	if ok, why := steps["tt.smi.label"].Guards[0].Check(atTarget); !ok {
		t.Errorf("the probe's measurement does not allow the label: %s", why)
	}
	// A label at the target over another binary is work.
	lying := Facts{Node: nodeWith(map[string]string{LabelSMIVersion: "5.2.0"}, nil), Measured: &ProbeRecord{Run: "r1", SMI: "5.0.0"}}
	if done, _ := steps["tt.smi.install"].Done(lying); done {
		t.Error("a label at the target hid the host's other tt-smi")
	}
	n := nodeWith(map[string]string{LabelSMIVersion: "5.2.0"}, map[string]string{AnnProbe: probeJSON(t, ProbeRecord{Run: "r1", SMI: "5.0.0"})})
	if smiFinished(n, "5.2.0", "r1") {
		t.Error("finished by the label alone")
	}
}

// The checksum pin reaches the helper's command; a presigned URL does not:
// the helper reads it from the Secret, by name, through its env.
func TestFirmwareBundlePinAndQuery(t *testing.T) {
	sum := strings.Repeat("AB", 32)
	c := &FirmwareConfig{Version: "19.9.0", BundleSHA256: sum, FlashTimeout: 15 * time.Minute,
		Helper: HelperConfig{Image: "registry.example/node-agent:1", Namespace: "rollbook-system"}}
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cmd := strings.Join(flashCommand(c), " ")
	if !strings.Contains(cmd, "--bundle-sha256 "+strings.ToLower(sum)) {
		t.Errorf("pin missing from the helper command: %s", cmd)
	}
	if c.Presigned() || c.bundleEnv() != nil {
		t.Errorf("a URL without a query goes in the command, not a Secret")
	}
	c.BundleURL = "https://mirror.example/fw?X-Amz-Signature=sig0123"
	if err := c.Validate(); err != nil {
		t.Fatalf("a presigned URL is accepted: %v", err)
	}
	cmd = strings.Join(flashCommand(c), " ")
	env := c.bundleEnv()
	// Only the URL's query is secret: the rest goes in the command, where
	// the admission policy checks it against the admin's prefixes.
	if strings.Contains(cmd, "sig0123") || !strings.Contains(cmd, "--bundle-url-base https://mirror.example/fw ") ||
		!strings.Contains(cmd, "--bundle-url-env "+EnvBundleURL) ||
		len(env) != 1 || env[0].ValueFrom.SecretKeyRef.Name != BundleSecretName || env[0].Value != "" {
		t.Errorf("a presigned URL must reach the helper through Secret %s only: command %s, env %+v", BundleSecretName, cmd, env)
	}
	c.BundleURL = "file://host.example/fw?X-Amz-Signature=sig0123"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "sig0123") {
		t.Errorf("want a refusal that does not echo the signature, got %v", err)
	}
	c.BundleURL, c.BundleSHA256 = "", "xyz"
	c.Complete()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--bundle-sha256") {
		t.Errorf("a malformed pin: %v", err)
	}
}

func withBundle(b *nodeagent.BundleFacts, boards ...string) *ProbeRecord {
	r := &ProbeRecord{Run: "r1", KMD: "2.8.0", Bundle: b, Boards: boards}
	for range boards {
		r.Firmware = append(r.Firmware, "18.2.0.0")
	}
	return r
}
