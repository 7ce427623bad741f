package kube

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestQuotaRefusalTellsQuotaFromRBAC(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err   error
		quota bool
	}{
		{apierrors.NewForbidden(pods, "probe", errors.New("exceeded quota: workers, requested: pods=1, used: pods=12, limited: pods=12")), true},
		{apierrors.NewForbidden(pods, "probe", errors.New("failed quota: compute: must specify limits.cpu for: probe")), true},
		{apierrors.NewForbidden(pods, "probe", errors.New("insufficient quota to consume: pods")), true},
		{apierrors.NewForbidden(pods, "probe", errors.New("status unknown for quota: full, resources: pods")), true},
		{apierrors.NewForbidden(pods, "probe", errors.New(`User "op" cannot create resource "pods" in API group "" in the namespace "ate-workers"`)), false},
		{fmt.Errorf("wrapped: %w", apierrors.NewForbidden(pods, "p", errors.New("exceeded quota: q, requested: pods=1"))), true},
		{errors.New("exceeded quota: not an API status"), false},
		{nil, false},
	} {
		if got := QuotaRefusal(tc.err); got != tc.quota {
			t.Errorf("QuotaRefusal(%v) = %t, want %t", tc.err, got, tc.quota)
		}
	}
}
