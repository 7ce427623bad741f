package cli

import (
	"github.com/spf13/cobra"
	"k8s.io/kubectl/pkg/util/completion"
)

// registerFlagCompletions completes kubectl's global flags from the user's
// kubeconfig and cluster, as kubectl itself does.
func registerFlagCompletions(root *cobra.Command, g *Globals) {
	completion.SetFactoryForCompletion(g.Factory)
	for flag, fn := range map[string]cobra.CompletionFunc{
		"context":   completion.ContextCompletionFunc,
		"cluster":   completion.ClusterCompletionFunc,
		"user":      completion.UserCompletionFunc,
		"namespace": NamespaceCompletion(g),
	} {
		_ = root.RegisterFlagCompletionFunc(flag, fn)
	}
}

// NamespaceCompletion completes namespace names from the cluster.
func NamespaceCompletion(g *Globals) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return completion.CompGetResource(g.Factory, "namespace", toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// NodeCompletion completes node names from the cluster.
func NodeCompletion(g *Globals) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return completion.CompGetResource(g.Factory, "node", toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}
