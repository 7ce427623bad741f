package ttcmd

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
)

// checkHelperPrerequisites refuses a run, before it changes anything (not
// even the lock), when the helper namespace or PriorityClass that
// deploy/ creates is missing: every helper would be refused and each node
// would stop at its probe. A check it may not make (forbidden: another
// --helper-namespace than the roles name) is left to the probe.
func checkHelperPrerequisites(ctx context.Context, cs kubernetes.Interface, h tt.HelperConfig) error {
	_, err := cs.CoreV1().Namespaces().Get(ctx, h.Namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return cli.WithExitCode(cli.ExitUsage, fmt.Errorf("helper namespace %q does not exist; nothing was changed. "+
			"Ask your cluster admin to apply deploy/%s, deploy/%s and deploy/%s (the namespace, where Pod Security lets helpers "+
			"run privileged, the helpers' PriorityClass, and the admission policy that admits only rollbook's helpers there), "+
			"or pass --helper-namespace", h.Namespace, deploy.NamespaceFile, deploy.PriorityClassFile, deploy.HelperPolicyFile))
	}
	if h.PriorityClass == "" {
		return nil
	}
	_, err = cs.SchedulingV1().PriorityClasses().Get(ctx, h.PriorityClass, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return cli.WithExitCode(cli.ExitUsage, fmt.Errorf("helper PriorityClass %q does not exist; nothing was changed. "+
			"Ask your cluster admin to apply deploy/%s, or pass --helper-priority-class", h.PriorityClass, deploy.PriorityClassFile))
	}
	return nil
}
