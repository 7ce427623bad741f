package tt

import (
	"strings"
	"testing"
	"time"
)

// Every command the runbooks build is one of its task's grammar: the
// admission policy admits exactly the grammar, so a builder that drifted
// from it would have its helpers refused. Every combination of the
// optional inputs is built.
func TestCommandsMatchTheirGrammar(t *testing.T) {
	h := HelperConfig{Image: "i", Namespace: "ns", Timeout: 10 * time.Minute}
	for mask := range 1 << 5 {
		on := func(bit int) bool { return mask&(1<<bit) != 0 }
		kmd := &KMDConfig{Version: "2.8.0", Helper: h, ForceUnload: on(0)}
		if on(1) {
			kmd.Commit = strings.Repeat("a", 40)
		}
		if on(2) {
			kmd.GitURL = "file:///srv/mirror/tt-kmd.git"
		}
		if on(3) {
			kmd.Version = "1.34"
		}
		for _, commit := range []string{"", strings.Repeat("c", 40)} {
			check(t, "kmd-build", KMDBuildHelperSpec(kmd, "n", commit).Command)
			check(t, "kmd", KMDHelperSpec(kmd, "n", commit, nil).Command)
			for _, signer := range []string{"", strings.Repeat("5", 64)} {
				m := &VouchedModule{ConfigMap: "tt-kmd-0123456789abcdef", SHA256: strings.Repeat("b", 64), Signer: signer}
				check(t, "kmd", KMDHelperSpec(kmd, "n", commit, m).Command)
			}
		}
		check(t, "probe", kmdProbeCommand(kmd))
		fw := &FirmwareConfig{Version: "19.0.0", Readback: "19.0.0.0", BundleURL: "https://b.example/fw.fwbundle",
			FlashTimeout: 15 * time.Minute, ForceUnload: on(0), ForceWrite: on(1), AllowMajorDowngrade: on(2),
			ContinueOnReadbackFailure: on(3)}
		if on(4) {
			fw.BundleURL += "?X-Amz-Signature=1"
			fw.BundleSHA256 = strings.Repeat("B", 64)
		}
		check(t, "flash", flashCommand(fw))
	}
	check(t, "smi", smiCommand("3.0.1"))
	check(t, "probe", agentCommand("probe"))
	check(t, "clean-cache", CleanCacheSpec(h, "n").Command)
	for _, bad := range [][]string{
		{"kubectl-tt", "node-agent", "probe"},
		{AgentPath, "node-agent", "probe", "--host-root", "/tmp"},
		{AgentPath, "node-agent", "smi", "--version", "3.0.1", "--version", "3.0.2"},
		{AgentPath, "node-agent", "smi", "--version", "-3.0.1"},
		{AgentPath, "node-agent", "smi", "--version", "3.0.1\n--force"},
	} {
		if HelperGrammars[bad[2]].Match(bad) {
			t.Errorf("%q matches the %s grammar", bad, bad[2])
		}
	}
}

func check(t *testing.T, task string, argv []string) {
	t.Helper()
	if !HelperGrammars[task].Match(argv) {
		t.Errorf("the %s command %q does not match its grammar %s", task, argv, HelperGrammars[task].Pattern())
	}
}
