package runbook

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// IsTransient reports whether err is an API failure that says nothing about
// the target: the server was busy or briefly unavailable, or the connection
// dropped. Acting again on a fresh observation is then safe and likely to
// succeed. A cancelled context, a refusal (4xx) or a step's own verdict is
// never transient.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || IsBlocked(err) {
		return false
	}
	switch {
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err),
		apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsUnexpectedServerError(err):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded)
}
