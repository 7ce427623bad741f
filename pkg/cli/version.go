package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/version"
)

// NewVersionCommand prints the client build: version, commit, Go,
// platform, and the node-agent image it was released with.
func NewVersionCommand(plugin string, streams genericiooptions.IOStreams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of kubectl-" + plugin,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			switch output {
			case "":
				image := info.HelperImage
				if image == "" {
					image = "none: pass --helper-image"
				}
				_, err := fmt.Fprintf(streams.Out, "kubectl-%s %s (commit %s, %s, %s)\nnode-agent image: %s\n",
					plugin, info.Version, info.Commit, info.GoVersion, info.Platform, image)
				return err
			case "json":
				b, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(streams.Out, "%s\n", b)
				return err
			case "yaml":
				b, err := yaml.Marshal(info)
				if err != nil {
					return err
				}
				_, err = streams.Out.Write(b)
				return err
			default:
				return UsageErrorf("--output must be json or yaml, not %q", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json|yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
