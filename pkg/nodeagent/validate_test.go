package nodeagent_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

func TestValidateVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"2.0.0": true, "19.9.0": true, "10.200.3000": true,
		"": false, "2.0": false, "2.0.0.0": false, "v2.0.0": false, "2.0.0-rc1": false,
		"2.0.0\n": false, " 2.0.0": false, "2..0": false, "../../etc": false, "2.0.0;rm -rf /": false,
		"-2.0.0": false, "１.2.3": false,
	} {
		assert.Equal(t, ok, nodeagent.ValidateVersion(v) == nil, "version %q", v)
	}
	for v, ok := range map[string]bool{
		"2.4.0": true, "2.4.0-rc1": true, "2.2.0-1": true, "2.4.0-rc.1": true, "1.34": true, "2.9.99-testing": true,
		"2.4.0-": false, "2.4.0--x": false, "2.4.0-rc1;reboot": false, "2.4.0-a/b": false, "2.4.0-../x": false, "2": false,
		"2.4.0.0": false, "1.34-": false, "1..34": false,
	} {
		assert.Equal(t, ok, nodeagent.ValidateKMDVersion(v) == nil, "kmd version %q", v)
	}
	for v, ok := range map[string]bool{"19.9.0.0": true, "19.9.0": true, "19.9": false, "19.9.0.0.0": false, "19.9.0.x": false} {
		assert.Equal(t, ok, nodeagent.ValidateReadbackVersion(v) == nil, "readback %q", v)
	}
}

func TestValidateSourceURL(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://github.com/tenstorrent/tt-kmd.git": true,
		"file:///srv/mirror/tt-kmd.git":             true,
		"http://github.com/tenstorrent/tt-kmd.git":  false,
		"git@github.com:tenstorrent/tt-kmd.git":     false,
		"--upload-pack=touch /tmp/pwned":            false,
		"https://":                                  false,
		"file://host/share/x":                       false,
		"file:relative/path":                        false,
		"https://example.com/a b":                   false,
		"ext::sh -c touch% /tmp/pwned":              false,
	} {
		assert.Equal(t, ok, nodeagent.ValidateSourceURL(u) == nil, "url %q", u)
	}
}

var threeNumbers = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

func FuzzValidateVersion(f *testing.F) {
	for _, s := range []string{"2.0.0", "1.2", "a.b.c", "1.2.3\x00", "01.002.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if nodeagent.ValidateVersion(v) == nil && !threeNumbers.MatchString(v) {
			t.Fatalf("accepted %q", v)
		}
	})
}

// Bad input must be rejected before any tool runs.
func TestInvalidInputRunsNoTool(t *testing.T) {
	ops := map[string]func(*nodeagent.Agent) nodeagent.Result{
		"kmd bad version": func(a *nodeagent.Agent) nodeagent.Result {
			return a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2"}))
		},
		"kmd injected version": func(a *nodeagent.Agent) nodeagent.Result {
			return a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0 --upload-pack=x"}))
		},
		"kmd http git url": func(a *nodeagent.Agent) nodeagent.Result {
			return a.KMD(context.Background(), vouch(t, nodeagent.KMDOptions{Version: "2.0.0", GitURL: "http://x/y.git"}))
		},
		"smi bad version": func(a *nodeagent.Agent) nodeagent.Result {
			return a.SMI(context.Background(), nodeagent.SMIOptions{Version: "latest"})
		},
		"smi relative source": func(a *nodeagent.Agent) nodeagent.Result {
			return a.SMI(context.Background(), nodeagent.SMIOptions{Version: "5.2.0", Source: "tt-smi"})
		},
		"flash bad version": func(a *nodeagent.Agent) nodeagent.Result {
			return a.Flash(context.Background(), nodeagent.FlashOptions{Version: "19.9"})
		},
		"flash bad readback": func(a *nodeagent.Agent) nodeagent.Result {
			return a.Flash(context.Background(), nodeagent.FlashOptions{Version: "19.9.0", ReadbackVersion: "latest"})
		},
		"flash plain http": func(a *nodeagent.Agent) nodeagent.Result {
			return a.Flash(context.Background(), nodeagent.FlashOptions{Version: "19.9.0", BundleURL: "http://x/b.fwbundle"})
		},
		"flash dash bundle url": func(a *nodeagent.Agent) nodeagent.Result {
			return a.Flash(context.Background(), nodeagent.FlashOptions{Version: "19.9.0", BundleURL: "-rf"})
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			a, root := newHost(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true, HostTTSMI: "5.0.0"})
			r := op(a)
			requireFailure(t, r, nodeagent.ReasonInvalidInput)
			assert.Empty(t, toolNames(t, root))
			assert.Empty(t, r.Steps)
		})
	}
}
