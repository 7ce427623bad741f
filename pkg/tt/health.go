package tt

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// RolledNodesHealthy is the soak's health check: every target node that
// already carries label=version (rolled) is Ready and schedulable, its pods
// are Ready again (finished pods and rollbook's helpers aside), and no
// helper of ours failed on it.
func RolledNodesHealthy(cs kubernetes.Interface, nodes []string, label, version string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var problems []string
		for _, name := range nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Labels[label] != version {
				continue // not rolled yet
			}
			if !kube.NodeReady(n) {
				problems = append(problems, fmt.Sprintf("node/%s is not Ready", name))
				continue
			}
			pods, err := kube.PodsOnNode(ctx, cs, name)
			if err != nil {
				return err
			}
			for i := range pods {
				p := &pods[i]
				if _, helper := p.Labels[kube.LabelHelper]; helper {
					if p.Status.Phase == "Failed" {
						problems = append(problems, fmt.Sprintf("helper %s/%s failed on node/%s", p.Namespace, p.Name, name))
					}
					continue
				}
				if !kube.PodTerminal(p) && p.DeletionTimestamp == nil && !kube.PodReady(p) {
					problems = append(problems, fmt.Sprintf("pod %s/%s on node/%s is not Ready", p.Namespace, p.Name, name))
				}
			}
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s", strings.Join(problems, "; "))
		}
		return nil
	}
}
