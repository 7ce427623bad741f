package substrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TokenReviewer authenticates bearer tokens with the real API server's
// TokenReview, as a mid-era ate-api-server does: the token must be valid for
// the audience and belong to the one allowed principal (ate-system/ate-client).
type TokenReviewer struct {
	Client  kubernetes.Interface
	Allowed string // username; default ClientUsername
}

// Review implements fakesubstrate.TokenReviewer. Its errors go to the client
// and never contain the token.
func (r TokenReviewer) Review(ctx context.Context, token, audience string) (string, error) {
	tr, err := r.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", errors.New(redact("token review failed: "+err.Error(), token))
	}
	allowed := r.Allowed
	if allowed == "" {
		allowed = ClientUsername
	}
	return decideReview(tr.Status, audience, allowed, token)
}

// decideReview turns a TokenReview status into a principal or a refusal.
func decideReview(st authnv1.TokenReviewStatus, audience, allowed, token string) (string, error) {
	if !st.Authenticated {
		msg := "token not authenticated"
		if st.Error != "" {
			msg += ": " + st.Error
		}
		return "", errors.New(redact(msg, token))
	}
	// An empty status.audiences means the API server's own audiences, which
	// are not ours.
	if !slices.Contains(st.Audiences, audience) {
		return "", fmt.Errorf("token is not valid for audience %s", audience)
	}
	if st.User.Username != allowed {
		return "", fmt.Errorf("principal %s is not allowed (want %s)", redact(st.User.Username, token), allowed)
	}
	return st.User.Username, nil
}

// redact removes the token from a message, in case an upstream error
// quoted it.
func redact(msg, token string) string {
	if token == "" {
		return msg
	}
	return strings.ReplaceAll(msg, token, "<redacted>")
}
