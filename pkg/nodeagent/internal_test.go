package nodeagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCgroup(t *testing.T) {
	const uid = "0f4d3b8e-6a1c-4c55-9d0e-2b7a1e3c9f10"
	const cid = "3f1a9c0b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170615e4d3"
	tests := []struct{ name, content, uid, cid string }{
		{"v2 systemd containerd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-",
			"_") + ".slice/cri-containerd-" + cid + ".scope\n", uid, cid},
		{"v2 systemd crio", "0::/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/crio-" + cid + ".scope\n",
			uid, cid},
		{"v1 cgroupfs docker", "12:devices:/kubepods/besteffort/pod" + uid + "/" + cid + "\n0::/\n", uid, cid},
		{"pod sandbox level only", "0::/kubepods/pod" + uid + "\n", uid, ""},
		{"host process", "0::/system.slice/ssh.service\n", "", ""},
		{"garbage", "no colons here", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotUID, gotCID := parseCgroup(tc.content)
			assert.Equal(t, tc.uid, gotUID)
			assert.Equal(t, tc.cid, gotCID)
		})
	}
}

func TestResolveInRootFollowsAbsoluteLinksInsideRoot(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/src/linux-headers-6.8/scripts"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "lib/modules/6.8"), 0o755))
	require.NoError(t, os.Symlink("/usr/src/linux-headers-6.8", filepath.Join(root, "lib/modules/6.8/build")))
	require.NoError(t, os.Symlink("../src/linux-headers-6.8", filepath.Join(root, "usr/src/alias")))
	require.NoError(t, os.Symlink("/../../../..", filepath.Join(root, "escape")))

	got, err := resolveInRoot(root, "/lib/modules/6.8/build/scripts")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "usr/src/linux-headers-6.8/scripts"), got)
	got, err = resolveInRoot(root, "usr/src/alias")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "usr/src/linux-headers-6.8"), got)
	got, err = resolveInRoot(root, "escape")
	require.NoError(t, err)
	assert.Equal(t, root, got, "links cannot climb out of the root")
	_, err = resolveInRoot(root, "/lib/modules/6.9/build")
	assert.Error(t, err)
}

func TestParseSMISnapshot(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    []string
		wantErr bool
	}{
		{"preamble then JSON",
			"Detected Chips: 2\n{\"device_info\":[{\"board_info\":{\"bus_id\":\"0000:01:00.0\"}," +
				"\"firmwares\":{\"fw_bundle_version\":\"19.9.0.0\"}},{\"firmwares\":{}}]}\n", []string{"19.9.0.0", "?"}, false},
		{"brace in preamble", "progress {50%}\n{\"device_info\":[{\"firmwares\":{\"fw_bundle_version\":\"18.2.0.0\"}}]}",
			[]string{"18.2.0.0"}, false},
		{"no devices", "{\"device_info\":[]}", nil, true},
		{"no JSON", " No Tenstorrent driver detected!", nil, true},
		{"truncated", "{\"device_info\":[{\"firmwares\":", nil, true},
		{"non-string version", "{\"device_info\":[{\"firmwares\":{\"fw_bundle_version\":19}}]}", []string{"?"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := ParseSMISnapshot([]byte(tc.out))
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, versionsOf(devs))
		})
	}
}

func FuzzParseSMISnapshot(f *testing.F) {
	f.Add([]byte("Detected Chips: 1\n{\"device_info\":[{\"firmwares\":{\"fw_bundle_version\":\"19.9.0.0\"}}]}"))
	f.Add([]byte("{{{{"))
	f.Add([]byte("{\"device_info\":null}"))
	f.Fuzz(func(t *testing.T, out []byte) {
		devs, err := ParseSMISnapshot(out)
		if err != nil {
			return
		}
		if len(devs) == 0 {
			t.Fatal("success with no devices")
		}
		for _, d := range devs {
			if d.Version == "" {
				t.Fatal("empty version must be reported as ?")
			}
		}
	})
}
