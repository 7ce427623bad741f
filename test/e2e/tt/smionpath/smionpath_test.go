//go:build e2e

// Package smionpath rolls tt-smi onto hosts whose tt-smi a package manager
// installed (tenstorrent/tt-smi ships a Debian package and a PyPI one):
// rollbook's copy at /usr/local/bin would shadow dpkg's /usr/bin/tt-smi or
// overwrite pip's console script, so the run refuses before it writes.
package smionpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
)

const (
	dpkgNode = "kwok-node-0"
	pipNode  = "kwok-node-1"
	packaged = "6.2.1"
	imageSMI = fakehost.ImageTTSMIVersion
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "tt-fleet"}) }

var node, host, hostRoot, run = tttest.Node, tttest.Host, tttest.HostRoot, tttest.Run

func TestPackagedTTSMIIsNeverShadowed(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 4*time.Minute)
	// A host whose only tt-smi is the Debian package's.
	if err := os.Remove(filepath.Join(hostRoot(t, dpkgNode), "usr/local/bin/tt-smi")); err != nil {
		t.Fatal(err)
	}
	if err := fakehost.InstallPackagedTTSMI(hostRoot(t, dpkgNode), fakehost.PackagedByDpkg, packaged); err != nil {
		t.Fatal(err)
	}
	// A host whose /usr/local/bin/tt-smi is a system pip's console script.
	if err := fakehost.InstallPackagedTTSMI(hostRoot(t, pipNode), fakehost.PackagedByPip, packaged); err != nil {
		t.Fatal(err)
	}
	for n, owner := range map[string]string{dpkgNode: "dpkg package tt-smi", pipNode: "pip tt_smi-" + packaged} {
		out, code := run(t, ctx, "upgrade", "smi", "--version", imageSMI, "--nodes", n)
		if code != cli.ExitBlocked || !strings.Contains(out, owner) || !strings.Contains(out, "package manager") {
			t.Fatalf("%s: exit %d, want %d naming %q and the package manager", n, code, cli.ExitBlocked, owner)
		}
		if h := host(t, n); n == dpkgNode && h.HostTTSMI != "" || n == pipNode && h.HostTTSMI != packaged {
			t.Fatalf("%s: /usr/local/bin/tt-smi is %q after the refusal", n, h.HostTTSMI)
		}
		if l := node(t, n).Labels[tt.LabelSMIVersion]; l == imageSMI {
			t.Fatalf("%s: labelled %s", n, l)
		}
	}
	// The package's tt-smi, found on the host's PATH, at the version asked
	// for: only the label is written.
	out, code := run(t, ctx, "upgrade", "smi", "--version", packaged, "--nodes", dpkgNode)
	if code != cli.ExitOK || !strings.Contains(out, "only the label is written") {
		t.Fatalf("the packaged tt-smi at the target: exit %d, want a label-only pass", code)
	}
	if n := node(t, dpkgNode); n.Labels[tt.LabelSMIVersion] != packaged || host(t, dpkgNode).HostTTSMI != "" {
		t.Fatalf("label %q, /usr/local/bin/tt-smi %q", n.Labels[tt.LabelSMIVersion], host(t, dpkgNode).HostTTSMI)
	}
	c.ExpectNoViolations(t)
}
