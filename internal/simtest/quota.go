package simtest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// CreateQuota creates q, deletes it when the test ends, and returns once
// the quota controller has counted its usage: until then admission
// refuses every pod the quota covers, whatever its room.
func (c *Cluster) CreateQuota(t testing.TB, ctx context.Context, q *corev1.ResourceQuota) {
	t.Helper()
	quotas := c.Client.CoreV1().ResourceQuotas(q.Namespace)
	if _, err := quotas.Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = quotas.Delete(context.Background(), q.Name, metav1.DeleteOptions{}) })
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := quotas.Get(ctx, q.Name, metav1.GetOptions{})
		return err == nil && cur.Status.Used != nil, nil
	}); err != nil {
		t.Fatalf("the quota %s/%s was never counted: %v", q.Namespace, q.Name, err)
	}
}
