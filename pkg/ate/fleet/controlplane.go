package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Two steps of the upgrade outside rollbook leave a trace in the cluster:
// step 2 (`ate-setup deploy ate-controller`) and step 6 (`deploy
// apiserver`) change the images of their Deployments. The API server's
// images are recorded when every node reached NEW (the OLD release's, step
// 6 comes after), so a later run can tell that step 6 ran, and that a
// rollback told the OLD API server is back was told so while step 6's
// still runs. The controller's images carry the release's version as
// their tag when they are prebuilt.

// controlPlaneImages reads the images of the API server's and
// ate-controller's Deployments (one list of the few in Namespace), each
// "" when it is absent or the client may not read it: then nothing about
// steps 2 and 6 is observed, and the gates rest on what was recorded and
// told.
func controlPlaneImages(ctx context.Context, cs kubernetes.Interface) (api, controller string, err error) {
	l, err := cs.AppsV1().Deployments(Namespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("list Deployments in %s: %w", Namespace, err)
	}
	for _, d := range l.Items {
		var images []string
		for _, c := range d.Spec.Template.Spec.Containers {
			images = append(images, c.Image)
		}
		switch d.Name {
		case APIServerDeployment:
			api = strings.Join(images, ",")
		case ControllerDeployment:
			controller = strings.Join(images, ",")
		}
	}
	return api, controller, nil
}

// ControllerBehind says why ate-controller is seen not to run NEW yet, ""
// when it may (or nothing tells). Runbook step 2 upgrades it before the
// dataplane; a release's prebuilt images are tagged with its version
// (ate-setup takes the version from --image-tag, its digest removed), so
// a controller whose every image is tagged OLD is OLD's. A source build's
// images carry a digest only: then nothing is seen.
func (c *Cluster) ControllerBehind() string {
	if c.New == "" || c.Old == "" || c.Old == c.New || c.Controller == "" {
		return ""
	}
	for _, image := range strings.Split(c.Controller, ",") {
		if imageTag(image) != c.Old {
			return ""
		}
	}
	return fmt.Sprintf("Deployment %s/%s runs %s, tagged with OLD (%s)", Namespace, ControllerDeployment, c.Controller, c.Old)
}

// imageTag is an image reference's tag ("" without one): after the last
// colon past the last slash (a registry's port is before it), its digest
// removed.
func imageTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ""
	}
	return ref[i+1:]
}

// Step6 is what is known of step 6 while it may have run
// (ControlPlaneMayBeNew): ran, with the images it brought and since when
// they were seen, once the API server was seen to run other images than
// when every node reached NEW. A run that sees them first records that
// (Step6Unrecorded).
type Step6 struct {
	Ran    bool
	Before string // the API server's images when every node reached NEW
	After  string // the images step 6 brought
	Seen   time.Time
}

// Step6 says whether step 6 is seen to have run; the zero Step6 when it
// may not have run yet, or nothing can tell.
func (c *Cluster) Step6() Step6 {
	a := c.NewAtelet()
	if _, ok := c.ControlPlaneMayBeNew(); !ok || a.APIServerAtReached == "" {
		return Step6{}
	}
	if when, images, ok := strings.Cut(a.Step6Seen, " "); ok {
		if t, err := time.Parse(time.RFC3339, when); err == nil && !t.Before(a.Reached) {
			return Step6{Ran: true, Before: a.APIServerAtReached, After: images, Seen: t}
		}
	}
	if c.APIServer != "" && c.APIServer != a.APIServerAtReached {
		return Step6{Ran: true, Before: a.APIServerAtReached, After: c.APIServer}
	}
	return Step6{}
}

// Step6Unrecorded says step 6 is seen to have run now and is not recorded
// yet.
func (c *Cluster) Step6Unrecorded() bool {
	s := c.Step6()
	return s.Ran && s.Seen.IsZero()
}

// String says what step 6 changed, for messages.
func (s Step6) String() string {
	if !s.Ran {
		return ""
	}
	seen := "seen now"
	if !s.Seen.IsZero() {
		seen = "first seen " + s.Seen.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("Deployment %s/%s went from %s to %s (%s)", Namespace, APIServerDeployment, s.Before, s.After, seen)
}

// StillAfterStep6 says, for a rollback told the OLD API server is back,
// why that cannot be so: the API server runs other images than when every
// node reached NEW. "" when it may be so, or nothing can tell.
func (c *Cluster) StillAfterStep6() string {
	a := c.NewAtelet()
	if _, ok := c.ControlPlaneMayBeNew(); !ok || a.APIServerAtReached == "" || c.APIServer == "" ||
		c.APIServer == a.APIServerAtReached {
		return ""
	}
	return fmt.Sprintf("Deployment %s/%s runs %s, not %s as when every node reached %s: the OLD API server is not back",
		Namespace, APIServerDeployment, c.APIServer, a.APIServerAtReached, c.New)
}
