package atecmd

import (
	"context"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/journal"
)

// movePermissions is what moving nodes (roll or rollback) needs, checked all
// at once before anything changes (deploy/rbac/ate-operator.yaml grants them).
func movePermissions(lockNS string) []cli.Permission {
	return []cli.Permission{
		{Verb: "get", Resource: "nodes"}, {Verb: "list", Resource: "nodes"}, {Verb: "patch", Resource: "nodes"},
		{Verb: "list", Resource: "pods"}, {Verb: "delete", Resource: "pods"},
		{Verb: "list", Group: "ate.dev", Resource: "workerpools"}, {Verb: "list", Group: "apps", Resource: "daemonsets"},
		{Verb: "patch", Group: "apps", Resource: "daemonsets", Namespace: fleet.Namespace},
		{Verb: "create", Resource: "events"},
		{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: fleet.Namespace, Name: ateapi.DefaultServiceAccount},
		{Verb: "create", Resource: "pods", Subresource: "portforward", Namespace: fleet.Namespace},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: lockNS, Name: fleet.LockName},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: lockNS, Name: fleet.LockName},
		{Verb: "create", Resource: "configmaps", Namespace: lockNS},
		{Verb: "update", Resource: "configmaps", Namespace: lockNS, Name: journal.Name("ate")},
	}
}

// checkMovePermissions runs the permission preflight of a real (not dry) run.
func checkMovePermissions(ctx context.Context, g *cli.Globals, run cli.RunFlags) error {
	if run.DryRun {
		return nil
	}
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	return cli.CheckPermissions(ctx, cs, "ate", movePermissions(run.LockNamespace))
}
