package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// asPlugin makes the test binary the plugin itself: kubectl runs it under a
// plugin's name with this set, and it runs main instead of the tests. The
// test then needs no `go build` of its own (a second link of the whole
// plugin, most of this package's time under go test -short).
const asPlugin = "ROLLBOOK_TEST_AS_KUBECTL_ATE"

func TestMain(m *testing.M) {
	if os.Getenv(asPlugin) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// Substrate ships its own kubectl-ate; ours must also work installed under
// nested names (kubectl-ate-version, kubectl-ate-roll, …) so both coexist.
// This runs the real kubectl, which picks the longest matching binary.
func TestNestedPluginLayoutWithRealKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH; the nested layout needs the real kubectl to be tested")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A stand-in for Substrate's own kubectl-ate, which must still answer
	// everything we do not install a nested binary for.
	other := filepath.Join(dir, "kubectl-ate")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho substrate-kubectl-ate \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, "kubectl-ate-version")); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin", "KUBECONFIG=/dev/null", asPlugin+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("ate", "version", "-o", "json"); !strings.Contains(out, `"goVersion"`) {
		t.Fatalf("kubectl ate version did not reach our nested binary: %s", out)
	}
	if out := run("ate", "get", "workers"); !strings.Contains(out, "substrate-kubectl-ate get workers") {
		t.Fatalf("kubectl ate get workers did not reach Substrate's kubectl-ate: %s", out)
	}
}
