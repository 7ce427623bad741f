// Package installcmd wires `kubectl tt|ate install` and `uninstall`: what a
// cluster admin applies, printed (or applied) for this binary's version and
// image and for the cluster at hand.
package installcmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/version"
)

// Spec is one plugin's install.
type Spec struct {
	Plugin string
	// LockName and LockNamespace are the run's Lease: uninstall waits for
	// no run to hold it.
	LockName, LockNamespace string
	// Discover fills what the cluster decides (ate: the namespaces that
	// hold WorkerPools). Nil: nothing to discover, install prints offline.
	Discover func(ctx context.Context, g *cli.Globals, o *install.Options) error
}

// FieldManager owns what install applies (server-side apply).
const FieldManager = "rollbook-install"

type options struct {
	g        *cli.Globals
	spec     Spec
	apply    bool
	dryRun   bool
	output   string
	params   tt.AdminParams
	images   []string
	access   string
	gitURLs  []string
	bundles  []string
	digests  []string
	gates    []string
	unpinned bool
	onCP     bool
}

// NewInstallCommand returns `kubectl <plugin> install`.
func NewInstallCommand(g *cli.Globals, s Spec) *cobra.Command {
	o := &options{g: g, spec: s}
	d := tt.DefaultAdminParams()
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Print (or --apply) what a cluster admin applies for kubectl " + s.Plugin + ": namespace, roles, admission policies",
		Long: "Print the objects a cluster admin applies once before kubectl " + s.Plugin + " runs — for this binary's version " +
			"and node-agent image, and for the cluster at hand — or, with --apply, apply them (server-side apply, field " +
			"manager " + FieldManager + "). The flags are the admin's choices the admission policies enforce: which image, " +
			"tt-kmd repositories and firmware bundles helpers may use, and on which nodes. docs/security.md says who " +
			"decides what.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.complete(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.apply, "apply", false, "apply the objects instead of printing them")
	cli.DryRunVar(f, &o.dryRun, "server", "with --apply: the server checks every object and applies none")
	f.StringVarP(&o.output, "output", "o", "yaml", "yaml or json, when printing")
	f.StringSliceVar(&o.images, "image", nil, "node-agent image helpers may run, by digest (repeatable); default: this release's")
	f.StringVar(&o.access, "helper-node-label", d.NodeLabel.String(), "KEY=VALUE a node must carry for helpers to run on it "+
		"(a label the operator roles cannot write)")
	f.BoolVar(&o.onCP, "allow-control-plane", false, "let helpers run on control-plane nodes that carry the label too")
	f.StringSliceVar(&o.gitURLs, "kmd-git-url", d.KMDGitURLs, "tt-kmd repository nodes may build from (repeatable)")
	f.StringSliceVar(&o.bundles, "bundle-url-prefix", d.BundleURLs, "URL prefix, ending in /, firmware bundles may come from "+
		"(repeatable)")
	f.StringSliceVar(&o.digests, "bundle-sha256", nil, "SHA-256 of a firmware bundle allowed from any URL (repeatable)")
	f.StringSliceVar(&o.gates, "gate-label", d.GateLabels, "deploy-gate label the operators may set on nodes (repeatable)")
	f.BoolVar(&o.unpinned, "allow-unpinned", false, "admit a kmd helper without a commit pin and a flash helper without a "+
		"bundle checksum")
	return cmd
}

func (o *options) complete() error {
	p := tt.DefaultAdminParams()
	p.Images = o.images
	if len(p.Images) == 0 {
		if img := version.HelperImage(); img != "" {
			p.Images = []string{img}
		}
	}
	if o.spec.Plugin == "tt" && len(p.Images) == 0 {
		return cli.UsageErrorf("--image: this build carries no released node-agent image; name the image helpers may run, " +
			"by digest (IMAGE@sha256:…)")
	}
	for _, img := range p.Images {
		if !strings.Contains(img, "@sha256:") {
			return cli.UsageErrorf("--image %q: name it by digest (IMAGE@sha256:…), so the policy pins the bytes that run", img)
		}
	}
	key, value, ok := strings.Cut(o.access, "=")
	if !ok {
		return cli.UsageErrorf("--helper-node-label %q: want KEY=VALUE", o.access)
	}
	p.NodeLabel = kube.NodeLabel{Key: key, Value: value}
	p.AllowControlPlane, p.AllowUnpinned = o.onCP, o.unpinned
	p.KMDGitURLs, p.BundleURLs, p.BundleDigests, p.GateLabels = o.gitURLs, o.bundles, o.digests, o.gates
	for _, d := range p.BundleDigests {
		if len(d) != 64 || strings.Trim(strings.ToLower(d), "0123456789abcdef") != "" {
			return cli.UsageErrorf("--bundle-sha256 %q: 64 hex digits", d)
		}
	}
	if err := p.Validate(); err != nil {
		return cli.UsageErrorf("%v", err)
	}
	for _, u := range append(append([]string(nil), p.KMDGitURLs...), p.BundleURLs...) {
		if err := nodeagent.ValidateSourceURL(u); err != nil {
			return cli.UsageErrorf("%v", err)
		}
	}
	o.params = p
	if o.output != "yaml" && o.output != "json" {
		return cli.UsageErrorf("-o %s: yaml or json", o.output)
	}
	if o.dryRun && !o.apply {
		return cli.UsageErrorf("--dry-run goes with --apply (without it, install changes nothing)")
	}
	return nil
}

func (o *options) objects(ctx context.Context) ([]*unstructured.Unstructured, error) {
	io := install.Options{Plugin: o.spec.Plugin, Version: version.Get().Version, Params: o.params}
	if o.spec.Discover != nil {
		if err := o.spec.Discover(ctx, o.g, &io); err != nil {
			return nil, err
		}
	}
	return install.Objects(io)
}

