package kube

import (
	"context"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// ConflictBackoff is how every read-modify-write in rollbook retries when
// another writer got there first: a few quick attempts, each after a fresh
// read, spread a little so two runs that collided do not collide again.
// Persistent contention is not waited out: after Steps attempts the last
// conflict is returned, and the caller's own logic (a re-observation, the
// next renewal) takes over.
var ConflictBackoff = wait.Backoff{Steps: 6, Duration: 5 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 200 * time.Millisecond}

// RetryOnConflict runs fn until it returns anything but a write conflict,
// at most ConflictBackoff.Steps times, waiting ConflictBackoff between
// attempts. fn must read the object afresh when it runs again. A write
// conflict is an HTTP 409: an update from a stale resourceVersion or a
// create that lost to another (AlreadyExists). A cancelled ctx ends the
// retries with the last conflict.
func RetryOnConflict(ctx context.Context, fn func() error) error {
	b := ConflictBackoff
	for {
		err := fn()
		if !IsWriteConflict(err) || b.Steps <= 1 {
			return err
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// IsWriteConflict reports a 409: the object changed (or came into being)
// since it was read, so the write must be decided again from a fresh read.
func IsWriteConflict(err error) bool {
	if err == nil {
		return false
	}
	var s apierrors.APIStatus
	return errors.As(err, &s) && s.Status().Code == http.StatusConflict
}
