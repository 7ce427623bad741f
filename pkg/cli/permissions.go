package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// Permission is one verb on one resource a command needs.
type Permission struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Namespace   string // "" = cluster-wide (or every namespace)
	Name        string // one object, where a role grants it by name
}

func (p Permission) String() string {
	r := p.Resource
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Name != "" {
		r += " " + p.Name
	}
	where := "cluster-wide"
	if p.Namespace != "" {
		where = "in " + p.Namespace
	}
	return fmt.Sprintf("%s %s %s", p.Verb, r, where)
}

// MissingPermissionsError names every permission a command lacks, found
// before it changed anything.
type MissingPermissionsError struct {
	Plugin  string
	Missing []Permission
}

func (e *MissingPermissionsError) Error() string {
	lines := make([]string, 0, len(e.Missing))
	for _, p := range e.Missing {
		lines = append(lines, "  - "+p.String())
	}
	return fmt.Sprintf("you lack %d permission(s) this command needs; nothing was changed:\n%s\n"+
		"Bind the role in deploy/rbac/%s-operator.yaml (or ask your cluster admin to).",
		len(e.Missing), strings.Join(lines, "\n"), e.Plugin)
}

// ExitCode makes the command exit 1.
func (e *MissingPermissionsError) ExitCode() int { return ExitFailed }

// CheckPermissions asks the API server (SelfSubjectAccessReview) about every
// permission at once, before the first mutation, and names all the missing
// ones. A server that cannot answer is not a refusal: the run's own requests
// will tell.
func CheckPermissions(ctx context.Context, cs kubernetes.Interface, plugin string, perms []Permission) error {
	var missing []Permission
	for _, p := range perms {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource, Namespace: p.Namespace, Name: p.Name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil //nolint:nilerr // unanswerable: let the run's own requests say
		}
		if !r.Status.Allowed {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return &MissingPermissionsError{Plugin: plugin, Missing: missing}
	}
	return nil
}

// explainForbidden adds the way out to a Forbidden met mid-run.
func explainForbidden(err error, plugin string) error {
	var se apierrors.APIStatus
	if !apierrors.IsForbidden(err) || !errors.As(err, &se) {
		return err
	}
	if kube.QuotaRefusal(err) {
		return fmt.Errorf("%w\nThe run stopped where it was; `kubectl %s status` shows what it left. A ResourceQuota refused it, "+
			"not your role: make room in the quota it names (kubectl describe resourcequota -n NAMESPACE), then re-run "+
			"the same command", err, plugin)
	}
	return fmt.Errorf("%w\nThe run stopped where it was; `kubectl %s status` shows what it left. "+
		"Bind the role in deploy/rbac/%s-operator.yaml, then re-run the same command", err, plugin, plugin)
}
