//go:build e2e

// Package realhostkmd rolls tt-kmd with the real CLI over a sim whose tt
// nodes are real-host nodes (sim up --tt-realhost-rootfs): each helper runs
// inside the node-agent image against a writable overlay of a real Debian
// host root, so git clones the stand-in module for real, kbuild builds it
// with the host's headers and gcc-12, and modinfo, depmod and modprobe are
// the real kmod tools. Only insmod, rmmod and the card tools are fakes.
package realhostkmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/fakehost/realhost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/tt"
)

// rootfs is the real-host root filesystem; skip says why there is none.
var rootfs, skip string

var nodes = []string{"kwok-node-0", "kwok-node-1"}

func TestMain(m *testing.M) {
	rootfs, skip = realhost.Find()
	if skip != "" {
		fmt.Println("realhostkmd: every test skips:", skip)
		os.Exit(m.Run())
	}
	// The sim reads it when the scenario starts (simtest passes the
	// environment through).
	_ = os.Setenv("ROLLBOOK_SIM_TT_REALHOST_ROOTFS", rootfs)
	simtest.Main(m, simtest.Options{Nodes: len(nodes), Scenario: "tt-fleet"})
}

var run = tttest.Run

// The sim writes the stand-in tt-kmd's remote here (tthost.KMDRemoteDir)
// and binds it into every helper at the same path.
func remote(c *simtest.Cluster) string {
	return "file://" + filepath.Join(c.Dir, "kmd-remote", "tt-kmd.git")
}

func TestKMDUpgradeOnRealHosts(t *testing.T) {
	if skip != "" {
		t.Skip(skip)
	}
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	kver := realhost.KernelRelease(t, rootfs)

	start := time.Now()
	_, code := run(t, ctx, "upgrade", "kmd", "--version", "2.8.0", "--git-url", remote(c), "--nodes", strings.Join(nodes, ","))
	if code != 0 {
		t.Fatalf("upgrade kmd: exit %d (the helpers' runs: %s)", code, filepath.Join(c.Dir, "hosts/runner.log"))
	}
	t.Logf("two real-host nodes upgraded (one real clone and kbuild, shared with the other) in %s", time.Since(start).Round(time.Second))
	for _, name := range nodes {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[tt.LabelKMDVersion] != "2.8.0" || n.Spec.Unschedulable {
			t.Errorf("%s: kmd label %q, unschedulable %v; want 2.8.0, uncordoned", name, n.Labels[tt.LabelKMDVersion], n.Spec.Unschedulable)
		}
		host := filepath.Join(c.Dir, "hosts", name)
		ko := filepath.Join(host, "lib/modules", kver, "updates/tenstorrent.ko")
		b, err := os.ReadFile(ko)
		if err != nil {
			t.Errorf("%s: the persisted module: %v", name, err)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x7fELF")) {
			t.Errorf("%s: %s is not an ELF module (%q…)", name, ko, b[:min(len(b), 16)])
		}
		if v := modinfo(t, "version", ko); v != "2.8.0" {
			t.Errorf("%s: modinfo version of %s is %q, want 2.8.0", name, ko, v)
		}
		if v := modinfo(t, "vermagic", ko); !strings.HasPrefix(v, kver+" ") {
			t.Errorf("%s: vermagic %q, want the headers' kernel %s", name, v, kver)
		}
		// Only what needs a kernel or a card ran as a fake (the fakes log
		// every call there): git, chroot, make, modinfo, depmod and
		// modprobe were the real ones.
		calls, err := os.ReadFile(filepath.Join(host, ".fakehost/calls.log"))
		if err != nil {
			t.Errorf("%s: the fakes' call log: %v", name, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
			var argv []string
			if err := json.Unmarshal([]byte(line), &argv); err != nil || len(argv) == 0 {
				t.Errorf("%s: call log line %q: %v", name, line, err)
				continue
			}
			switch filepath.Base(argv[0]) {
			case "insmod", "rmmod", "kill", "tt-smi", "tt-flash":
			default:
				t.Errorf("%s: a fake %s ran on a real-host node: %q", name, argv[0], argv)
			}
		}
		// The fake insmod loaded what kbuild built: the version it read
		// from the module's .modinfo.
		if v, err := os.ReadFile(filepath.Join(host, "sys/module/tenstorrent/version")); err != nil || strings.TrimSpace(string(v)) != "2.8.0" {
			t.Errorf("%s: loaded module version %q (%v), want 2.8.0", name, v, err)
		}
	}
	// One real build per kernel: the second node installed the first's
	// module from the cluster's share, after the real modinfo checked it
	// (kmod reads only a name ending in .ko: the agent's temporary name
	// once did not, and every node built again).
	n, err := c.Client.CoreV1().Nodes().Get(ctx, nodes[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		BuiltBy string `json:"builtBy"`
		Commit  string
	}
	if err := json.Unmarshal([]byte(n.Annotations[tt.AnnKMDResult]), &res); err != nil || res.BuiltBy != nodes[0] {
		t.Errorf("%s: kmd result %s (%v): want the module %s built", nodes[1], n.Annotations[tt.AnnKMDResult], err, nodes[0])
	}
	// The real depmod -b indexed the persisted copy for boot.
	dep, err := os.ReadFile(filepath.Join(c.Dir, "hosts", nodes[0], "lib/modules", kver, "modules.dep"))
	if err != nil || !strings.Contains(string(dep), "updates/tenstorrent.ko:") {
		t.Errorf("modules.dep %q (%v): want updates/tenstorrent.ko", dep, err)
	}

	// The next version on one node: the real modules of both stay in its
	// cache, the persisted copy is 2.9.0.
	if _, code := run(t, ctx, "upgrade", "kmd", "--version", "2.9.0", "--git-url", remote(c), "--nodes", nodes[0]); code != 0 {
		t.Fatalf("upgrade kmd 2.9.0: exit %d", code)
	}
	host := filepath.Join(c.Dir, "hosts", nodes[0])
	if v := modinfo(t, "version", filepath.Join(host, "lib/modules", kver, "updates/tenstorrent.ko")); v != "2.9.0" {
		t.Errorf("%s: persisted module at %q after the upgrade to 2.9.0", nodes[0], v)
	}
	for _, v := range []string{"2.8.0", "2.9.0"} {
		// The cache is by content: <version>/<first 16 hex of its SHA-256>/.
		kos, _ := filepath.Glob(filepath.Join(host, "var/cache/tt-kmd", kver, v, "*", "tenstorrent.ko"))
		if len(kos) != 1 {
			t.Errorf("%s: %d cached %s modules, want 1", nodes[0], len(kos), v)
			continue
		}
		if got := modinfo(t, "version", kos[0]); got != v {
			t.Errorf("%s: cached %s module says %q", nodes[0], v, got)
		}
	}
	if v, err := c.Violations(); err != nil || len(v) != 0 {
		t.Errorf("violations %v (%v), want none", v, err)
	}
}

func modinfo(t *testing.T, field, ko string) string {
	t.Helper()
	argv := append(realhost.KmodArgv(rootfs, "modinfo"), "-F", field, ko)
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("modinfo -F %s %s: %v", field, ko, err)
	}
	return strings.TrimSpace(string(out))
}
