package ateapi

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollbook/rollbook/pkg/atestate"
)

// Sentinels for errors.Is. Every error a Client returns for an RPC is an
// *Error, which matches the sentinel of its gRPC code.
var (
	ErrNotFound           = errors.New("not found")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrAborted            = errors.New("aborted")
	ErrUnavailable        = errors.New("unavailable")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrDataLoss           = errors.New("data loss")
	// ErrUnimplemented covers a method the server does not list and one it
	// lists but answers Unimplemented (#730's stubs).
	ErrUnimplemented = errors.New("unimplemented")
	// ErrRetriesExhausted matches an Aborted/Unavailable error that was
	// retried up to the bound.
	ErrRetriesExhausted = errors.New("retries exhausted")
	// ErrTooManyPages means a List did not end within ClientOptions.MaxPages.
	ErrTooManyPages = errors.New("too many pages")
)

var codeSentinels = map[codes.Code]error{
	codes.NotFound:           ErrNotFound,
	codes.FailedPrecondition: ErrFailedPrecondition,
	codes.Aborted:            ErrAborted,
	codes.Unavailable:        ErrUnavailable,
	codes.Unauthenticated:    ErrUnauthenticated,
	codes.PermissionDenied:   ErrPermissionDenied,
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.ResourceExhausted:  ErrResourceExhausted,
	codes.DataLoss:           ErrDataLoss,
	codes.Unimplemented:      ErrUnimplemented,
}

// Error is a failed control-API call.
type Error struct {
	Method  string     // RPC short name, e.g. "SuspendActor"
	Target  string     // "atespace/name" or worker name; empty for lists
	Code    codes.Code // gRPC code
	Message string     // server's message (bearer tokens scrubbed)
	// ActorState is the actor's state for FailedPrecondition on actor calls,
	// from the server's message or a follow-up GetActor; empty if unknown.
	ActorState ActorState
	// Attempts is how many times the call was sent (>1 after retries).
	Attempts int
	// Missing is set when the server does not serve the method at all.
	Missing bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("ateapi: " + e.Method)
	if e.Target != "" {
		b.WriteString(" " + e.Target)
	}
	b.WriteString(": ")
	switch {
	case e.Missing:
		fmt.Fprintf(&b, "the server does not serve ateapi.Control/%s", e.Method)
		if e.Method == "DrainWorker" {
			b.WriteString(" (the install predates versioned builds and needs a fresh install)")
		}
		return b.String()
	case e.Code == codes.Unimplemented && e.Method == "DrainWorker":
		b.WriteString("DrainWorker is listed but unimplemented (stub server; the install needs a fresh install)")
	case e.Code == codes.FailedPrecondition && e.ActorState != "":
		fmt.Fprintf(&b, "refused in actor state %s", e.ActorState)
	case e.Code == codes.Unauthenticated:
		b.WriteString("authentication failed (check the token and its audience)")
	default:
		b.WriteString(codeText(e.Code))
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (gave up after %d attempts)", e.Attempts)
	}
	return b.String()
}

func codeText(c codes.Code) string {
	if s, ok := codeSentinels[c]; ok {
		return s.Error()
	}
	return strings.ToLower(c.String())
}

// Is matches the sentinel for the error's code, and ErrRetriesExhausted.
func (e *Error) Is(target error) bool {
	if target == ErrRetriesExhausted {
		return e.Attempts > 1 && retryable(e.Code)
	}
	if e.Missing && target == ErrUnimplemented {
		return true
	}
	return codeSentinels[e.Code] == target && target != nil
}

// GRPCStatus lets status.Code(err) see the code through the wrapper.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

var gotStateRE = regexp.MustCompile(`got:?\s*([A-Z][A-Z_]+)`)

// stateFromMessage extracts "got: ACTOR_STATE_X" from upstream texts.
func stateFromMessage(msg string) ActorState {
	if m := gotStateRE.FindStringSubmatch(msg); m != nil {
		return atestate.ParseActorState(m[1])
	}
	return ""
}

func retryable(c codes.Code) bool { return c == codes.Aborted || c == codes.Unavailable }
