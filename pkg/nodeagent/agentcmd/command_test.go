package agentcmd_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/nodeagent/agentcmd"
)

func TestMain(m *testing.M) {
	if fakehost.IsTool(filepath.Base(os.Args[0])) {
		os.Exit(fakehost.Main(os.Args))
	}
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "agentcmd-tools-")
	if err != nil {
		panic(err)
	}
	if err := fakehost.InstallTools(dir, exe); err != nil {
		panic(err)
	}
	os.Setenv("PATH", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run executes `node-agent args…` the way the simulator's helper runner
// does: host root and termination log come from the environment.
func run(t *testing.T, spec fakehost.Spec, args ...string) (nodeagent.Result, string) {
	t.Helper()
	r, root, _ := runOut(t, spec, args...)
	return r, root
}

// runOut is run that also returns the command's stdout.
func runOut(t *testing.T, spec fakehost.Spec, args ...string) (nodeagent.Result, string, string) {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, fakehost.Create(root, spec))
	term := filepath.Join(t.TempDir(), "termination-log")
	t.Setenv(fakehost.RootEnv, root)
	t.Setenv(agentcmd.EnvHostRoot, root)
	t.Setenv(agentcmd.EnvTerminationLog, term)
	t.Setenv(agentcmd.EnvNodeName, "tt-node-7")
	cmd := agentcmd.NewCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	require.NoError(t, cmd.Execute(), "stderr: %s", stderr.String())
	b, err := os.ReadFile(term)
	require.NoError(t, err)
	r, err := nodeagent.ParseResult(b)
	require.NoError(t, err)
	return r, root, stdout.String()
}

// kmd-build prints the module it built; kmd, given those bytes (a volume)
// and their SHA-256, loads them.
func TestKMDBuildAndKMDCommands(t *testing.T) {
	b, broot, out := runOut(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true}, "kmd-build", "--version", "2.0.0",
		"--commit", fakehost.FakeCommit("ttkmd-2.0.0"), "--git-url", "file:///mirror/tt-kmd.git")
	require.True(t, b.Success, "%+v", b.Error)
	assert.Equal(t, nodeagent.OpKMDBuild, b.Op)
	bo, err := fakehost.Inspect(broot)
	require.NoError(t, err)
	assert.Equal(t, "1.31.0", bo.LoadedKMD, "kmd-build loads nothing")
	gz, err := nodeagent.ReadModuleFrame([]byte(out))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, nodeagent.SharedModuleKey), gz, 0o644))

	r, root := run(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true}, "kmd", "--version", "2.0.0",
		"--module-sha256", b.Module.SHA256, "--module-from", dir)
	assert.True(t, r.Success, "%+v", r.Error)
	assert.Equal(t, "tt-node-7", r.Node)
	o, err := fakehost.Inspect(root)
	require.NoError(t, err)
	assert.Equal(t, "2.0.0", o.LoadedKMD)

	r, _ = run(t, fakehost.Spec{LoadedKMD: "1.31.0", KernelHeaders: true}, "kmd", "--version", "2.0.0",
		"--module-sha256", strings.Repeat("0", 64), "--module-from", dir)
	assert.Equal(t, nodeagent.ReasonModuleNotVouched, r.Error.Reason)
}

func TestFailureStillExitsZeroWithResult(t *testing.T) {
	r, _ := run(t, fakehost.Spec{LoadedKMD: "1.31.0", DKMS: true}, "kmd", "--version", "2.0.0")
	assert.False(t, r.Success)
	assert.Equal(t, nodeagent.ReasonHostManaged, r.Error.Reason)
}

func TestFlashCommandDefaultsReadback(t *testing.T) {
	bundle := filepath.Join(t.TempDir(), "b.fwbundle")
	require.NoError(t, fakehost.WriteBundle(bundle, "19.9.0"))
	r, _ := run(t, fakehost.Spec{LoadedKMD: "2.0.0"}, "flash", "--version", "19.9.0", "--bundle-url", "file://"+bundle, "--reset-settle",
		"1ms")
	assert.True(t, r.Success, "%+v", r.Error)
	assert.Equal(t, "19.9.0.0", r.Target)
}

func TestSMICommandSourceFromEnv(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tt-smi")
	require.NoError(t, fakehost.WriteTTSMIBinary(src, "5.2.0"))
	t.Setenv(agentcmd.EnvSMISource, src)
	r, root := run(t, fakehost.Spec{HostTTSMI: "5.0.0"}, "smi", "--version", "5.2.0")
	assert.True(t, r.Success, "%+v", r.Error)
	o, err := fakehost.Inspect(root)
	require.NoError(t, err)
	assert.Equal(t, "5.2.0", o.HostTTSMI)
}

func TestUnknownFlagIsAnError(t *testing.T) {
	cmd := agentcmd.NewCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"kmd", "--no-such-flag"})
	assert.Error(t, cmd.Execute())
}

// `requirements -o json` is the table; --check-image fails naming what the
// file system it runs in lacks (the test's PATH holds only fake tools: no
// sudo, no ipmitool).
func TestRequirementsCommand(t *testing.T) {
	var out bytes.Buffer
	cmd := agentcmd.NewCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"requirements", "-o", "json"})
	require.NoError(t, cmd.Execute())
	var got []nodeagent.Requirement
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	assert.Equal(t, nodeagent.Requirements, got)

	out.Reset()
	cmd = agentcmd.NewCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"requirements", "--check-image"})
	err := cmd.Execute()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ipmitool")
	assert.Contains(t, out.String(), "MISSING")
}

// A presigned URL from the env is used only when it is --bundle-url-base,
// which the admission policy checked, plus a query; anything else in the
// Secret is refused before a byte is fetched.
func TestFlashURLFromEnvMustBeItsBase(t *testing.T) {
	bundle := filepath.Join(t.TempDir(), "b.fwbundle")
	require.NoError(t, fakehost.WriteBundle(bundle, "19.9.0"))
	for _, tc := range []struct {
		env, base string
		ok        bool
	}{
		{"file://" + bundle + "?sig=1", "file://" + bundle, true},
		{"file://" + bundle + "?sig=1", "", false},
		{"file://" + bundle + "x?sig=1", "file://" + bundle, false},
		{"https://evil.example/b.fwbundle?sig=1", "file://" + bundle, false},
	} {
		t.Setenv("BUNDLE", tc.env)
		args := []string{"flash", "--version", "19.9.0", "--bundle-url-env", "BUNDLE", "--reset-settle", "1ms"}
		if tc.base != "" {
			args = append(args, "--bundle-url-base", tc.base)
		}
		cmd := agentcmd.NewCommand()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append([]string{"--host-root", t.TempDir(), "--termination-log", ""}, args...))
		err := cmd.Execute()
		if tc.ok {
			continue // the flash itself is TestFlashCommandDefaultsReadback's
		}
		if err == nil || !strings.Contains(err.Error(), "--bundle-url-base") {
			t.Errorf("env %q, base %q: want refused naming --bundle-url-base, got %v", tc.env, tc.base, err)
		}
	}
}
