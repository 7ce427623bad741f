package kube

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// The room is the tightest resource of the tightest unscoped quota; every
// resource a quota may count of a pod is tried (a quota on it alone,
// with room for exactly 3 such pods and then none left).
func TestQuotaRoomIsTheTightestResource(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("2Gi")}}},
		{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}},
	}}}
	quota := func(name string, hard, used corev1.ResourceList) corev1.ResourceQuota {
		return corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.ResourceQuotaStatus{Hard: hard, Used: used}}
	}
	per := podQuotaUse(pod)
	if per["requests.cpu"] != 150 || per[corev1.ResourceCPU] != 150 || per["limits.memory"] != 1<<30*1000 {
		t.Fatalf("one pod counts %v", per)
	}
	for r, n := range per {
		hard := *resource.NewMilliQuantity(3*n+n/2, resource.DecimalSI) // room for 3, not 4
		used := *resource.NewMilliQuantity(0, resource.DecimalSI)
		room, name, by := QuotaRoom([]corev1.ResourceQuota{quota("q", corev1.ResourceList{r: hard}, corev1.ResourceList{r: used})}, pod)
		if room != 3 || name != "q" || by != r {
			t.Errorf("a quota on %s alone: room %d set by %s/%s; want 3 by q/%s", r, room, name, by, r)
		}
		full := *resource.NewMilliQuantity(3*n+n/2, resource.DecimalSI)
		if room, _, _ := QuotaRoom([]corev1.ResourceQuota{quota("q", corev1.ResourceList{r: hard}, corev1.ResourceList{r: full})}, pod); room != 0 {
			t.Errorf("a full quota on %s: room %d, want 0", r, room)
		}
	}
	// The tightest of several; a scoped quota and one on what the pod does
	// not use limit nothing.
	qs := []corev1.ResourceQuota{
		quota("pods", corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}, corev1.ResourceList{corev1.ResourcePods: resource.MustParse("4")}),
		quota("mem", corev1.ResourceList{corev1.ResourceRequestsMemory: resource.MustParse("1Gi")}, nil),
		quota("gpu", corev1.ResourceList{"requests.nvidia.com/gpu": resource.MustParse("0")}, nil),
	}
	scoped := quota("scoped", corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}, nil)
	scoped.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}
	qs = append(qs, scoped)
	if room, name, by := QuotaRoom(qs, pod); room != 4 || name != "mem" || by != corev1.ResourceRequestsMemory {
		t.Fatalf("room %d by %s/%s; want 4 by mem/requests.memory", room, name, by)
	}
	if room, _, _ := QuotaRoom(qs[2:], pod); room != -1 {
		t.Fatalf("no quota limits the pod: room %d, want -1", room)
	}
}
