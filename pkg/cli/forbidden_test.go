package cli

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A quota's 403 is not a missing role: the way out names the quota.
func TestExplainForbiddenTellsQuotaFromRole(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	quota := explainForbidden(apierrors.NewForbidden(pods, "p", errors.New("exceeded quota: full, requested: pods=1")), "tt").Error()
	if !strings.Contains(quota, "ResourceQuota") || strings.Contains(quota, "deploy/rbac/") {
		t.Errorf("a quota's refusal: %s", quota)
	}
	role := explainForbidden(apierrors.NewForbidden(pods, "p", errors.New(`User "op" cannot create resource "pods"`)), "tt").Error()
	if !strings.Contains(role, "deploy/rbac/tt-operator.yaml") {
		t.Errorf("an RBAC refusal: %s", role)
	}
}
