package fleet

import (
	"regexp"
	"strings"
)

// GKELocation is where a GKE cluster is, as a context name gcloud wrote
// (gke_PROJECT_LOCATION_CLUSTER) says; zero when the context is named
// otherwise, and the commands keep the runbook's $CLUSTER and $ZONE.
type GKELocation struct{ Project, Location, Cluster string }

// gkeName is what GKE allows in project IDs, locations and cluster names:
// no underscore, so a gcloud context name splits unambiguously, and no
// character a shell would act on, since the names go into printed commands.
var gkeName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// ParseGKEContext splits a context name gcloud wrote.
func ParseGKEContext(name string) (GKELocation, bool) {
	parts := strings.Split(name, "_")
	if len(parts) != 4 || parts[0] != "gke" {
		return GKELocation{}, false
	}
	for _, p := range parts[1:] {
		if !gkeName.MatchString(p) {
			return GKELocation{}, false
		}
	}
	return GKELocation{Project: parts[1], Location: parts[2], Cluster: parts[3]}, true
}

// zone matches a zonal location (us-central1-a); a region has no suffix.
var zone = regexp.MustCompile(`-[a-z]$`)

// Loc is the --zone (or --region) and --project part of a gcloud command,
// with the runbook's placeholder for what the context did not say.
func (l GKELocation) Loc() string {
	if l.Location == "" {
		return "--zone $ZONE"
	}
	flag := "--zone"
	if !zone.MatchString(l.Location) {
		flag = "--region"
	}
	s := flag + " " + l.Location
	if l.Project != "" {
		s += " --project " + l.Project
	}
	return s
}

// Where is --cluster plus Loc, for node-pool commands.
func (l GKELocation) Where() string { return "--cluster " + l.ClusterName() + " " + l.Loc() }

// ClusterName is the cluster's name, or $CLUSTER.
func (l GKELocation) ClusterName() string {
	if l.Cluster == "" {
		return "$CLUSTER"
	}
	return l.Cluster
}
