// Package cli builds the parts every rollbook plugin shares: the root command
// with kubectl's global flags, version and completion, and the mapping of
// errors to exit codes that scripts can rely on.
package cli

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/pflag"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/kube"
)

// Globals is what every subcommand receives: kubectl's connection flags, a
// factory built on them, and the streams to write to.
type Globals struct {
	ConfigFlags *genericclioptions.ConfigFlags
	Factory     *Factory
	IOStreams   genericiooptions.IOStreams
	// Verbosity is -v: client-go request logging on stderr.
	Verbosity int
	// Gate holds the clients' mutations until the run's lock confirms it
	// may still act (armed by StartSession).
	Gate *lease.Gate
}

// NewRoot returns the root command of plugin `kubectl <plugin>` with every
// kubectl global flag (--kubeconfig, --context, -n, --as, --request-timeout…),
// a version command and shell completion.
func NewRoot(plugin, short, long string, streams genericiooptions.IOStreams) (*cobra.Command, *Globals) {
	flags := genericclioptions.NewConfigFlags(true)
	g := &Globals{
		ConfigFlags: flags,
		Factory:     NewFactory(flags),
		IOStreams:   streams,
		Gate:        &lease.Gate{},
	}
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config { return tuneClient(c, g.Gate) }
	root := &cobra.Command{
		Use:   plugin,
		Short: short,
		Long:  long,
		// Errors are printed once, by Execute; usage only for usage errors.
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations: map[string]string{
			// Help and usage read "kubectl tt …", as the user types it.
			cobra.CommandDisplayNameAnnotation: "kubectl " + plugin,
		},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	flags.AddFlags(root.PersistentFlags())
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if err := refuseNamespace(c); err != nil {
			return err
		}
		return checkContext(flags)
	}
	root.PersistentFlags().IntVarP(&g.Verbosity, "v", "v", 0,
		"log client-go's requests to stderr: 6 each request, 7 with headers (capped at 7: bodies can carry minted tokens)")
	root.AddCommand(NewVersionCommand(plugin, streams, flags), newOptionsCommand(root))
	hideGlobalFlags(root)
	root.CompletionOptions.HiddenDefaultCmd = false
	registerFlagCompletions(root, g)
	return root, g
}

// UsesNamespace is the annotation of a command that reads -n/--namespace.
// No command does today: each names its namespaces (--lock-namespace,
// --helper-namespace, -a) because one -n cannot mean all of them.
const UsesNamespace = "rollbook.dev/uses-namespace"

// refuseNamespace turns a -n that would be ignored into a usage error
// (exit 2, before anything connects), saying which flags do choose one.
func refuseNamespace(c *cobra.Command) error {
	f := c.Flags().Lookup("namespace")
	if f == nil || !f.Changed || c.Annotations[UsesNamespace] != "" {
		return nil
	}
	var own []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "namespace" && strings.HasSuffix(f.Name, "namespace") {
			own = append(own, "--"+f.Name)
		}
	})
	msg := fmt.Sprintf("-n/--namespace means nothing to %q", c.CommandPath())
	if len(own) > 0 {
		msg += "; its namespaces are chosen with " + strings.Join(own, ", ")
	}
	return UsageErrorf("%s", msg)
}

// checkContext refuses a --context the kubeconfig does not have: bad input
// (exit 2), caught before any command connects.
func checkContext(f *genericclioptions.ConfigFlags) error {
	if f.Context == nil || *f.Context == "" {
		return nil
	}
	raw, err := f.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil // the command that connects reports it
	}
	if _, ok := raw.Contexts[*f.Context]; !ok {
		return UsageErrorf("context %q is not in the kubeconfig; `kubectl config get-contexts` lists the ones it has", *f.Context)
	}
	return nil
}

// tuneClient asks for protobuf responses (lists of thousands of nodes decode several
// times faster and smaller than JSON; custom resources fall back to JSON;
// request bodies stay JSON) and lifts client-go's default 5 QPS, which
// would otherwise throttle a roll far more than the cluster does. 200 a
// second: a roll of 20 nodes at once that finish every few seconds needs
// over 100 (about 36 per node), and at 50 it queued on this limit, not on
// the cluster; the server's API Priority and Fairness, not a client's
// guess, is what shares the apiserver among its clients (client-go retries
// its 429s). Every client's mutations pass the run's lock gate, and its
// responses tell the API server's clock (kube.ServerClock).
func tuneClient(c *rest.Config, gate *lease.Gate) *rest.Config {
	if WrapTransport != nil {
		c.Wrap(WrapTransport)
	}
	c.Wrap(gate.Wrap)
	c.Wrap(kube.ObserveServerClock)
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if c.QPS == 0 {
		c.QPS, c.Burst = 200, 400
	}
	return c
}

// MetadataClient reads objects as PartialObjectMetadata (protobuf): what a
// fleet status needs of thousands of nodes, at a fraction of the cost.
func (g *Globals) MetadataClient() (metadata.Interface, error) { return g.Factory.MetadataClient() }

// WrapTransport wraps, when set, every client's transport: tests count the
// API requests a run makes with it.
var WrapTransport func(http.RoundTripper) http.RoundTripper

// globalSection is the part of cobra's usage template that repeats every
// global flag under each command.
const globalSection = `{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}`

// hideGlobalFlags makes each command's help show its own flags and point
// at "options" for the global ones, as kubectl's help does; -n is hidden
// too (no command reads it, every command refuses it).
func hideGlobalFlags(root *cobra.Command) {
	tmpl := root.UsageTemplate()
	if strings.Contains(tmpl, globalSection) {
		root.SetUsageTemplate(strings.Replace(tmpl, globalSection, `{{if .HasParent}}

Use "{{.Root.CommandPath}} options" for a list of global command-line options (applies to all commands).{{end}}`, 1))
	}
	_ = root.PersistentFlags().MarkHidden("namespace")
}

// newOptionsCommand is "kubectl <plugin> options", kubectl's list of the
// flags every command takes.
func newOptionsCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "options",
		Short: "Print the flags every command takes (kubeconfig, context, impersonation, timeouts)",
		Args:  cobra.NoArgs,
		Run: func(c *cobra.Command, _ []string) {
			fmt.Fprintf(c.OutOrStdout(), "The following options can be passed to any command:\n\n%s",
				root.PersistentFlags().FlagUsages())
		},
	}
}
