//go:build e2e

// Package krew checks the release's krew manifests against a `make dist`
// snapshot: plugins/*.yaml render to valid manifests that krew itself
// installs from the snapshot archives, goreleaser's generated manifests say
// the same, and kubectl then finds both plugins through its plugin lookup.
package krew

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/internal/simtest"
)

// krewModule is krew itself, run from its Go module at a pinned version.
const krewModule = "sigs.k8s.io/krew/cmd/krew@v0.4.3"

// manifest is the part of a krew Plugin that this test compares.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Caveats          string     `json:"caveats"`
		Platforms        []platform `json:"platforms"`
	} `json:"spec"`
}

type platform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	Sha256 string `json:"sha256"`
	Bin    string `json:"bin"`
	Files  []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
}

func (p platform) key() string {
	return p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
}

// distDir is the snapshot to test. With $ROLLBOOK_DIST set (make krew-check)
// a missing snapshot fails; otherwise the test is skipped with the reason.
func distDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ROLLBOOK_DIST")
	required := dir != ""
	if dir == "" {
		root, err := simtest.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "dist")
	}
	if _, err := os.Stat(filepath.Join(dir, "metadata.json")); err != nil {
		if required {
			t.Fatalf("ROLLBOOK_DIST=%s holds no goreleaser snapshot (%v): run `make dist`", dir, err)
		}
		t.Skipf("no release snapshot in %s: run `make dist` first (or `make krew-check`)", dir)
	}
	return dir
}

// fullCommit is a full git commit hash; goreleaser's metadata says "none"
// when the repository has no remote, and make dist then passes the commit.
var fullCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)

type meta struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

func readMeta(t *testing.T, dist string) meta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dist, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil || m.Version == "" || m.Commit == "" {
		t.Fatalf("dist/metadata.json: version %q commit %q (%v)", m.Version, m.Commit, err)
	}
	return m
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// render fills plugins/NAME.yaml the way the release does (krew-release-bot
// syntax): {{ .TagName }} and addURIAndSha, whose sha256 comes from the
// snapshot's archive of that name.
func render(t *testing.T, root, dist, name, tag string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "plugins", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	funcs := template.FuncMap{"addURIAndSha": func(uri, tag string) (string, error) {
		uri = strings.ReplaceAll(uri, "{{ .TagName }}", tag)
		archive := filepath.Join(dist, path.Base(uri))
		if _, err := os.Stat(archive); err != nil {
			return "", fmt.Errorf("plugins/%s.yaml names %s, which the snapshot does not have", name, path.Base(uri))
		}
		return fmt.Sprintf("uri: %s\n    sha256: %s", uri, sha256File(t, archive)), nil
	}}
	tpl, err := template.New(name).Funcs(funcs).Parse(string(src))
	if err != nil {
		t.Fatalf("plugins/%s.yaml: %v", name, err)
	}
	var out bytes.Buffer
	if err := tpl.Execute(&out, map[string]string{"TagName": tag}); err != nil {
		t.Fatalf("plugins/%s.yaml: %v", name, err)
	}
	return out.Bytes()
}

func parse(t *testing.T, what string, b []byte) manifest {
	t.Helper()
	var m manifest
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return m
}

// compare fails when the hand-kept manifest and goreleaser's generated one
// disagree on anything a user sees or krew checks.
func compare(t *testing.T, ours, gen manifest) {
	t.Helper()
	if ours.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || ours.Kind != "Plugin" {
		t.Errorf("%s: apiVersion %q kind %q", ours.Metadata.Name, ours.APIVersion, ours.Kind)
	}
	for _, f := range []struct{ name, a, b string }{
		{"metadata.name", ours.Metadata.Name, gen.Metadata.Name},
		{"version", ours.Spec.Version, gen.Spec.Version},
		{"homepage", ours.Spec.Homepage, gen.Spec.Homepage},
		{"shortDescription", ours.Spec.ShortDescription, gen.Spec.ShortDescription},
		{"description", ours.Spec.Description, gen.Spec.Description},
		{"caveats", ours.Spec.Caveats, gen.Spec.Caveats},
	} {
		if f.a != f.b {
			t.Errorf("%s: %s differs between plugins/ and .goreleaser.yaml's krews:\nplugins/: %q\ngoreleaser: %q",
				ours.Metadata.Name, f.name, f.a, f.b)
		}
	}
	genByKey := map[string]platform{}
	for _, p := range gen.Spec.Platforms {
		genByKey[p.key()] = p
	}
	if len(ours.Spec.Platforms) != len(gen.Spec.Platforms) {
		t.Errorf("%s: %d platforms in plugins/, %d built", ours.Metadata.Name, len(ours.Spec.Platforms), len(gen.Spec.Platforms))
	}
	for _, p := range ours.Spec.Platforms {
		g, ok := genByKey[p.key()]
		switch {
		case !ok:
			t.Errorf("%s: plugins/ lists %s, which the release does not build", ours.Metadata.Name, p.key())
		case p.Bin != g.Bin || p.Sha256 != g.Sha256 || path.Base(p.URI) != path.Base(g.URI):
			t.Errorf("%s %s: plugins/ has bin %s %s %s, goreleaser %s %s %s",
				ours.Metadata.Name, p.key(), p.Bin, path.Base(p.URI), p.Sha256, g.Bin, path.Base(g.URI), g.Sha256)
		}
	}
}

