package nodeagent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// TestMain makes the test binary double as the fake tools: invoked through
// a symlink named rmmod, tt-smi, … it runs fakehost.Main. PATH is set to
// the symlink directory only, so no real tool can ever be reached.
func TestMain(m *testing.M) {
	if fakehost.IsTool(filepath.Base(os.Args[0])) {
		os.Exit(fakehost.Main(os.Args))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "nodeagent-tools-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := fakehost.InstallTools(dir, exe); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv("PATH", dir)
	return m.Run()
}

// Fake PIDs sit above the kernel's maximum pid_max (4194304), so even a
// misrouted real kill could not hit a process of the test machine.
const (
	pidA = 4300001
	pidB = 4300002
	pidC = 4300003
)

const (
	podA = "0f4d3b8e-6a1c-4c55-9d0e-2b7a1e3c9f10"
	podB = "7c2e9a41-3b5d-4e6f-8a90-1b2c3d4e5f60"
	cidA = "3f1a9c0b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170615e4d3"
	cidB = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
)

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Helper()
	l.t.Log(string(p))
	return len(p), nil
}

// newHost creates a fake host and an agent pointed at it.
func newHost(t *testing.T, spec fakehost.Spec) (*nodeagent.Agent, string) {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, fakehost.Create(root, spec))
	return &nodeagent.Agent{
		Root:         root,
		Node:         "tt-node-1",
		Env:          []string{fakehost.RootEnv + "=" + root},
		Log:          testLog{t},
		PollInterval: 10 * 1e6,
	}, root
}

// toolNames lists the tools run against root, in order.
func toolNames(t *testing.T, root string) []string {
	t.Helper()
	calls, err := fakehost.Calls(root)
	require.NoError(t, err)
	names := make([]string, 0, len(calls))
	for _, c := range calls {
		names = append(names, c[0])
	}
	return names
}

// callsTo returns the argv of every call to tool.
func callsTo(t *testing.T, root, tool string) [][]string {
	t.Helper()
	calls, err := fakehost.Calls(root)
	require.NoError(t, err)
	var out [][]string
	for _, c := range calls {
		if c[0] == tool {
			out = append(out, c)
		}
	}
	return out
}

func observe(t *testing.T, root string) fakehost.Observed {
	t.Helper()
	o, err := fakehost.Inspect(root)
	require.NoError(t, err)
	return o
}

func requireFailure(t *testing.T, r nodeagent.Result, reason nodeagent.Reason) {
	t.Helper()
	require.False(t, r.Success, "expected failure %s, got success: %+v", reason, r)
	require.NotNil(t, r.Error)
	require.Equal(t, reason, r.Error.Reason, "message: %s", r.Error.Message)
}

func requireSuccess(t *testing.T, r nodeagent.Result) {
	t.Helper()
	if !r.Success {
		t.Fatalf("expected success, got %s: %s\noutput: %s", r.Error.Reason, r.Error.Message, r.OutputTail)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
