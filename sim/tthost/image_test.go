package tthost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/sim/helperns"
)

// The runner binds a fake only over a file the image has: an image without
// procps has no kill, and the helper must see none.
func TestOverridesOnlyWhatTheImageHas(t *testing.T) {
	img := t.TempDir()
	if err := os.MkdirAll(filepath.Join(img, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(img, "bin")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"usr/bin/kmod", "usr/bin/git", "usr/local/bin/kubectl-tt"} {
		if err := os.MkdirAll(filepath.Join(img, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(img, f), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(img, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"insmod", "rmmod"} {
		// Absolute, as Debian's: resolved inside the image.
		if err := os.Symlink("/bin/kmod", filepath.Join(img, "usr/sbin", l)); err != nil {
			t.Fatal(err)
		}
	}
	// The agent in a layer of its own above the rest, as `make image` builds it.
	top := t.TempDir()
	if err := os.MkdirAll(filepath.Join(top, "usr/local/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(img, "usr/local/bin/kubectl-tt"), filepath.Join(top, "usr/local/bin/kubectl-tt")); err != nil {
		t.Fatal(err)
	}
	image := &Image{Layers: []string{img, top}, PATH: nodeagent.ImagePATH}
	r := &Runner{Image: image, AgentOverride: "/agent", Hosts: &Hosts{ToolExe: "/tools", SMISource: "/smi"}}
	want := map[string]string{"/usr/sbin/insmod": "/tools", "/usr/sbin/rmmod": "/tools", "/usr/bin/git": "/tools",
		"/usr/local/bin/kubectl-tt": "/agent"}
	checkOverrides(t, r.overrides(false), want)
	// A real-host node: the image's git is the real one; insmod and rmmod
	// need a kernel and stay fake.
	delete(want, "/usr/bin/git")
	checkOverrides(t, r.overrides(true), want)
	// The sim itself runs the image's own kubectl-tt.
	r.AgentOverride = ""
	delete(want, "/usr/local/bin/kubectl-tt")
	checkOverrides(t, r.overrides(true), want)
}

func checkOverrides(t *testing.T, os []helperns.Override, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, o := range os {
		got[o.Target] = o.Source
	}
	if len(got) != len(want) {
		t.Fatalf("overrides %v, want %v (no kill, tt-smi, tt-flash, chroot: the image has none)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("overrides %v, want %v", got, want)
		}
	}
}

func TestRefusedWithoutTheImage(t *testing.T) {
	r := &Runner{}
	if why := r.imageProblem(); !strings.Contains(why, EnvImage) || !strings.Contains(why, "never runs helpers outside") {
		t.Fatalf("no image: %q", why)
	}
	r.Image = &Image{Layers: []string{t.TempDir()}}
	if why := r.imageProblem(); why == "" {
		t.Fatal("an empty layer passed for a root filesystem")
	}
}

func TestContainerFSMountsVolumesAtTheirPaths(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	pod := helper("p", "n", AgentName, "fake")
	c := pod.Spec.Containers[0]
	c.VolumeMounts[0].MountPath = "/node"
	ms, fakeRoot, why := (&Runner{}).containerFS(pod, c, root, dir, "", "/t")
	if why != "" || fakeRoot != "/node" {
		t.Fatalf("why %q root %q", why, fakeRoot)
	}
	last := ms[len(ms)-1]
	if last.Kind != helperns.KindBind || last.Source != root || last.Target != "/node" {
		t.Fatalf("mounts %+v", ms)
	}
	if ms[2].Target != "/dev/termination-log" || imageEnv(pod, c, nodeagent.ImagePATH, fakeRoot, nil)[0] != "PATH="+nodeagent.ImagePATH {
		t.Fatalf("mounts %+v", ms)
	}
	pod.Spec.Volumes[0].HostPath = nil
	pod.Spec.Volumes[0].ConfigMap = nil
	if _, _, why := (&Runner{}).containerFS(pod, c, root, dir, "", "/t"); !strings.Contains(why, "cannot provide volume host") {
		t.Fatalf("an unknown volume kind: %q", why)
	}
}
