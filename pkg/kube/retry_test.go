package kube

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func TestRetryOnConflict(t *testing.T) {
	conflict := apierrors.NewConflict(corev1.Resource("nodes"), "n1", errors.New("the object has been modified"))
	exists := apierrors.NewAlreadyExists(corev1.Resource("configmaps"), "history")
	other := apierrors.NewServiceUnavailable("etcd is down")
	cases := []struct {
		name  string
		errs  []error // what the attempts return, in turn; the last repeats
		calls int
		want  error
	}{
		{"first attempt succeeds", []error{nil}, 1, nil},
		{"a conflict, then success", []error{conflict, nil}, 2, nil},
		{"a create that lost, then success", []error{exists, nil}, 2, nil},
		{"a wrapped conflict is one", []error{fmt.Errorf("take lease: %w", conflict), nil}, 2, nil},
		{"any other error ends at once", []error{other}, 1, other},
		{"a conflict, then another error", []error{conflict, other}, 2, other},
		{"conflicts forever: the last after Steps attempts", []error{conflict}, ConflictBackoff.Steps, conflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls := 0
				start := time.Now()
				err := RetryOnConflict(t.Context(), func() error {
					calls++
					return tc.errs[min(calls, len(tc.errs))-1]
				})
				if calls != tc.calls || !errors.Is(err, tc.want) && err != tc.want {
					t.Fatalf("%d calls, %v; want %d, %v", calls, err, tc.calls, tc.want)
				}
				// The bubble's clock: what the backoff waited, exactly.
				if took := time.Since(start); took > time.Second {
					t.Fatalf("retries took %s: conflicts are retried quickly", took)
				}
			})
		})
	}
	t.Run("a cancelled context ends the retries", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := RetryOnConflict(ctx, func() error { calls++; cancel(); return conflict })
		if calls != 1 || !apierrors.IsConflict(err) {
			t.Fatalf("%d calls, %v", calls, err)
		}
	})
}
