package fakehost_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
)

// A pod's process must look, to any reader walking /proc while processes
// come and go, like a real one: never a live process with the device open
// and no cgroup (that reads as a host process outside Kubernetes, which no
// drain moves). A real exit closes the fds first and the entry goes at once.
func TestChurnNeverShowsATornProcess(t *testing.T) {
	root := t.TempDir()
	if err := fakehost.Create(root, fakehost.Spec{LoadedKMD: "2.7.0"}); err != nil {
		t.Fatal(err)
	}
	uid := "00000001-1111-2222-3333-444444444444"
	stop := fakehost.Churn(root, fakehost.Holder{Comm: "inference", PodUID: uid, ContainerID: strings.Repeat("ab", 32)},
		[]int{100, 101, 102, 103})
	torn, seen := "", 0
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline) && torn == ""; {
		entries, _ := os.ReadDir(filepath.Join(root, "proc"))
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			dir := filepath.Join(root, "proc", e.Name())
			fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
			device := false
			for _, fd := range fds {
				if l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && strings.HasPrefix(l, "/dev/tenstorrent/") {
					device = true
				}
			}
			if !device {
				continue
			}
			seen++
			cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
			if _, alive := os.Lstat(dir); err != nil && alive == nil {
				torn = e.Name() + ": alive with the device open and no cgroup (" + err.Error() + ")"
			} else if err == nil && !strings.Contains(string(cg), "kubepods") {
				torn = e.Name() + ": device open, cgroup " + strings.TrimSpace(string(cg))
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if torn != "" {
		t.Fatalf("after %d holder sightings, a torn process: %s", seen, torn)
	}
	if seen == 0 {
		t.Fatal("the reader never saw a holder: the test proves nothing")
	}
	t.Logf("%d holder sightings, none torn", seen)
}
