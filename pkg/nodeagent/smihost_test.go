package nodeagent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// The probe finds tt-smi on the host's PATH (not the helper's), in its
// order, with the package that owns each, and measures the first.
func TestProbeFindsTTSMIOnTheHostsPATH(t *testing.T) {
	tests := []struct {
		name    string
		own     string // rollbook's /usr/local/bin/tt-smi, "" none
		pkg     string // a package manager's tt-smi 6.2.1
		envPATH string // /etc/environment's PATH, "" none
		want    []nodeagent.HostSMI
		smi     string
	}{
		{"none", "", "", "", nil, ""},
		{"rollbook's own", "5.0.0", "", "", []nodeagent.HostSMI{{Path: "/usr/local/bin/tt-smi"}}, "5.0.0"},
		{"dpkg's", "", fakehost.PackagedByDpkg, "", []nodeagent.HostSMI{{Path: "/usr/bin/tt-smi", Owner: "dpkg package tt-smi"}}, "6.2.1"},
		{"dpkg's shadowed by rollbook's", "5.0.0", fakehost.PackagedByDpkg, "",
			[]nodeagent.HostSMI{{Path: "/usr/local/bin/tt-smi"}, {Path: "/usr/bin/tt-smi", Owner: "dpkg package tt-smi"}}, "5.0.0"},
		{"dpkg's first on the host's PATH", "5.0.0", fakehost.PackagedByDpkg, `PATH="/usr/bin:/usr/local/bin"`,
			[]nodeagent.HostSMI{{Path: "/usr/bin/tt-smi", Owner: "dpkg package tt-smi"}, {Path: "/usr/local/bin/tt-smi"}}, "6.2.1"},
		{"pip's console script", "", fakehost.PackagedByPip, "", []nodeagent.HostSMI{{Path: "/usr/local/bin/tt-smi",
			Owner: "pip tt_smi-6.2.1.dist-info in /usr/local/lib/python3.11/dist-packages"}}, "6.2.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, root := newHost(t, fakehost.Spec{HostTTSMI: tc.own})
			if tc.pkg != "" {
				require.NoError(t, fakehost.InstallPackagedTTSMI(root, tc.pkg, "6.2.1"))
			}
			if tc.envPATH != "" {
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc/environment"), []byte(tc.envPATH+"\n"), 0o644))
			}
			r := a.Probe(context.Background(), nodeagent.ProbeOptions{})
			requireSuccess(t, r)
			assert.Equal(t, tc.want, r.Probe.SMIOnPath)
			assert.Equal(t, tc.smi, r.Probe.SMI)
		})
	}
}

// A package's tt-smi is never shadowed (dpkg's /usr/bin) nor overwritten
// (pip's /usr/local/bin): the smi helper refuses, writing nothing.
func TestSMIRefusesAPackagesTTSMI(t *testing.T) {
	for _, pkg := range []string{fakehost.PackagedByDpkg, fakehost.PackagedByPip} {
		t.Run(pkg, func(t *testing.T) {
			a, root := newHost(t, fakehost.Spec{})
			require.NoError(t, fakehost.InstallPackagedTTSMI(root, pkg, "6.2.1"))
			before, _ := os.ReadFile(filepath.Join(root, "usr/local/bin/tt-smi"))
			r := a.SMI(context.Background(), nodeagent.SMIOptions{Version: "5.2.0", Source: imageSMI(t, "5.2.0", 0)})
			requireFailure(t, r, nodeagent.ReasonSMIPackaged)
			assert.Contains(t, r.Error.Message, "package manager")
			after, _ := os.ReadFile(filepath.Join(root, "usr/local/bin/tt-smi"))
			assert.Equal(t, before, after, "/usr/local/bin/tt-smi changed")
			assert.False(t, r.Changed)
		})
	}
}
