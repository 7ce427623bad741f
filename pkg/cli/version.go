package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/version"
)

// Kubernetes versions each plugin supports (README's supported-versions
// table): the oldest that has what it needs, and the newest every test
// runs on (sim/go.mod).
var (
	minKubernetes = map[string]string{
		"tt":  "1.30", // ValidatingAdmissionPolicy, GA in 1.30
		"ate": "1.33", // ClusterTrustBundle v1beta1
	}
	newestTestedKubernetes = "1.37"
)

// versionReport is `version -o json`: the client build's fields as before,
// then the server's version and what is wrong with it.
type versionReport struct {
	version.Info
	ServerVersion *apiversion.Info `json:"serverVersion,omitempty"`
	Warnings      []string         `json:"warnings,omitempty"`
}

// serverVersionTimeout bounds the one discovery call: version must answer
// even when the cluster does not.
const serverVersionTimeout = 5 * time.Second

// NewVersionCommand prints the client build (version, commit, Go,
// platform, the node-agent image it was released with) and, unless
// --client, the server's version, warning outside the supported range.
func NewVersionCommand(plugin string, streams genericiooptions.IOStreams, flags *genericclioptions.ConfigFlags) *cobra.Command {
	var output string
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of kubectl-" + plugin + " and of the cluster's API server",
		Long: "Print the client build and the node-agent image it was released with, then the API server's version, " +
			"warning when it is outside the range kubectl-" + plugin + " supports. An unreachable server is a warning, " +
			"not an error: the client's version still prints (exit 0). With -o json|yaml the warnings are the " +
			"document's `warnings`, not lines on stderr. --client asks the server nothing.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return UsageErrorf("--output must be json or yaml, not %q", output)
			}
			r := versionReport{Info: version.Get()}
			if !clientOnly {
				r.ServerVersion, r.Warnings = serverVersion(plugin, flags)
			}
			switch output {
			case "":
				image := r.HelperImage
				if image == "" {
					image = "none: pass --helper-image"
				}
				if _, err := fmt.Fprintf(streams.Out, "kubectl-%s %s (commit %s, %s, %s)\nnode-agent image: %s\n",
					plugin, r.Version, r.Commit, r.GoVersion, r.Platform, image); err != nil {
					return err
				}
				if r.ServerVersion != nil {
					if _, err := fmt.Fprintf(streams.Out, "server: %s\n", r.ServerVersion.GitVersion); err != nil {
						return err
					}
				}
				for _, w := range r.Warnings {
					fmt.Fprintf(streams.ErrOut, "Warning: %s\n", w)
				}
				return nil
			case "json":
				b, err := json.MarshalIndent(r, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(streams.Out, "%s\n", b)
				return err
			default:
				b, err := yaml.Marshal(r)
				if err != nil {
					return err
				}
				_, err = streams.Out.Write(b)
				return err
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json|yaml")
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client's version only; ask the server nothing")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// serverVersion asks the API server its version (one discovery call,
// bounded) and says what is wrong with it for plugin.
func serverVersion(plugin string, flags *genericclioptions.ConfigFlags) (*apiversion.Info, []string) {
	if flags == nil {
		return nil, nil
	}
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, []string{"server version unknown: " + err.Error()}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = serverVersionTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, []string{"server version unknown: " + err.Error()}
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return nil, []string{"server version unknown: " + err.Error()}
	}
	return info, supportWarnings(plugin, info.GitVersion)
}

// supportWarnings says whether server (a gitVersion) is in plugin's
// supported range.
func supportWarnings(plugin, server string) []string {
	v, err := utilversion.ParseGeneric(server)
	if err != nil {
		return []string{fmt.Sprintf("server version %q is not a Kubernetes version this client can compare", server)}
	}
	minor := utilversion.MajorMinor(v.Major(), v.Minor())
	if lo, ok := minKubernetes[plugin]; ok && minor.LessThan(utilversion.MustParseGeneric(lo)) {
		return []string{fmt.Sprintf("Kubernetes %s is older than kubectl-%s supports (%s or newer): see README's "+
			"supported versions", server, plugin, lo)}
	}
	if utilversion.MustParseGeneric(newestTestedKubernetes).LessThan(minor) {
		return []string{fmt.Sprintf("Kubernetes %s is newer than any kubectl-%s was tested on (%s); it is expected to "+
			"work, but untested", server, plugin, newestTestedKubernetes)}
	}
	return nil
}
