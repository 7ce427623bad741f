package chaostest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/kube"
)

// FaultStats is what the sim's fault proxy (`sim up --api-faults`) did:
// requests it saw and faults it injected by kind (429, 500, 503, drop, slow).
type FaultStats struct {
	Requests int            `json:"requests"`
	Faults   map[string]int `json:"faults"`
}

// Total is the number of faults injected.
func (s FaultStats) Total() int {
	n := 0
	for _, v := range s.Faults {
		n += v
	}
	return n
}

// ReadFaultStats reads DIR/api-faults.json.
func ReadFaultStats(simDir string) (FaultStats, error) {
	var s FaultStats
	b, err := os.ReadFile(filepath.Join(simDir, "api-faults.json"))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// BypassFaults points the package's cluster handle (Client, RESTConfig,
// Kubeconfig) at the apiserver itself, so the test's own reads do not meet
// the injected faults, and returns the kubeconfig that goes through them
// for the plugins under test. Call it once, first.
func BypassFaults(t *testing.T) (proxied string) {
	t.Helper()
	c := simtest.Get(t)
	direct := filepath.Join(c.Dir, "kubeconfig-direct")
	if c.Kubeconfig == direct {
		return filepath.Join(c.Dir, "kubeconfig")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", direct)
	if err != nil {
		t.Fatalf("%v (was the sim started with --api-faults?)", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxied = c.Kubeconfig
	c.Kubeconfig, c.RESTConfig, c.Client = direct, cfg, cs
	return proxied
}

// CordonsSaySo fails t for every node cordoned by rollbook without the
// left-cordoned note, while no run holds a lock: a stopped run must say
// why it leaves a node out of service.
func CordonsSaySo(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable && n.Annotations[kube.AnnCordonedBy] != "" && n.Annotations[kube.AnnLeftCordoned] == "" {
			t.Errorf("%s is cordoned by %s, and the stopped run did not say why (no %s)", n.Name, n.Annotations[kube.AnnCordonedBy],
				kube.AnnLeftCordoned)
		}
	}
}
