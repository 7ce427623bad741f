//go:build e2e

// Package install proves `kubectl ate install` renders for the cluster at
// hand: the operator Role in every namespace that holds a WorkerPool, and
// nothing of kubectl tt's.
package install

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/install"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 2, Scenario: "ate-fleet"}) }

func TestATEInstallForThisCluster(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := dyn.Resource(fleet.WorkerPoolGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(pools.Items) == 0 {
		t.Fatalf("the scenario's pools: %v", err)
	}
	exec := func(args ...string) (string, int) {
		streams, _, out, errOut := genericiooptions.NewTestIOStreams()
		code := cli.ExecuteContext(ctx, atecmd.NewRootCommand(streams), append(args, "--kubeconfig", c.Kubeconfig), errOut)
		t.Logf("%s → exit %d\n%s", strings.Join(args, " "), code, errOut.String())
		return out.String(), code
	}
	if out, _ := exec("preflight", "-o", "json"); !strings.Contains(out, "not installed: ") ||
		!strings.Contains(out, "clusterrole/ate-operator") {
		t.Errorf("ate preflight before install must name what is not installed:\n%s", out)
	}
	out, code := exec("install")
	if code != 0 {
		t.Fatalf("ate install: exit %d", code)
	}
	for _, p := range pools.Items {
		if !strings.Contains(out, "namespace: "+p.GetNamespace()) {
			t.Errorf("no ate-operator Role for %s, which holds WorkerPool %s", p.GetNamespace(), p.GetName())
		}
	}
	for _, not := range []string{install.HelperPolicyName + "\n", "tt-operator", "rollbook-helper\n"} {
		if strings.Contains(out, "name: "+not) {
			t.Errorf("ate install holds kubectl tt's %q", strings.TrimSpace(not))
		}
	}
	if _, code := exec("install", "--apply"); code != 0 {
		t.Fatalf("ate install --apply: exit %d", code)
	}
	for _, p := range pools.Items {
		r, err := c.Client.RbacV1().Roles(p.GetNamespace()).Get(ctx, "ate-operator", metav1.GetOptions{})
		if err != nil || r.Labels[install.LabelComponent] != "ate" {
			t.Errorf("Role %s/ate-operator after install --apply: %v %v", p.GetNamespace(), err, r.GetLabels())
		}
	}
	if out, _ := exec("preflight", "-o", "json"); strings.Contains(out, `"group": "install"`) {
		t.Errorf("ate preflight after install must find it current:\n%s", out)
	}
}
