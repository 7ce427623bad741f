package kube

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// QuotaRefusal says whether err is a ResourceQuota's refusal of a create.
// The quota admission plugin answers 403 Forbidden like an RBAC denial,
// told apart only by its message ("exceeded quota: …", "failed quota: …",
// "status unknown for quota: …", "quota usage is negative …",
// "insufficient quota to consume: …" in k8s.io/apiserver's
// pkg/admission/plugin/resourcequota/controller.go), and the fix is
// another person's: the namespace's quota, not a Role.
func QuotaRefusal(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"exceeded quota: ", "failed quota: ", "status unknown for quota: ",
		"quota usage is negative for resource(s): ", "insufficient quota to consume: "} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
