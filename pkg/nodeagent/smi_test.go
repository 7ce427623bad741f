package nodeagent_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// imageSMI writes a fake tt-smi "binary" padded to size bytes, standing in
// for the copy inside the helper image.
func imageSMI(t *testing.T, version string, size int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tt-smi")
	require.NoError(t, fakehost.WriteTTSMIBinary(path, version))
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	pad := "# " + strings.Repeat("x", 1021) + "\n"
	for n := 0; n < size; n += len(pad) {
		_, err = f.WriteString(pad)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	return path
}

func TestSMIReplacesAtomically(t *testing.T) {
	a, root := newHost(t, fakehost.Spec{HostTTSMI: "5.0.0", LegacyVenv: true})
	target := filepath.Join(root, "usr/local/bin/tt-smi")
	old, err := os.ReadFile(target)
	require.NoError(t, err)
	src := imageSMI(t, "5.2.0", 8<<20)
	want, err := os.ReadFile(src)
	require.NoError(t, err)

	// A concurrent reader must only ever see the whole old or new file.
	var stop atomic.Bool
	var reads, partial atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			b, err := os.ReadFile(target)
			if err != nil {
				partial.Add(1)
				continue
			}
			reads.Add(1)
			if !bytes.Equal(b, old) && !bytes.Equal(b, want) {
				partial.Add(1)
			}
		}
	}()
	r := a.SMI(context.Background(), nodeagent.SMIOptions{Version: "5.2.0", Source: src})
	stop.Store(true)
	wg.Wait()

	requireSuccess(t, r)
	assert.Equal(t, "5.0.0", r.Before)
	assert.Equal(t, "5.2.0", r.After)
	assert.True(t, r.Changed)
	assert.Zero(t, partial.Load(), "reader saw a missing or partial tt-smi (%d reads)", reads.Load())
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "target must equal the source")
	fi, err := os.Stat(target)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	temps, _ := filepath.Glob(filepath.Join(root, "usr/local/bin/.tt-smi*"))
	assert.Empty(t, temps, "temp file must be gone")
	assert.NoDirExists(t, filepath.Join(root, "opt/tt"))
	assert.Equal(t, "5.2.0", observe(t, root).HostTTSMI)

	again := a.SMI(context.Background(), nodeagent.SMIOptions{Version: "5.2.0", Source: src})
	requireSuccess(t, again)
	assert.False(t, again.Changed, "second run is a no-op")
}

func TestSMIRefusals(t *testing.T) {
	tests := []struct {
		name    string
		spec    fakehost.Spec
		version string
		reason  nodeagent.Reason
	}{
		{"source is another version", fakehost.Spec{HostTTSMI: "5.0.0"}, "5.3.0", nodeagent.ReasonSMISourceInvalid},
		{"host-managed driver", fakehost.Spec{HostTTSMI: "5.0.0", DKMS: true}, "5.2.0", nodeagent.ReasonHostManaged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, root := newHost(t, tc.spec)
			r := a.SMI(context.Background(), nodeagent.SMIOptions{Version: tc.version, Source: imageSMI(t, "5.2.0", 0)})
			requireFailure(t, r, tc.reason)
			assert.Equal(t, "5.0.0", observe(t, root).HostTTSMI, "host binary untouched")
		})
	}
	t.Run("host glibc older than the binary needs", func(t *testing.T) {
		a, root := newHost(t, fakehost.Spec{HostTTSMI: "5.0.0", HostGlibc: "2.31"})
		r := a.SMI(context.Background(), nodeagent.SMIOptions{Version: "5.2.0", Source: imageSMI(t, "5.2.0", 0)})
		requireFailure(t, r, nodeagent.ReasonSMIHostIncompatible)
		assert.Contains(t, r.Error.Message, "GLIBC_2.35")
		o := observe(t, root)
		assert.Equal(t, "5.0.0", o.HostTTSMI, "host binary untouched")
		assert.True(t, o.HostTTSMIRuns, "the host's own tt-smi still runs")
		assert.NoFileExists(t, filepath.Join(root, "usr/local/bin/.tt-smi.new"), "nothing staged left behind")
	})
	t.Run("source is the host binary", func(t *testing.T) {
		a, root := newHost(t, fakehost.Spec{HostTTSMI: "5.0.0"})
		r := a.SMI(context.Background(), nodeagent.SMIOptions{Version: "5.0.0", Source: filepath.Join(root, "usr/local/bin/tt-smi")})
		requireFailure(t, r, nodeagent.ReasonInvalidInput)
	})
}
