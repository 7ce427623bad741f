//go:build e2e

package apicmd_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/cli/lease"
)

func TestMain(m *testing.M) {
	// Traffic off: an actor that suspends itself between the test's read
	// and its ResumeActor is SUSPENDING, which ResumeActor refuses.
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet", Env: []string{"ROLLBOOK_SIM_ATE_TRAFFIC=off"}})
}

// run executes `kubectl ate ARGS` in-process against the sim, with stdin.
func run(t *testing.T, ctx context.Context, stdin string, args ...string) (string, string, int) {
	t.Helper()
	c := simtest.Get(t)
	streams, in, out, errOut := genericiooptions.NewTestIOStreams()
	in.WriteString(stdin)
	code := cli.ExecuteContext(ctx, atecmd.NewRootCommand(streams), append(args, "--kubeconfig", c.Kubeconfig), errOut)
	t.Logf("kubectl ate %s → exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	return out.String(), errOut.String(), code
}

func TestListShowsTheServiceMethods(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	out, _, code := run(t, ctx, "", "api", "list")
	if code != 0 {
		t.Fatalf("api list: exit %d", code)
	}
	for _, want := range []string{ateapi.ServiceName + "/ListWorkers", ateapi.ServiceName + "/GetActor"} {
		if !strings.Contains(out, want) {
			t.Errorf("api list lacks %s", want)
		}
	}
	if strings.Contains(out, "grpc.reflection") {
		t.Errorf("api list shows the reflection service")
	}
	out, _, code = run(t, ctx, "", "api", "list", "-o", "json")
	var doc struct {
		APIVersion, Kind string
		Items            []struct {
			Service, Name string
			ReadOnly      bool
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || doc.APIVersion == "" || doc.Kind == "" {
		t.Fatalf("api list -o json: exit %d, %v, apiVersion %q kind %q", code, err, doc.APIVersion, doc.Kind)
	}
	kinds := map[string]bool{}
	for _, m := range doc.Items {
		kinds[m.Name] = m.ReadOnly
	}
	if ro, ok := kinds["ListWorkers"]; !ok || !ro {
		t.Errorf("ListWorkers must be listed read-only: %v", kinds)
	}
	if ro, ok := kinds["SuspendActor"]; !ok || ro {
		t.Errorf("SuspendActor must be listed as mutating: %v", kinds)
	}

	out, _, code = run(t, ctx, "", "api", "describe", "ListWorkers")
	if code != 0 || !strings.Contains(out, "rpc ListWorkers") || !strings.Contains(out, "JSON template") {
		t.Fatalf("api describe ListWorkers: exit %d", code)
	}
}

func TestCallListWorkersReturnsJSON(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	out, _, code := run(t, ctx, "", "api", "call", "ListWorkers")
	if code != 0 {
		t.Fatalf("api call ListWorkers: exit %d", code)
	}
	var resp map[string]any
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("api call ListWorkers printed no JSON object: %v\n%s", err, out)
	}
	// ate-fleet runs 6 workers; the response lists them (whatever the era
	// names the list field).
	n := 0
	for _, v := range resp {
		if l, ok := v.([]any); ok {
			n += len(l)
		}
	}
	if n == 0 {
		t.Fatalf("ListWorkers returned no worker: %s", out)
	}
	// The same request from a file and from the input.
	file := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(file, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, code := run(t, ctx, "", "api", "call", ateapi.ServiceName+"/ListWorkers", "-d", "@"+file); code != 0 {
		t.Fatalf("-d @file: exit %d", code)
	}
	if _, _, code := run(t, ctx, "{}", "api", "call", "ListWorkers", "-d", "@-"); code != 0 {
		t.Fatalf("-d @-: exit %d", code)
	}
}

func TestBadInputIsRefusedWithExit2(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 2*time.Minute)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"api", "call", "SuspendActor", "-d", `{"actor":{"atespace":"a","name":"b"}}`}, "--yes"},
		{[]string{"api", "call", "ListWorkers", "-d", `{not json`}, "not valid JSON"},
		{[]string{"api", "call", "ListWorkers", "-d", `{"noSuchField":1}`}, "does not fit"},
		{[]string{"api", "call", "ListWorkerz"}, "did you mean"},
	} {
		_, errOut, code := run(t, ctx, "", tc.args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d (want %d), stderr lacks %q", tc.args, code, cli.ExitUsage, tc.msg)
		}
	}
	// Nothing took the roll's Lease.
	if _, err := c.Client.CoordinationV1().Leases(fleet.Namespace).Get(ctx, fleet.LockName, metav1.GetOptions{}); err == nil {
		t.Errorf("a refused call left Lease %s/%s", fleet.Namespace, fleet.LockName)
	}
}

