package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Substrate ships its own kubectl-ate; ours must also work installed under
// nested names (kubectl-ate-version, kubectl-ate-roll, …) so both coexist.
// This runs the real kubectl, which picks the longest matching binary.
func TestNestedPluginLayoutWithRealKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH; the nested layout needs the real kubectl to be tested")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "rollbook-ate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// A stand-in for Substrate's own kubectl-ate, which must still answer
	// everything we do not install a nested binary for.
	other := filepath.Join(dir, "kubectl-ate")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho substrate-kubectl-ate \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "kubectl-ate-version")); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin", "KUBECONFIG=/dev/null")
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
