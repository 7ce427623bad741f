package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
)

// CleanupSpec is what one plugin's runs leave behind; NewCleanupCommand
// turns it into `kubectl <plugin> cleanup`.
type CleanupSpec struct {
	Plugin   string
	LockName string
	// DefaultLockNamespace is --lock-namespace's default; the history
	// ConfigMap lives beside the Lease.
	DefaultLockNamespace string
	// HelperNamespace is --helper-namespace's default; "" for a plugin that
	// runs no helper pods. Finished helpers (a failed one is kept for
	// `logs`) there go.
	HelperNamespace string
	// Secrets are the names of the Secrets a run keeps in the helper
	// namespace (a presigned URL); each goes when it carries
	// kube.LabelSecret. By name: a role grants get/delete on these only.
	Secrets []string
	// NodeAnnotations are the plugin's bookkeeping on nodes that no re-run
	// needs once no node is half-way: results and probe records. Never the
	// public version labels DaemonSets select on, never a cordon.
	NodeAnnotations []string
	// HalfWay says, for each of nodes that stands part-way through one of
	// the plugin's runbooks, where (a node it leaves out is not): removing
	// the record then would lose what the re-run reads to finish it.
	HalfWay func(ctx context.Context, nodes []corev1.Node) (map[string]string, error)
	// Finish is the sentence that says how to finish a half-way node.
	Finish string
	// KeepHelper says why a finished helper pod must stay ("" lets it go):
	// it is the only record of something a later run must see (a failed
	// flash that needs a person, whose node lost its record). nodes are
	// every node; nil keeps none.
	KeepHelper func(p *corev1.Pod, nodes []corev1.Node) string
	// Extra adds the plugin's own items (the tt host caches) to the plan,
	// from the nodes read; nil for none.
	Extra func(ctx context.Context, o *CleanupOptions, cs kubernetes.Interface, nodes []corev1.Node) ([]CleanupItem, error)
	// ExtraFlags registers the flags Extra reads.
	ExtraFlags func(cmd *cobra.Command)
}

// EachNode is a CleanupSpec.HalfWay that decides from each node alone.
func EachNode(halfWay func(n *corev1.Node) string) func(context.Context, []corev1.Node) (map[string]string, error) {
	return func(_ context.Context, nodes []corev1.Node) (map[string]string, error) {
		out := map[string]string{}
		for i := range nodes {
			if why := halfWay(&nodes[i]); why != "" {
				out[nodes[i].Name] = why
			}
		}
		return out, nil
	}
}

// CleanupItem is one thing cleanup removes: shown by the dry run, removed
// by Remove with --yes.
type CleanupItem struct {
	Object string // kind/namespace/name or node/NAME
	What   string // what goes, e.g. "annotation rollbook.dev/tt-probe"
	Remove func(ctx context.Context) error
}

// CleanupOptions are the flags of `cleanup`.
type CleanupOptions struct {
	g               *Globals
	spec            CleanupSpec
	Yes             bool
	dry             RunFlags
	LockNamespace   string
	HelperNamespace string
}

// NewCleanupCommand returns `cleanup` for the plugin spec describes.
func NewCleanupCommand(g *Globals, spec CleanupSpec) *cobra.Command {
	o := &CleanupOptions{g: g, spec: spec, dry: RunFlags{DryRun: true}}
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what finished runs left behind (a dry run unless --yes)",
		Long: fmt.Sprintf(`Remove what kubectl %[1]s runs leave behind: the Lease %[2]s (with its pause and
parallel limit), the history ConfigMap %[3]s, rollbook's bookkeeping annotations on nodes
(results, probe records), and finished helper pods and rollbook's Secrets in the helper
namespace. It never touches the public version labels DaemonSets select on, nor a cordon.

Without --yes (or kubectl's --dry-run=none) it is a dry run: it prints each object and key it would remove and changes
nothing. It refuses while a run holds the Lease, the roll is paused, a helper is running or a
node is half-way through a runbook: those records are what the re-run reads to finish.`,
			spec.Plugin, spec.LockName, journal.Name(spec.Plugin)),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.dry.badDryRun != "" {
				return UsageErrorf("--dry-run=%s: only client (the default) or none (the same as --yes)", o.dry.badDryRun)
			}
			if o.Yes && cmd.Flags().Changed("dry-run") && o.dry.DryRun {
				return UsageErrorf("--yes and --dry-run contradict each other: --yes removes, without it cleanup is a dry run")
			}
			o.Yes = o.Yes || !o.dry.DryRun
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "remove what the dry run lists (without it, nothing changes); the same as --dry-run=none")
	cmd.Flags().Var(dryRunValue{&o.dry}, "dry-run",
		"print what would be removed and change nothing: the default (client); none removes, as --yes")
	cmd.Flags().Lookup("dry-run").NoOptDefVal = "client"
	cmd.Flags().StringVar(&o.LockNamespace, "lock-namespace", spec.DefaultLockNamespace, "namespace of the roll's Lease and history")
	if spec.HelperNamespace != "" {
		cmd.Flags().StringVar(&o.HelperNamespace, "helper-namespace", spec.HelperNamespace, "namespace of the helper pods")
	}
	if spec.ExtraFlags != nil {
		spec.ExtraFlags(cmd)
	}
	return cmd
}

