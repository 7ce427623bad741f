package cli

import (
	"context"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Factory builds the clients of one invocation from kubectl's connection
// flags, each once: every part of a run (the session, its runbooks, the
// reads of status and preflight) shares them, and with them one connection
// pool and one rate limiter per kind. It is rollbook's own, not kubectl's
// cmdutil.Factory: importing kubectl's command packages costs every
// invocation ~50 ms of package initialisation and ~20 MiB before main runs
// (measured with GODEBUG=inittrace=1), which `status` on a big fleet cannot
// afford.
type Factory struct {
	flags *genericclioptions.ConfigFlags

	once sync.Once
	cfg  *rest.Config
	err  error

	cs  client[*kubernetes.Clientset]
	dyn client[*dynamic.DynamicClient]
	md  client[metadata.Interface]
}

// client is one kind of client, built on first use.
type client[C any] struct {
	once sync.Once
	c    C
	err  error
}

func (c *client[C]) get(f *Factory, build func(*rest.Config) (C, error)) (C, error) {
	c.once.Do(func() {
		cfg, err := f.ToRESTConfig()
		if err != nil {
			c.err = err
			return
		}
		c.c, c.err = build(cfg)
	})
	return c.c, c.err
}

// NewFactory returns a Factory reading its configuration from flags.
func NewFactory(flags *genericclioptions.ConfigFlags) *Factory { return &Factory{flags: flags} }

// ToRESTConfig is the client configuration of the kubeconfig and flags
// (the flags' WrapConfigFn applied), read once per invocation.
func (f *Factory) ToRESTConfig() (*rest.Config, error) {
	f.once.Do(func() { f.cfg, f.err = f.flags.ToRESTConfig() })
	if f.err != nil {
		return nil, f.err
	}
	return rest.CopyConfig(f.cfg), nil
}

// KubernetesClientSet is the invocation's typed client set.
func (f *Factory) KubernetesClientSet() (*kubernetes.Clientset, error) {
	return f.cs.get(f, kubernetes.NewForConfig)
}

// DynamicClient is the invocation's client for custom resources.
func (f *Factory) DynamicClient() (dynamic.Interface, error) {
	return f.dyn.get(f, dynamic.NewForConfig)
}

// MetadataClient is the invocation's client reading objects as
// PartialObjectMetadata (protobuf).
func (f *Factory) MetadataClient() (metadata.Interface, error) {
	return f.md.get(f, metadata.NewForConfig)
}

// registerFlagCompletions completes kubectl's global flags from the user's
// kubeconfig and cluster, as kubectl itself does.
func registerFlagCompletions(root *cobra.Command, g *Globals) {
	fromKubeconfig := func(kind string) cobra.CompletionFunc {
		return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return withPrefix(kubeconfigNames(g.ConfigFlags, kind), toComplete), cobra.ShellCompDirectiveNoFileComp
		}
	}
	for flag, fn := range map[string]cobra.CompletionFunc{
		"context":   fromKubeconfig("context"),
		"cluster":   fromKubeconfig("cluster"),
		"user":      fromKubeconfig("user"),
		"namespace": NamespaceCompletion(g),
	} {
		_ = root.RegisterFlagCompletionFunc(flag, fn)
	}
}

func kubeconfigNames(f *genericclioptions.ConfigFlags, kind string) []string {
	raw, err := f.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil
	}
	var names []string
	switch kind {
	case "context":
		for n := range raw.Contexts {
			names = append(names, n)
		}
	case "cluster":
		for n := range raw.Clusters {
			names = append(names, n)
		}
	case "user":
		for n := range raw.AuthInfos {
			names = append(names, n)
		}
	}
	return names
}

// NamespaceCompletion completes namespace names from the cluster.
func NamespaceCompletion(g *Globals) cobra.CompletionFunc { return clusterNames(g, "namespaces") }

// NodeCompletion completes node names from the cluster.
func NodeCompletion(g *Globals) cobra.CompletionFunc { return clusterNames(g, "nodes") }

// clusterNames lists a cluster-wide resource's names (metadata only).
func clusterNames(g *Globals, resource string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		mc, err := g.Factory.MetadataClient()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		gvr := schema.GroupVersionResource{Version: "v1", Resource: resource}
		l, err := mc.Resource(gvr).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names := make([]string, 0, len(l.Items))
		for _, it := range l.Items {
			names = append(names, it.Name)
		}
		return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
