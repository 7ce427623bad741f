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

// Runbook step 6 (`ate-setup deploy apiserver`) is the one step of the
// upgrade outside rollbook whose trace the cluster keeps: the API server's
// Deployment runs the new release's images. Its images are recorded when
// every node reached NEW (the OLD release's, step 6 comes after), so a
// later run can tell that step 6 ran, and that a rollback told the OLD API
// server is back was told so while step 6's still runs.

// apiServerImages reads the images of the API server's Deployment, ""
// when it is absent or the client may not read it: then nothing about
// step 6 is observed and the gates rest on what was recorded and told.
func apiServerImages(ctx context.Context, cs kubernetes.Interface) (string, error) {
	d, err := cs.AppsV1().Deployments(Namespace).Get(ctx, APIServerDeployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read Deployment %s/%s: %w", Namespace, APIServerDeployment, err)
	}
	var images []string
	for _, c := range d.Spec.Template.Spec.Containers {
		images = append(images, c.Image)
	}
	return strings.Join(images, ","), nil
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

// Step6Unrecorded: step 6 is seen to have run now and not recorded yet.
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