// Printf prints a line of the cleanup's output (an Extra item's result).
func (o *CleanupOptions) Printf(format string, a ...any) {
	fmt.Fprintf(o.g.IOStreams.Out, format+"\n", a...)
}

// CleanupRefusedError says why cleanup removed nothing: something it would remove is still needed.
type CleanupRefusedError struct {
	Reasons []string
	Code    int
}

func (e *CleanupRefusedError) Error() string {
	return "cleanup refused, nothing was removed:\n  - " + strings.Join(e.Reasons, "\n  - ")
}

// ExitCode is 4 when a run holds the lock, else 3 (a person must finish the roll).
func (e *CleanupRefusedError) ExitCode() int { return e.Code }

// Run plans the cleanup, refuses when the roll is unfinished, and prints
// (dry run) or removes each item.
func (o *CleanupOptions) Run(ctx context.Context) error {
	cs, err := o.g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	out := o.g.IOStreams.Out
	fmt.Fprintln(out, Where(o.g))
	if o.Yes {
		if err := CheckPermissions(ctx, cs, o.spec.Plugin, o.permissions()); err != nil {
			return err
		}
	}
	items, err := o.Plan(ctx, cs)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		fmt.Fprintf(out, "nothing to clean up: no Lease, history, helper, Secret or bookkeeping of kubectl %s runs\n", o.spec.Plugin)
		return nil
	}
	verb := "would remove"
	if o.Yes {
		verb = "removing"
	}
	for _, it := range items {
		fmt.Fprintf(out, "%s %s: %s\n", verb, it.Object, it.What)
		if !o.Yes {
			continue
		}
		if err := it.Remove(ctx); err != nil {
			return fmt.Errorf("%s: %w", it.Object, err)
		}
	}
	if !o.Yes {
		fmt.Fprintf(out, "(dry run) %d items; nothing changed. The same command with --yes removes them.\n", len(items))
		return nil
	}
	fmt.Fprintf(out, "removed %d items\n", len(items))
	return nil
}

// permissions are what removing needs, checked before anything is removed
// (the viewer has none of them).
func (o *CleanupOptions) permissions() []Permission {
	ns := o.LockNamespace
	p := []Permission{
		{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: o.spec.LockName},
		{Verb: "delete", Resource: "configmaps", Namespace: ns, Name: journal.Name(o.spec.Plugin)},
		{Verb: "patch", Resource: "nodes"},
	}
	if o.HelperNamespace != "" {
		p = append(p, Permission{Verb: "delete", Resource: "pods", Namespace: o.HelperNamespace})
		for _, s := range o.spec.Secrets {
			p = append(p, Permission{Verb: "delete", Resource: "secrets", Namespace: o.HelperNamespace, Name: s})
		}
	}
	return p
}

// Plan reads the cluster and returns what cleanup would remove, or a
// *CleanupRefusedError when a run or a node still needs its record.
func (o *CleanupOptions) Plan(ctx context.Context, cs kubernetes.Interface) ([]CleanupItem, error) {
	var items, nodeItems []CleanupItem
	var refuse []string
	code := ExitBlocked
	rec := &kube.EventWriter{Client: cs, Component: "kubectl-" + o.spec.Plugin, Instance: "cleanup"}

	l, err := cs.CoordinationV1().Leases(o.LockNamespace).Get(ctx, o.spec.LockName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, explainForbidden(fmt.Errorf("read lease %s/%s: %w", o.LockNamespace, o.spec.LockName, err), o.spec.Plugin)
	default:
		if r := lease.RecordOf(l); r.Identity != "" {
			code = ExitLocked
			what := fmt.Sprintf("a run holds Lease %s/%s (%s)", l.Namespace, l.Name, r.Identity)
			if c := r.Holder.Command; c != "" {
				what += fmt.Sprintf("; let it finish, or if it died re-run `%s` to take over and finish", c)
			}
			refuse = append(refuse, what)
		} else if p := lease.PauseOf(l); p != nil {
			refuse = append(refuse, fmt.Sprintf("the roll is paused (%s): `kubectl %s resume`, re-run the roll to finish it, then clean up",
				p, o.spec.Plugin))
		}
		items = append(items, deleteItem("lease/"+l.Namespace+"/"+l.Name, "the roll's Lease (pause, parallel limit)",
			l.UID, l.ResourceVersion, cs.CoordinationV1().Leases(l.Namespace).Delete))
	}

	hist := journal.Name(o.spec.Plugin)
	cm, err := cs.CoreV1().ConfigMaps(o.LockNamespace).Get(ctx, hist, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, explainForbidden(fmt.Errorf("read configmap %s/%s: %w", o.LockNamespace, hist, err), o.spec.Plugin)
	default:
		items = append(items, deleteItem("configmap/"+cm.Namespace+"/"+cm.Name, "the run history (kubectl "+o.spec.Plugin+" history)",
			cm.UID, cm.ResourceVersion, cs.CoreV1().ConfigMaps(cm.Namespace).Delete))
	}

	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, explainForbidden(fmt.Errorf("list nodes: %w", err), o.spec.Plugin)
	}
	if o.HelperNamespace != "" {
		helpers, r, err := o.helperItems(ctx, cs, rec, nodes.Items)
		if err != nil {
			return nil, err
		}
		items, refuse = append(items, helpers...), append(refuse, r...)
	}
	halfWay, err := o.spec.HalfWay(ctx, nodes.Items)
	if err != nil {
		return nil, explainForbidden(err, o.spec.Plugin)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if why := halfWay[n.Name]; why != "" {
			refuse = append(refuse, fmt.Sprintf("node %s is half-way: %s. %s", n.Name, why, o.spec.Finish))
			continue
		}
		if it, ok := o.nodeItem(cs, rec, n); ok {
			nodeItems = append(nodeItems, it)
		}
	}
	items = append(items, nodeItems...)
	if o.spec.Extra != nil {
		extra, err := o.spec.Extra(ctx, o, cs, nodes.Items)
		if err != nil {
			return nil, err
		}
		items = append(items, extra...)
	}
	if len(refuse) > 0 {
		return nil, &CleanupRefusedError{Reasons: refuse, Code: code}
	}
	return items, nil
}

