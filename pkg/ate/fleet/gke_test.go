package fleet

import "testing"

func TestParseGKEContext(t *testing.T) {
	for _, tc := range []struct {
		name, project, location, cluster string
		ok                               bool
	}{
		{"gke_my-proj_us-central1-a_prod", "my-proj", "us-central1-a", "prod", true},
		{"gke_p1_europe-west4_ate-cluster-2", "p1", "europe-west4", "ate-cluster-2", true},
		{"kind-kind", "", "", "", false},
		{"gke_p_l", "", "", "", false},                 // too few parts
		{"gke_p_l_c_extra", "", "", "", false},         // too many
		{"gke_p_l_c;rm -rf /", "", "", "", false},      // never echoed into a command
		{"gke_P_us-central1_c", "", "", "", false},     // not a GKE name
		{"arn_p_us-central1_c", "", "", "", false},     // not gcloud's
		{"gke__us-central1_c", "", "", "", false},      // empty project
		{"gke_p_us-central1_$(id)", "", "", "", false}, // shell metacharacters
	} {
		l, ok := ParseGKEContext(tc.name)
		if ok != tc.ok || l != (GKELocation{tc.project, tc.location, tc.cluster}) {
			t.Errorf("%q: %+v %v; want %q %q %q %v", tc.name, l, ok, tc.project, tc.location, tc.cluster, tc.ok)
		}
	}
}

func TestGKELocationFillsTheCommands(t *testing.T) {
	for _, tc := range []struct {
		context, where string
	}{
		{"gke_my-proj_us-central1-a_prod", "--cluster prod --zone us-central1-a --project my-proj"},
		{"gke_p1_europe-west4_ate-2", "--cluster ate-2 --region europe-west4 --project p1"},
		{"kind-kind", "--cluster $CLUSTER --zone $ZONE"},
	} {
		l, _ := ParseGKEContext(tc.context)
		if got := l.Where(); got != tc.where {
			t.Errorf("%s: %q, want %q", tc.context, got, tc.where)
		}
	}
}
