package ateapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// tokenTTL matches upstream kubectl-ate (3600 s).
const tokenTTL = time.Hour

// tokenRequestSource mints service-account tokens for audience through the
// TokenRequest API and reuses each until 80% of its lifetime has passed.
func tokenRequestSource(kube kubernetes.Interface, namespace, sa, audience string) TokenSource {
	var mu sync.Mutex
	var tok string
	var issued, expires time.Time
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if tok != "" && !needsRefresh(now, issued, expires) {
			return tok, nil
		}
		ttl := int64(tokenTTL / time.Second)
		tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &ttl},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("TokenRequest for %s/%s: %w", namespace, sa, err)
		}
		if tr.Status.Token == "" {
			return "", fmt.Errorf("TokenRequest for %s/%s returned no token", namespace, sa)
		}
		tok, issued, expires = tr.Status.Token, now, tr.Status.ExpirationTimestamp.Time
		if expires.IsZero() {
			expires = now.Add(tokenTTL)
		}
		return tok, nil
	}
}

// needsRefresh is true once 80% of the token's lifetime has passed.
func needsRefresh(now, issued, expires time.Time) bool {
	return !now.Before(issued.Add(expires.Sub(issued) * 4 / 5))
}