func TestKrewInstallsBothPlugins(t *testing.T) {
	dist := distDir(t)
	root, err := simtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed to check its plugin lookup: %v", err)
	}
	m := readMeta(t, dist)
	tag := "v" + m.Version
	krewRoot := t.TempDir()
	manifests := t.TempDir()
	env := append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1",
		"PATH="+filepath.Join(krewRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	platformKey := runtime.GOOS + "/" + runtime.GOARCH
	for _, name := range []string{"tt", "ate"} {
		ours := render(t, root, dist, name, tag)
		gen, err := os.ReadFile(filepath.Join(dist, "krew", name+".yaml"))
		if err != nil {
			t.Fatalf("goreleaser wrote no krew manifest for %s: %v", name, err)
		}
		om := parse(t, "plugins/"+name+".yaml", ours)
		compare(t, om, parse(t, "dist/krew/"+name+".yaml", gen))

		krewInstall(t, env, dist, manifests, name, om, ours)

		// kubectl finds the plugin in KREW_ROOT/bin and runs it.
		cmd := exec.Command(kubectl, name, "version", "-o", "json")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl %s version: %v\n%s", name, err, out)
		}
		var v struct{ Version, Commit, Platform, HelperImage string }
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("kubectl %s version -o json: %v\n%s", name, err, out)
		}
		if v.Version != tag || v.Platform != platformKey || !fullCommit.MatchString(v.Commit) || m.Commit != "none" && v.Commit != m.Commit {
			t.Errorf("kubectl %s version = %+v, want %s, commit %s, %s", name, v, tag, m.Commit, platformKey)
		}
		// The node-agent image the snapshot was stamped with (the release
		// rehearsal pushes one and says which); a plain snapshot carries none.
		if want := os.Getenv("ROLLBOOK_EXPECT_HELPER_IMAGE"); v.HelperImage != want {
			t.Errorf("kubectl %s carries helper image %q, want %q", name, v.HelperImage, want)
		}
		// The completion shim ships beside the binary (the caveats point to it).
		shim := filepath.Join(krewRoot, "store", name, tag, "kubectl_complete-"+name)
		if st, err := os.Stat(shim); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("completion shim %s: %v (mode %v)", shim, err, st)
		}
	}

	cmd := exec.Command(kubectl, "plugin", "list", "--name-only")
	cmd.Env = env
	out, _ := cmd.CombinedOutput()
	for _, want := range []string{"kubectl-tt", "kubectl-ate"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("kubectl plugin list lacks %s:\n%s", want, out)
		}
	}
}

// krewInstall installs plugin name with krew, from the archive of this
// platform that its manifest om (ours, rendered) names, into env's
// KREW_ROOT.
func krewInstall(t *testing.T, env []string, dist, manifests, name string, om manifest, ours []byte) {
	t.Helper()
	platformKey := runtime.GOOS + "/" + runtime.GOARCH
	var here *platform
	for i, p := range om.Spec.Platforms {
		if p.key() == platformKey {
			here = &om.Spec.Platforms[i]
		}
	}
	if here == nil {
		t.Fatalf("plugins/%s.yaml has no platform %s", name, platformKey)
	}
	mf := filepath.Join(manifests, name+".yaml")
	if err := os.WriteFile(mf, ours, 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dist, path.Base(here.URI))
	cmd := exec.Command("go", "run", krewModule, "install", "--manifest="+mf, "--archive="+archive)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("krew install %s: %v\n%s", name, err, out)
	}
	t.Logf("krew install %s:\n%s", name, out)
}
