package campaign

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

func gkeNode(name, pool, version string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if pool != "" {
		n.Labels[GKENodePoolLabel] = pool
	}
	if version != "" {
		n.Labels[fleet.VersionLabel] = version
	}
	return n
}

func TestGKECommands(t *testing.T) {
	nodes := []corev1.Node{gkeNode("n1", "workers", "v1"), gkeNode("n2", "workers", ""), gkeNode("n3", "system", "v1"),
		gkeNode("n4", "", "v1")}
	for _, tc := range []struct {
		name    string
		nodes   []corev1.Node
		context string
		before  []string // in BeforeRoll("v1")
		after   []string // in AfterRoll("v2")
		absent  []string // in neither
	}{
		{name: "not GKE", nodes: []corev1.Node{gkeNode("n1", "", "v1")}},
		{name: "zonal, named context", nodes: nodes, context: "gke_proj-1_us-central1-a_prod",
			before: []string{
				"node pool(s) system (1 node(s)), workers (2 node(s)) of cluster prod in us-central1-a, project proj-1",
				"gcloud container node-pools describe workers --cluster prod --zone us-central1-a --project proj-1 " +
					"--format='json(autoscaling)' > autoscaling-workers.json",
				"gcloud container clusters update prod --zone us-central1-a --project proj-1 --node-pool workers --no-enable-autoscaling",
				"gcloud container node-pools update workers --cluster prod --zone us-central1-a --project proj-1 " +
					"--node-labels=<every existing user label>,ate.dev/substrate-version=v1",
				"gcloud container clusters update prod --zone us-central1-a --project proj-1 --add-maintenance-exclusion-name=ate-roll",
				"! node pool workers: 1 of 2 node(s) lack ate.dev/substrate-version (n2)",
				"--node-pool system --no-enable-autoscaling",
			},
			after: []string{
				"Only now that every node shows ate.dev/substrate-version=v2, and never earlier",
				"gcloud container node-pools describe workers --cluster prod --zone us-central1-a --project proj-1 " +
					"--format='get(config.labels)'",
				"gcloud container node-pools update workers --cluster prod --zone us-central1-a --project proj-1 " +
					"--node-labels=<every existing user label>,ate.dev/substrate-version=v2",
				"gcloud container clusters update prod --zone us-central1-a --project proj-1 --node-pool workers --enable-autoscaling " +
					"--min-nodes <min> --max-nodes <max>",
			},
			absent: []string{"node pool system: 1 of", "$CLUSTER", "n4"},
		},
		{name: "regional", nodes: nodes[:1], context: "gke_p_europe-west4_c1",
			before: []string{"gcloud container clusters update c1 --region europe-west4 --project p --node-pool workers"},
			after:  []string{"node-pools update workers --cluster c1 --region europe-west4 --project p"},
			absent: []string{"--zone", "lack"}},
		{name: "context not gcloud's", nodes: nodes[:1], context: "prod-admin",
			before: []string{"set CLUSTER and ZONE", "gcloud container clusters update $CLUSTER --zone $ZONE --node-pool workers " +
				"--no-enable-autoscaling", "node-pools describe workers --cluster $CLUSTER --zone $ZONE --format"},
			after:  []string{"node-pools update workers --cluster $CLUSTER --zone $ZONE --node-labels"},
			absent: []string{"--project"}},
	} {
		g := DetectGKE(tc.nodes, tc.context)
		if g == nil {
			if tc.before != nil {
				t.Errorf("%s: GKE not detected", tc.name)
			}
			continue
		}
		if tc.before == nil {
			t.Errorf("%s: detected GKE on nodes without the node-pool label", tc.name)
			continue
		}
		before, after := g.BeforeRoll("v1"), g.AfterRoll("v2")
		for _, want := range tc.before {
			if !strings.Contains(before, want) {
				t.Errorf("%s: before-roll text lacks %q:\n%s", tc.name, want, before)
			}
		}
		for _, want := range tc.after {
			if !strings.Contains(after, want) {
				t.Errorf("%s: after-roll text lacks %q:\n%s", tc.name, want, after)
			}
		}
		for _, no := range tc.absent {
			if strings.Contains(before, no) || strings.Contains(after, no) {
				t.Errorf("%s: text has %q:\n%s\n%s", tc.name, no, before, after)
			}
		}
	}
}

func TestGKEAfterRollDue(t *testing.T) {
	at := func(vs ...string) *fleet.Cluster {
		c := &fleet.Cluster{Old: "v1", New: "v2"}
		for _, v := range vs {
			c.Nodes = append(c.Nodes, fleet.NodeInfo{Name: "n" + v, Version: v})
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *fleet.Cluster
		due  bool
	}{
		{"every node NEW", at("v2", "v2"), true},
		{"one node still OLD", at("v2", "v1"), false},
		{"none moved", at("v1", "v1"), false},
		{"no NEW version", &fleet.Cluster{Old: "v2", Nodes: []fleet.NodeInfo{{Name: "n", Version: "v2"}}}, false},
		{"no nodes", &fleet.Cluster{Old: "v1", New: "v2"}, false},
		{"nil", nil, false},
	} {
		v, due := GKEAfterRollDue(tc.c)
		if due != tc.due || (due && v != "v2") {
			t.Errorf("%s: %q %v, want %v", tc.name, v, due, tc.due)
		}
	}
}
