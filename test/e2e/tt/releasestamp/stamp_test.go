//go:build e2e

// Package releasestamp proves the node-agent image's digest travels with
// the binary: both plugins built with .goreleaser.yaml's own ldflags carry
// the image the release built, by digest, and kubectl tt defaults its
// helpers to it; a build that carries none (a pseudo-version from `go
// install`, a tag stamped by mistake) refuses to start a helper until told
// which image to run, before any API call.
package releasestamp

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const digestRef = "ghcr.io/rollbook/node-agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// releaseLDFlags are the builds' ldflags in .goreleaser.yaml with its
// templates filled as a release of v1.2.3 fills them.
func releaseLDFlags(t *testing.T, helperImage string) string {
	t.Helper()
	b, err := os.ReadFile("../../../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Builds []struct {
			ID      string   `json:"id"`
			LDFlags []string `json:"ldflags"`
		} `json:"builds"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	fill := map[string]string{
		`{{ .Version }}`: "1.2.3",
		`{{ envOrDefault "ROLLBOOK_RELEASE_HELPER_IMAGE" "" }}`:                                                     helperImage,
		`{{ if ne .FullCommit "none" }}{{ .FullCommit }}{{ else }}{{ envOrDefault "ROLLBOOK_COMMIT" "" }}{{ end }}`: "3d9d485",
	}
	var flags []string
	for _, f := range cfg.Builds[0].LDFlags {
		for k, v := range fill {
			f = strings.ReplaceAll(f, k, v)
		}
		if strings.Contains(f, "{{") {
			t.Fatalf(".goreleaser.yaml ldflag %q has a template this test does not know", f)
		}
		flags = append(flags, f)
	}
	if !strings.Contains(strings.Join(flags, " "), "pkg/version.helperImage="+helperImage) {
		t.Fatalf(".goreleaser.yaml does not stamp the helper image: %v", flags)
	}
	return strings.Join(flags, " ")
}

func build(t *testing.T, plugin, ldflags string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), plugin)
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags", ldflags, "-o", out, "./cmd/"+plugin)
	cmd.Dir = "../../../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", plugin, err, b)
	}
	return out
}

// run runs bin with no helper image in its environment.
func run(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ROLLBOOK_HELPER_IMAGE=") && !strings.HasPrefix(e, "KUBECONFIG=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	b, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b), code
}

func TestReleaseCarriesItsImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both plugins")
	}
	ldflags := releaseLDFlags(t, digestRef)
	for _, plugin := range []string{"kubectl-tt", "kubectl-ate"} {
		out, code := run(t, build(t, plugin, ldflags), "version", "-o", "json")
		var info struct{ Version, HelperImage string }
		if err := json.Unmarshal([]byte(out), &info); err != nil || code != 0 {
			t.Fatalf("%s version -o json: exit %d, %v\n%s", plugin, code, err, out)
		}
		if info.Version != "v1.2.3" || info.HelperImage != digestRef {
			t.Errorf("%s: version %q, helper image %q; want v1.2.3 and %s", plugin, info.Version, info.HelperImage, digestRef)
		}
	}
	tt := build(t, "kubectl-tt", ldflags)
	for _, sub := range [][]string{{"upgrade", "kmd"}, {"upgrade", "smi"}, {"upgrade", "firmware"}, {"cleanup"}} {
		out, _ := run(t, tt, append(sub, "--help")...)
		if !regexp.MustCompile(`--helper-image string +.*\(default "` + regexp.QuoteMeta(digestRef) + `"\)`).MatchString(out) {
			t.Errorf("kubectl tt %s --help: the default --helper-image is not %s:\n%s", strings.Join(sub, " "), digestRef, out)
		}
	}
}

func TestABuildWithoutAnImageAsksForOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kubectl-tt")
	}
	for name, ldflags := range map[string]string{
		// go install …@latest from a commit after a tag
		"a pseudo-version": "-X github.com/rollbook/rollbook/pkg/version.version=v0.0.0-20261206021800-3d9d485abcde",
		// a tag, which may not exist or may move: never a default
		"a tag stamped": "-X github.com/rollbook/rollbook/pkg/version.version=v1.2.3 " +
			"-X github.com/rollbook/rollbook/pkg/version.helperImage=ghcr.io/rollbook/node-agent:1.2.3",
		"make build": "",
	} {
		tt := build(t, "kubectl-tt", ldflags)
		out, code := run(t, tt, "upgrade", "kmd", "--version", "2.8.0", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
		if code != 2 || !strings.Contains(out, "carries no node-agent image") || !strings.Contains(out, "--helper-image IMAGE@sha256:") {
			t.Errorf("%s: kubectl tt upgrade kmd without --helper-image: exit %d, want 2 asking for one:\n%s", name, code, out)
		}
		if strings.Contains(out, "none") && strings.Contains(out, "no such file") {
			t.Errorf("%s: the kubeconfig was read before the helper image was checked:\n%s", name, out)
		}
		out, _ = run(t, tt, "version")
		if !strings.Contains(out, "node-agent image: none: pass --helper-image") {
			t.Errorf("%s: kubectl tt version does not say it carries no image:\n%s", name, out)
		}
	}
}
