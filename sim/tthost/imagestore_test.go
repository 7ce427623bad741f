package tthost

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/ocilayout/ocitest"
)

func twoLayers(agent string) []ocitest.Layer {
	dir := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeDir, Mode: 0o755} }
	return []ocitest.Layer{
		{Entries: []tar.Header{dir("usr/"), dir("usr/bin/"), {Name: "usr/bin/kmod", Typeflag: tar.TypeReg, Mode: 0o755}},
			Contents: map[string]string{"usr/bin/kmod": "kmod"}},
		{Entries: []tar.Header{dir("usr/"), dir("usr/local/"), dir("usr/local/bin/"),
			{Name: "usr/local/bin/kubectl-tt", Typeflag: tar.TypeReg, Mode: 0o755}},
			Contents: map[string]string{"usr/local/bin/kubectl-tt": agent}},
	}
}

// The sim unpacks each layer once into the shared store and runs what it
// unpacked; a layer no sim holds is collected after its grace period.
func TestLoadImageUnpacksOnceAndCollects(t *testing.T) {
	store := t.TempDir()
	layoutA := filepath.Join(t.TempDir(), "a")
	da := ocitest.Write(t, layoutA, AgentImageRepo+":1.2.3", []string{"PATH=/usr/local/bin:/usr/bin"}, twoLayers("agent 1")...)
	im, err := LoadImage(layoutA, store)
	if err != nil {
		t.Fatal(err)
	}
	if im.Digest != da || im.Ref() != AgentImageRepo+"@"+da || im.Tag != "1.2.3" || im.PATH != "/usr/local/bin:/usr/bin" ||
		len(im.Layers) != 2 {
		t.Fatalf("image %+v", im)
	}
	r := &Runner{Image: im}
	if r.inImage("kmod") != "/usr/bin/kmod" || r.inImage("kubectl-tt") != "/usr/local/bin/kubectl-tt" {
		t.Fatalf("lookups across the layers: %q %q", r.inImage("kmod"), r.inImage("kubectl-tt"))
	}
	agentA, _ := os.Stat(filepath.Join(im.Layers[1], "usr/local/bin/kubectl-tt"))
	again, err := LoadImage(layoutA, store)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(again.Layers[1], "usr/local/bin/kubectl-tt")); !os.SameFile(agentA, fi) {
		t.Fatal("a layer already in the store was unpacked again")
	}

	// Another build: the same base, another agent.
	layoutB := filepath.Join(t.TempDir(), "b")
	ocitest.Write(t, layoutB, AgentImageRepo+":1.2.4", nil, twoLayers("agent 2")...)
	old := time.Now().Add(-2 * layerGrace)
	age := func() {
		for _, l := range im.Layers {
			_ = os.Chtimes(l+".lock", old, old)
		}
	}
	age()
	b, err := LoadImage(layoutB, store)
	if err != nil {
		t.Fatal(err)
	}
	if b.Layers[0] != im.Layers[0] || b.Layers[1] == im.Layers[1] {
		t.Fatalf("layers %v and %v: the base is shared, the agent is not", im.Layers, b.Layers)
	}
	if _, err := os.Stat(im.Layers[1]); err != nil {
		t.Fatal("a layer a running sim holds was collected")
	}
	im.Close()
	again.Close()
	age()
	b.Close()
	b, err = LoadImage(layoutB, store)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := os.Stat(im.Layers[1]); !os.IsNotExist(err) {
		t.Fatal("an old layer no sim holds was kept")
	}
	if _, err := os.Stat(b.Layers[0]); err != nil {
		t.Fatal("the shared base was collected")
	}
}

// The registry resolves the image by digest or by its tag, in its
// repository, and nothing else.
func TestImageResolvesOnlyItself(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	im := &Image{Digest: d, Repo: AgentImageRepo, Tag: "1.2.3"}
	for ref, want := range map[string]bool{
		AgentImageRepo + "@" + d:                              true,
		AgentImageRepo + ":1.2.3":                             true,
		AgentImageRepo + ":1.2.3@" + d:                        true,
		AgentImageRepo + ":9.9.9@" + d:                        true, // the digest wins, as containerd pulls it
		AgentImageRepo + "@sha256:" + strings.Repeat("b", 64): false,
		AgentImageRepo + ":1.2.4":                             false,
		AgentImageRepo + ":latest":                            false,
		AgentImageRepo:                                        false,
		"ghcr.io/someone/node-agent@" + d:                     false,
		"ghcr.io/rollbook/node-agent-x:1.2.3":                 false,
		"GHCR.io/rollbook/node-agent:1.2.3":                   false,
		"":                                                    false,
	} {
		if got := im.Resolves(ref); got != want {
			t.Errorf("Resolves(%q) = %v, want %v", ref, got, want)
		}
	}
}

func TestPullErrorIsContainerds(t *testing.T) {
	for image, ref := range map[string]string{
		"busybox":                          "docker.io/library/busybox:latest",
		"someone/tool:1":                   "docker.io/someone/tool:1",
		"localhost:5000/x":                 "localhost:5000/x:latest",
		AgentImageRepo + ":no-such-tag":    AgentImageRepo + ":no-such-tag",
		AgentImageRepo + "@sha256:" + "00": AgentImageRepo + "@sha256:00",
	} {
		want := `rpc error: code = NotFound desc = failed to pull and unpack image "` + ref + `": failed to resolve reference "` + ref +
			`": ` + ref + `: not found`
		if got := PullError(image); got != want {
			t.Errorf("PullError(%q) = %q, want %q", image, got, want)
		}
	}
}

// The registry's one image pulls only onto a node of its platform: a node
// labelled for another gets containerd's "no match for platform", one with
// no platform labels (older kubelets' nodes) pulls as before.
func TestTheImagePullsOnlyOnItsPlatform(t *testing.T) {
	r := &Runner{}
	image := AgentImageRepo + ":v1.2.3" // in KnownImage's registry
	node := func(goos, arch string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{
			corev1.LabelOSStable: goos, corev1.LabelArchStable: arch}}}
	}
	for _, c := range []struct {
		node *corev1.Node
		want string
	}{
		{node("linux", "amd64"), ""},
		{nil, ""},
		{&corev1.Node{}, ""},
		{node("linux", "arm64"), PlatformError(image)},
		{node("windows", "amd64"), PlatformError(image)},
	} {
		if got := r.pullErrorOn(c.node)(image); got != c.want {
			t.Errorf("on %v: %q, want %q", c.node, got, c.want)
		}
	}
	if got := r.pullErrorOn(node("linux", "arm64"))(AgentImageRepo + ":no-such-tag"); got != PullError(AgentImageRepo+":no-such-tag") {
		t.Errorf("an image the registry lacks: %q, want the not-found error", got)
	}
	want := `rpc error: code = NotFound desc = failed to pull and unpack image "` + image + `": no match for platform in manifest: not found`
	if got := PlatformError(image); got != want {
		t.Errorf("PlatformError = %q, want %q", got, want)
	}
}
