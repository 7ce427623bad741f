// floor is the cheapest way to learn a fleet's node labels: one
// metadata-only (PartialObjectMetadata) list of the nodes, in protobuf. Its
// time is the floor `kubectl tt status` and `kubectl ate status --no-api`
// are measured against (hack/bench-status.sh).
//
//	floor [-l SELECTOR]     uses $KUBECONFIG; prints the node count
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	selector := flag.String("l", "", "label selector")
	flag.Parse()
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	l, err := mc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}).
		List(context.Background(), metav1.ListOptions{LabelSelector: *selector})
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	fmt.Println(len(l.Items), "nodes")
}
