package fakesubstrate

import (
	"context"
	"errors"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollbook/rollbook/pkg/protopath"
)

// TokenReviewer authenticates a bearer token for an audience and returns the
// principal (e.g. "system:serviceaccount:ate-system:ate-client"). The
// simulator implements it with the API server's TokenReview
// (spec.audiences = [audience]); tests use StaticTokens. Errors must not
// contain the token: their text is sent to the client.
type TokenReviewer interface {
	Review(ctx context.Context, token, audience string) (principal string, err error)
}

// StaticToken is one accepted token of StaticTokens.
type StaticToken struct {
	Principal string
	Audiences []string
}

// StaticTokens is a TokenReviewer over a fixed token table.
type StaticTokens map[string]StaticToken

// Review implements TokenReviewer.
func (t StaticTokens) Review(_ context.Context, token, audience string) (string, error) {
	e, ok := t[token]
	if !ok {
		return "", errors.New("token not recognised")
	}
	if !slices.Contains(e.Audiences, audience) {
		return "", errors.New("token audience does not include " + audience)
	}
	return e.Principal, nil
}

type principalKey struct{}

// PrincipalFrom returns the authenticated principal of a request context.
func PrincipalFrom(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

func (s *Server) authenticate(ctx context.Context, method string) (context.Context, error) {
	if s.opts.TokenReviewer == nil {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	if v := md.Get("authorization"); len(v) > 0 {
		token, _ = strings.CutPrefix(v[0], "Bearer ")
		token = strings.TrimSpace(token)
	}
	if token == "" {
		return nil, status.Error(codes.Unauthenticated, "missing bearer token")
	}
	principal, err := s.opts.TokenReviewer.Review(ctx, token, s.opts.Audience)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, "invalid bearer token: "+err.Error())
	}
	if s.opts.Authorize != nil {
		if err := s.opts.Authorize(principal, method); err != nil {
			return nil, status.Errorf(codes.PermissionDenied, "%s may not call %s: %v", principal, method, err)
		}
	}
	return context.WithValue(ctx, principalKey{}, principal), nil
}

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// authStream covers server reflection too, as the real interceptor chain does.
func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if _, err := s.authenticate(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// SetHiddenAtespaces makes the atespaces in hidden unreadable for
// principal: the actor calls naming one (ListActors of it, GetActor,
// SuspendActor, RevertActor, ResumeActor) are PermissionDenied, and a
// ListActors over every atespace leaves their actors out, as a
// relationship-based authorizer filters a list to what the caller may see.
// Workers are global and stay visible, their assignments too. nil or empty
// lifts it.
func (s *Server) SetHiddenAtespaces(principal string, hidden []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(hidden) == 0 {
		delete(s.hidden, principal)
		return
	}
	if s.hidden == nil {
		s.hidden = map[string]map[string]bool{}
	}
	set := map[string]bool{}
	for _, a := range hidden {
		set[a] = true
	}
	s.hidden[principal] = set
}

func (s *Server) hiddenFrom(principal string) map[string]bool { return s.hidden[principal] }

// SetRefusedMethods refuses principal the methods named (short names, such
// as "DrainWorker") wherever they point, PermissionDenied before anything
// is looked up, as an authorizer decides on the method before the object.
// nil or empty lifts it.
func (s *Server) SetRefusedMethods(principal string, methods []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(methods) == 0 {
		delete(s.refused, principal)
		return
	}
	if s.refused == nil {
		s.refused = map[string]map[string]bool{}
	}
	set := map[string]bool{}
	for _, m := range methods {
		set[m] = true
	}
	s.refused[principal] = set
}

// authorizeAtespace refuses a method refused the caller, and an actor call
// into an atespace hidden from the caller. Called with s.mu held.
func (s *Server) authorizeAtespace(ctx context.Context, method protoreflect.Name, req protoreflect.Message) error {
	principal := PrincipalFrom(ctx)
	if s.refused[principal][string(method)] {
		return status.Errorf(codes.PermissionDenied, "%s may not call %s", principal, method)
	}
	hidden := s.hiddenFrom(principal)
	if len(hidden) == 0 {
		return nil
	}
	var atespace string
	switch method {
	case "ListActors":
		atespace = protopath.String(req, "atespace")
	case "GetActor", "SuspendActor", "RevertActor", "ResumeActor":
		atespace, _ = actorRef(req)
	}
	if atespace != "" && hidden[atespace] {
		return status.Errorf(codes.PermissionDenied, "%s may not call %s in atespace %s", principal, method, atespace)
	}
	return nil
}
