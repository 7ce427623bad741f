package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// releaseTag keeps golang.org/x/net/trace out of the plugin. grpc imports it
// unless built with this tag, and its html/template makes the linker keep
// every exported method of every linked type: kubectl-ate grew from 52 to
// 83 MB, and every command paged ~20 MB more of itself into memory.
const releaseTag = "grpcnotrace"

// Every way the project builds the plugin for users passes the tag, and with
// it nothing links golang.org/x/net/trace (a new import of it, or a grpc
// that stops honouring the tag, fails here).
func TestReleaseBuildsLeaveOutGRPCTrace(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if !regexp.MustCompile(`(?m)^BUILD_TAGS := .*\b` + releaseTag + `\b`).MatchString(read("Makefile")) {
		t.Errorf("Makefile: BUILD_TAGS does not name %s", releaseTag)
	}
	if !strings.Contains(read("Makefile"), "build -tags $(BUILD_TAGS) -o $(BIN)/") {
		t.Errorf("Makefile: the build target does not pass -tags $(BUILD_TAGS)")
	}
	if !regexp.MustCompile(`(?m)^\s+tags: \[` + releaseTag + `\]`).MatchString(read(".goreleaser.yaml")) {
		t.Errorf(".goreleaser.yaml: the plugin builds do not set tags: [%s]", releaseTag)
	}
	for _, line := range regexp.MustCompile(`(?m)^go install .*$`).FindAllString(read("README.md"), -1) {
		if !strings.Contains(line, "-tags "+releaseTag) {
			t.Errorf("README.md: %q installs without -tags %s", line, releaseTag)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-tags", releaseTag, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "golang.org/x/net/trace" || pkg == "html/template" {
			t.Errorf("built with -tags %s, kubectl-ate still links %s", releaseTag, pkg)
		}
	}
}