// helperItems lists finished helpers and rollbook's Secrets in the helper
// namespace; a helper still running refuses the cleanup.
func (o *CleanupOptions) helperItems(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, nodes []corev1.Node) ([]CleanupItem,
	[]string, error) {
	ns := o.HelperNamespace
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, nil, explainForbidden(fmt.Errorf("list helper pods in %s: %w", ns, err), o.spec.Plugin)
	}
	var items []CleanupItem
	var refuse []string
	if pods != nil {
		for i := range pods.Items {
			p := pods.Items[i]
			if !kube.PodTerminal(&p) {
				if p.DeletionTimestamp == nil {
					refuse = append(refuse, fmt.Sprintf("helper pod %s/%s (%s on %s) is %s; wait until it ends",
						ns, p.Name, p.Labels[kube.LabelHelper], p.Spec.NodeName, p.Status.Phase))
				}
				continue
			}
			if o.spec.KeepHelper != nil {
				if why := o.spec.KeepHelper(&p, nodes); why != "" {
					refuse = append(refuse, fmt.Sprintf("helper pod %s/%s must stay: %s", ns, p.Name, why))
					continue
				}
			}
			items = append(items, CleanupItem{Object: "pod/" + ns + "/" + p.Name,
				What: fmt.Sprintf("finished %s helper on %s (%s)", p.Labels[kube.LabelHelper], p.Spec.NodeName, p.Status.Phase),
				Remove: func(ctx context.Context) error {
					_, err := kube.DeleteHelperIfUnchanged(ctx, cs, rec, &p, "deleted by cleanup")
					return err
				}})
		}
	}
	for _, name := range o.spec.Secrets {
		sec, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, explainForbidden(fmt.Errorf("read secret %s/%s: %w", ns, name, err), o.spec.Plugin)
		}
		if sec.Labels[kube.LabelSecret] == "" {
			continue // not rollbook's, whatever its name
		}
		items = append(items, deleteItem("secret/"+ns+"/"+name, "rollbook's "+sec.Labels[kube.LabelSecret]+" Secret",
			sec.UID, sec.ResourceVersion, cs.CoreV1().Secrets(ns).Delete))
	}
	return items, refuse, nil
}

// nodeItem removes the plugin's bookkeeping annotations from n in one
// patch preconditioned on n's resourceVersion.
func (o *CleanupOptions) nodeItem(cs kubernetes.Interface, rec kube.Recorder, n *corev1.Node) (CleanupItem, bool) {
	change := kube.NodeChange{Annotations: map[string]*string{}}
	var keys []string
	for _, k := range o.spec.NodeAnnotations {
		if _, ok := n.Annotations[k]; ok {
			change.Annotations[k] = nil
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return CleanupItem{}, false
	}
	sort.Strings(keys)
	what := "annotations " + strings.Join(keys, ", ")
	return CleanupItem{Object: "node/" + n.Name, What: what, Remove: func(ctx context.Context) error {
		if _, err := kube.PatchNode(ctx, cs, n, change); err != nil {
			return err
		}
		rec.Record(ctx, kube.NodeRef(n), false, "CleanedUp", "removed "+what)
		return nil
	}}, true
}

// deleteItem deletes an object only if it is still the one read.
func deleteItem(object, what string, uid types.UID, rv string,
	del func(context.Context, string, metav1.DeleteOptions) error) CleanupItem {
	name := object[strings.LastIndex(object, "/")+1:]
	return CleanupItem{Object: object, What: what, Remove: func(ctx context.Context) error {
		err := del(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}}
}