// A mutating call with --yes holds the roll's Lease: it is refused while
// another run holds it, and runs once it is free. A token never shows.
func TestMutatingCallTakesTheLease(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)

	// A token minted here, passed by file, so the test knows what must not show.
	tr, err := c.Client.CoreV1().ServiceAccounts(fleet.Namespace).CreateToken(ctx, ateapi.DefaultServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{ateapi.DefaultAudience}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := ateapi.Dial(ctx, ateapi.DialOptions{RESTConfig: c.RESTConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	inv, err := cl.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var target *ateapi.Actor
	for i, a := range inv.Actors {
		if a.State == ateapi.ActorRunning || a.State == ateapi.ActorSuspended {
			target = &inv.Actors[i]
			break
		}
	}
	if target == nil {
		t.Fatal("ate-fleet has no RUNNING or SUSPENDED actor (ResumeActor succeeds on both)")
	}
	// The request in the sim's API era (kubectl ate api describe shows it).
	req := `{"actor":{"atespace":"` + target.Atespace + `","name":"` + target.Name + `"}}`

	out, errOut, code := run(t, ctx, "", "api", "call", "GetActor", "-d", req, "--ate-token-file", tokenFile)
	if code != 0 || strings.Contains(out+errOut, tr.Status.Token) {
		t.Fatalf("GetActor with --ate-token-file: exit %d (or the token was printed)", code)
	}

	// Someone else holds the roll's Lease: the mutating call is refused
	// with exit 4 and sends nothing; reads still run.
	other := lease.CurrentHolder(ctx, c.Client, cli.NewRunID())
	lock, err := lease.Acquire(ctx, c.Client, fleet.Namespace, fleet.LockName, other, lease.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code = run(t, ctx, "", "api", "call", "ResumeActor", "-d", req, "--yes")
	if code != cli.ExitLocked || !strings.Contains(errOut, other.RunID) {
		t.Fatalf("ResumeActor while another run holds the Lease: exit %d", code)
	}
	called := metav1.ListOptions{FieldSelector: "reason=APICalled"}
	if evs, err := c.Client.CoreV1().Events(fleet.Namespace).List(ctx, called); err != nil || len(evs.Items) > 0 {
		t.Fatalf("a refused call was recorded as made (%v)", err)
	}
	if _, _, code := run(t, ctx, "", "api", "call", "ListWorkers"); code != 0 {
		t.Fatalf("a read while the Lease is held: exit %d", code)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	out, errOut, code = run(t, ctx, "", "api", "call", "ResumeActor", "-d", req, "--yes", "--ate-token-file", tokenFile)
	if code != 0 {
		t.Fatalf("ResumeActor --yes: exit %d", code)
	}
	if strings.Contains(out+errOut, tr.Status.Token) {
		t.Fatal("the token was printed")
	}
	evs, err := c.Client.CoreV1().Events(fleet.Namespace).List(ctx, called)
	if err != nil || len(evs.Items) == 0 {
		t.Fatalf("a mutating call recorded no APICalled event (%v)", err)
	}
	// The Lease was taken and released (its holder cleared).
	l, err := c.Client.CoordinationV1().Leases(fleet.Namespace).Get(ctx, fleet.LockName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ResumeActor did not take Lease %s: %v", fleet.LockName, err)
	}
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		t.Errorf("Lease still held by %q after the call", *l.Spec.HolderIdentity)
	}
	// A server error (no such actor) comes back as exit 1, token-free.
	_, errOut, code = run(t, ctx, "", "api", "call", "ResumeActor", "-d", `{"actor":{"atespace":"nope","name":"nope"}}`, "--yes",
		"--ate-token-file", tokenFile)
	if code != cli.ExitFailed || !strings.Contains(errOut, "ResumeActor") || strings.Contains(errOut, tr.Status.Token) {
		t.Fatalf("ResumeActor of a missing actor: exit %d", code)
	}
}
