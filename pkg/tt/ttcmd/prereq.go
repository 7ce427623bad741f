package ttcmd

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/kube"
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

// applyAdminParams reads the cluster admin's helper policy parameters and
// makes the run follow them: helpers require the admin's node label, and
// only nodes carrying it are selected. Without the policy installed the
// defaults apply (nothing enforces them, and helpers keep to them anyway).
func applyAdminParams(ctx context.Context, cs kubernetes.Interface, h *tt.HelperConfig, sel *tt.Selection) error {
	p, found, err := tt.ReadAdminParams(ctx, cs, h.Namespace)
	if err != nil {
		return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("%w; nothing was changed. Ask your cluster admin to fix it", err))
	}
	h.NodeAccess, sel.Access = p.NodeLabel, p.NodeLabel
	if found && h.OnControlPlane && !p.AllowControlPlane {
		return cli.UsageErrorf("--helper-on-control-plane: the cluster admin's helper policy (ConfigMap %s/%s) does not let "+
			"helpers run on control-plane nodes (%s is not \"true\"); nothing was changed", h.Namespace, tt.AdminParamsName,
			tt.KeyAllowControlPlane)
	}
	return nil
}

// checkHelpersAdmitted creates each helper the run will create, on the
// server in dry-run mode: the admission policy judges it there as it will
// for real, so a helper the admin does not allow (an image, repository or
// bundle outside the policy's parameters, an unpinned source) stops the
// run before any node is cordoned, with the policy's own reason.
func checkHelpersAdmitted(ctx context.Context, cs kubernetes.Interface, specs []kube.HelperSpec) error {
	for _, s := range specs {
		p := s.Pod()
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
			return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("the cluster admin's helper policy refuses this run's %s helper: %v; "+
				"nothing was changed. Change the flag it names, or ask the admin to allow it in ConfigMap %s/%s", s.Task,
				err, p.Namespace, tt.AdminParamsName))
		case kube.QuotaRefusal(err):
			return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("a ResourceQuota in namespace %s refuses this run's %s helper "+
				"pod: %v; nothing was changed, and no node was cordoned. Each node the run works on at once has one helper pod "+
				"there: make room in the quota it names for as many (kubectl describe resourcequota -n %s), then re-run",
				p.Namespace, s.Task, err, p.Namespace))
		case apierrors.IsForbidden(err):
			// RBAC: CheckPermissions names what is missing; a dry run is not
			// worth a second report.
		default:
			return fmt.Errorf("checking the %s helper against the admission policy (a server-side dry run): %w", s.Task, err)
		}
	}
	return nil
}

// checkQuotaRoom refuses, before any cordon, a run whose helper
// namespace's ResourceQuotas admit fewer of its helper pods than the nodes
// it works on at once (each has one helper at a time): the helper of the
// node past the room would be refused after that node was cordoned and
// drained. Helpers already running there (an interrupted run's, adopted or
// replaced, never added to) count as room. Quotas the caller may not list
// are left to admission: the dry run above and the helper itself.
func checkQuotaRoom(ctx context.Context, cs kubernetes.Interface, ns string, specs []kube.HelperSpec, parallel int) error {
	if parallel < 2 || len(specs) == 0 { // one is what the dry run proved
		return nil
	}
	quotas, err := cs.CoreV1().ResourceQuotas(ns).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the ResourceQuotas of namespace %s: %w", ns, err)
	}
	if len(quotas.Items) == 0 {
		return nil
	}
	ours, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper})
	if err != nil {
		return fmt.Errorf("list the helper pods of namespace %s: %w", ns, err)
	}
	running := int64(0)
	for i := range ours.Items {
		if !kube.PodTerminal(&ours.Items[i]) {
			running++
		}
	}
	for _, s := range specs {
		room, quota, resource := kube.QuotaRoom(quotas.Items, s.Pod())
		if room < 0 || room+running >= int64(parallel) {
			continue
		}
		return cli.WithExitCode(cli.ExitBlocked, fmt.Errorf("ResourceQuota %s/%s (%s) has room for %d more %s helper pod(s), "+
			"and this run works on %d node(s) at once, each with one helper: the helper of a node past the room would be "+
			"refused after that node's cordon. Nothing was changed, and no node was cordoned. Re-run with --max-parallel %d, "+
			"or make room in the quota (kubectl describe resourcequota -n %s %s)", ns, quota, resource, room+running, s.Task,
			parallel, max(room+running, 1), ns, quota))
	}
	return nil
}
