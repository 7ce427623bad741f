package cli

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func TestArgsForInvocation(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/usr/local/bin/kubectl-ate", []string{"status"}, []string{"status"}},
		{"kubectl-ate-status", nil, []string{"status"}},
		{"/x/kubectl-ate-roll", []string{"next-node", "n1"}, []string{"roll", "next-node", "n1"}},
		{"kubectl-ate-roll-next_node", []string{"n1"}, []string{"roll", "next-node", "n1"}},
		{"kubectl-tt", []string{"version"}, []string{"version"}},
		{"kubectl-ate-", []string{"x"}, []string{"x"}},
	} {
		plugin := "ate"
		if strings.Contains(tc.argv0, "kubectl-tt") {
			plugin = "tt"
		}
		if got := ArgsForInvocation(plugin, tc.argv0, tc.args); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %v: got %v, want %v", tc.argv0, tc.args, got, tc.want)
		}
	}
}

func TestExecuteExitCodes(t *testing.T) {
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	root, _ := NewRoot("tt", "short", "long", streams)
	root.AddCommand(&cobra.Command{Use: "blocked", RunE: func(*cobra.Command, []string) error {
		return WithExitCode(ExitBlocked, errors.New("a PDB blocks the drain"))
	}})
	lock := &cobra.Command{Use: "lock", RunE: func(*cobra.Command, []string) error { return nil }}
	lock.Flags().String("lock-namespace", "kube-system", "")
	root.AddCommand(lock, &cobra.Command{Use: "reads-ns", Annotations: map[string]string{UsesNamespace: "true"},
		RunE: func(*cobra.Command, []string) error { return nil }})
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"version"}, ExitOK, ""},
		{[]string{"version", "-o", "xml"}, ExitUsage, "--output must be json or yaml"},
		{[]string{"nope"}, ExitUsage, `unknown command "nope"`},
		{[]string{"version", "--bogus"}, ExitUsage, "unknown flag: --bogus"},
		{[]string{"blocked"}, ExitBlocked, "a PDB blocks the drain"},
		// -n would be ignored: refused, naming the command's own namespace flags.
		{[]string{"blocked", "-n", "x"}, ExitUsage, `-n/--namespace means nothing to "kubectl tt blocked"`},
		{[]string{"lock", "--namespace=x"}, ExitUsage, "its namespaces are chosen with --lock-namespace"},
		{[]string{"reads-ns", "-n", "x"}, ExitOK, ""},
	} {
		out.Reset()
		errOut.Reset()
		if code := Execute(root, tc.args, errOut); code != tc.code || !strings.Contains(errOut.String(), tc.msg) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errOut.String(), tc.msg)
		}
	}
}

func TestHelpReadsAsKubectlPlugin(t *testing.T) {
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	root, _ := NewRoot("tt", "short", "long", streams)
	root.SetOut(out)
	Execute(root, []string{"--help"}, &bytes.Buffer{})
	if !strings.Contains(out.String(), "kubectl tt [command]") || !strings.Contains(out.String(), "--kubeconfig") {
		t.Fatalf("help: %s", out)
	}
}

func TestDryRunFlagAcceptsKubectlSpellings(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		dry     bool
		usageOK bool
	}{
		{nil, false, true},
		{[]string{"--dry-run"}, true, true},
		{[]string{"--dry-run=client"}, true, true},
		{[]string{"--dry-run=none"}, false, true},
		{[]string{"--dry-run=server"}, false, false},
	} {
		var f RunFlags
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		f.AddFlags(fs, "kube-system")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := f.Validate()
		if f.DryRun != tc.dry || (err == nil) != tc.usageOK || (err != nil && ExitCode(err) != ExitUsage) {
			t.Errorf("%v: dry %v, err %v", tc.args, f.DryRun, err)
		}
	}
}

func TestMissingPermissionsNamesEveryOneAndTheRole(t *testing.T) {
	err := &MissingPermissionsError{Plugin: "tt", Missing: []Permission{
		{Verb: "patch", Resource: "nodes"},
		{Verb: "create", Resource: "pods", Subresource: "eviction"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
	}}
	msg := err.Error()
	for _, want := range []string{"3 permission(s)", "patch nodes cluster-wide", "create pods/eviction cluster-wide",
		"update leases.coordination.k8s.io in kube-system", "deploy/rbac/tt-operator.yaml", "nothing was changed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if ExitCode(err) != ExitFailed {
		t.Errorf("exit %d", ExitCode(err))
	}
}
