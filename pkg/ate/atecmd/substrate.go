package atecmd

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/cli"
)

// requireSubstrate says plainly that the cluster has no Agent Substrate
// (no ate-system namespace) before a roll command gets as far as the lock,
// whose own error would only name a flag. Another --lock-namespace is the
// user's choice and is left to the lock to judge.
func requireSubstrate(ctx context.Context, g *cli.Globals, run cli.RunFlags) error {
	if run.LockNamespace != fleet.Namespace {
		return nil
	}
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Get(ctx, fleet.Namespace, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return nil // present, or unreadable: the commands that follow say which
	}
	return cli.UsageErrorf("%s", fmt.Sprintf("Agent Substrate is not installed on this cluster: there is no namespace %s, "+
		"where it runs its control API, atelets and worker pools. kubectl ate rolls an existing install; nothing changed. "+
		"(`kubectl ate preflight` lists what the roll needs.)", fleet.Namespace))
}