func (o *options) run(ctx context.Context) error {
	objs, err := o.objects(ctx)
	if err != nil {
		return err
	}
	if !o.apply {
		return print(o.g, o.output, objs)
	}
	dyn, mapper, err := clients(o.g)
	if err != nil {
		return err
	}
	for _, u := range objs {
		ri, err := resourceFor(dyn, mapper, u)
		if err != nil {
			return err
		}
		raw, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: FieldManager, Force: new(bool)}
		*opts.Force = true
		if o.dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := ri.Patch(ctx, u.GetName(), "application/apply-patch+yaml", raw, opts); err != nil {
			return fmt.Errorf("apply %s %s: %w", strings.ToLower(u.GetKind()), key(u), err)
		}
		note := ""
		if o.dryRun {
			note = " (server dry run)"
		}
		fmt.Fprintf(o.g.IOStreams.Out, "%s/%s applied%s\n", strings.ToLower(u.GetKind()), key(u), note)
	}
	return nil
}

func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() != "" {
		return u.GetNamespace() + "/" + u.GetName()
	}
	return u.GetName()
}

func print(g *cli.Globals, output string, objs []*unstructured.Unstructured) error {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, u := range objs {
		list.Items = append(list.Items, *u)
	}
	if output == "json" {
		raw, err := list.MarshalJSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(g.IOStreams.Out, string(raw))
		return err
	}
	for i, u := range objs {
		raw, err := yaml.Marshal(u.Object)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(g.IOStreams.Out, "---")
		}
		if _, err := g.IOStreams.Out.Write(raw); err != nil {
			return err
		}
	}
	return nil
}

func clients(g *cli.Globals) (dynamic.Interface, meta.RESTMapper, error) {
	dyn, err := g.Factory.DynamicClient()
	if err != nil {
		return nil, nil, err
	}
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return nil, nil, err
	}
	groups, err := restmapper.GetAPIGroupResources(cs.Discovery())
	if err != nil {
		return nil, nil, err
	}
	return dyn, restmapper.NewDiscoveryRESTMapper(groups), nil
}

func resourceFor(dyn dynamic.Interface, mapper meta.RESTMapper, u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: the cluster does not serve it: %w", gvk.Kind, u.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return dyn.Resource(m.Resource), nil
}

// NewUninstallCommand returns `kubectl <plugin> uninstall`.
func NewUninstallCommand(g *cli.Globals, s Spec) *cobra.Command {
	var yes, dryRun bool
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what `kubectl " + s.Plugin + " install` applied, when no run holds the lock",
		Long: "Remove the objects `kubectl " + s.Plugin + " install` applied (labelled " + install.LabelComponent + "=" + s.Plugin +
			"), and the shared ones when the other plugin is not installed. Refused while a run holds the Lease " +
			s.LockName + ". Asks for --yes.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return uninstall(cmd.Context(), g, s, yes, dryRun)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "remove them (without it, print what would be removed)")
	cli.DryRunVar(cmd.Flags(), &dryRun, "client", "print what would be removed")
	return cmd
}

func uninstall(ctx context.Context, g *cli.Globals, s Spec, yes, dryRun bool) error {
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	if err := refuseWhileLocked(ctx, cs, s); err != nil {
		return err
	}
	o := &options{g: g, spec: s, params: tt.DefaultAdminParams()}
	o.params.Images = []string{"unused@sha256:" + strings.Repeat("0", 64)}
	objs, err := o.objects(ctx)
	if err != nil {
		return err
	}
	dyn, mapper, err := clients(g)
	if err != nil {
		return err
	}
	other := map[string]string{"tt": "ate-operator", "ate": "tt-operator"}[s.Plugin]
	otherInstalled := false
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, other, metav1.GetOptions{}); err == nil {
		otherInstalled = true
	}
	for i := len(objs) - 1; i >= 0; i-- { // the reverse of the install order: policies before their namespace
		u := objs[i]
		ri, err := resourceFor(dyn, mapper, u)
		if err != nil {
			continue // a kind the cluster does not serve holds nothing of ours
		}
		cur, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		comp := cur.GetLabels()[install.LabelComponent]
		if comp != s.Plugin && (comp != install.ComponentShared || otherInstalled) {
			continue // not ours to remove (another plugin's, or an admin's own object)
		}
		what := strings.ToLower(u.GetKind()) + "/" + key(u)
		if !yes || dryRun {
			fmt.Fprintf(g.IOStreams.Out, "would remove %s\n", what)
			continue
		}
		uid := cur.GetUID()
		if err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil &&
			!apierrors.IsNotFound(err) {
			return fmt.Errorf("remove %s: %w", what, err)
		}
		fmt.Fprintf(g.IOStreams.Out, "removed %s\n", what)
	}
	if !yes || dryRun {
		fmt.Fprintln(g.IOStreams.ErrOut, "nothing was removed; pass --yes to remove them")
	}
	return nil
}

func refuseWhileLocked(ctx context.Context, cs kubernetes.Interface, s Spec) error {
	l, err := cs.CoordinationV1().Leases(s.LockNamespace).Get(ctx, s.LockName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if r := lease.RecordOf(l); r.Identity != "" {
		return cli.WithExitCode(cli.ExitLocked, fmt.Errorf("a run holds Lease %s/%s (%s): uninstall would pull the roles and "+
			"policies from under it; let it finish (or `kubectl %s cleanup` once it has died) and run uninstall again",
			l.Namespace, l.Name, r.Identity, s.Plugin))
	}
	return nil
}
