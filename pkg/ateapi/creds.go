package ateapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

const redacted = "[REDACTED]"

// Secret is a string that never prints: String, GoString and every fmt verb
// show [REDACTED], so options holding a token are safe to log.
type Secret string

// String redacts the secret.
func (Secret) String() string { return redacted }

// GoString redacts the secret for %#v.
func (Secret) GoString() string { return redacted }

// Format redacts the secret for every fmt verb.
func (Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// MarshalText redacts the secret in JSON and YAML.
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Reveal returns the secret's value; call it only to send the token.
func (s Secret) Reveal() string { return string(s) }

// TokenSource returns a bearer token that is valid now. Its errors must not
// contain the token.
type TokenSource func(ctx context.Context) (string, error)

// StaticToken always returns tok.
func StaticToken(tok Secret) TokenSource {
	return func(context.Context) (string, error) { return tok.Reveal(), nil }
}

// FileToken re-reads path on every call, so a rotated projected token is
// picked up.
func FileToken(path string) TokenSource {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read token file: %w", err) // names the path, never the content
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty", path)
		}
		return tok, nil
	}
}

// BearerCredentials are gRPC per-RPC credentials sending
// "authorization: Bearer <token>". They require transport security and
// never print the token.
type BearerCredentials struct {
	src  TokenSource
	seen *seenTokens
}

type seenTokens struct {
	mu   sync.Mutex
	toks []string
}

// NewBearerCredentials wraps a token source.
func NewBearerCredentials(src TokenSource) *BearerCredentials {
	return &BearerCredentials{src: src, seen: &seenTokens{}}
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b *BearerCredentials) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := b.src(ctx)
	if err != nil {
		return nil, fmt.Errorf("ateapi: bearer token: %s", b.scrub(err.Error()))
	}
	if tok == "" {
		return nil, errors.New("ateapi: bearer token: empty token")
	}
	b.remember(tok)
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// token is never sent in clear text.
func (b *BearerCredentials) RequireTransportSecurity() bool { return true }

// String redacts the token.
func (b *BearerCredentials) String() string { return "ateapi.BearerCredentials(" + redacted + ")" }

// GoString redacts the token for %#v.
func (b *BearerCredentials) GoString() string { return b.String() }

// Format redacts the token for every fmt verb.
func (b *BearerCredentials) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, b.String()) }

func (b *BearerCredentials) remember(tok string) {
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	for _, t := range b.seen.toks {
		if t == tok {
			return
		}
	}
	// Keep the last few: enough to scrub texts about a just-rotated token.
	b.seen.toks = append(b.seen.toks, tok)
	if len(b.seen.toks) > 4 {
		b.seen.toks = b.seen.toks[1:]
	}
}

// scrub removes any token we have sent from s, in case a server echoes it.
func (b *BearerCredentials) scrub(s string) string {
	if b == nil || b.seen == nil {
		return s
	}
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	for _, t := range b.seen.toks {
		if len(t) >= 8 {
			s = strings.ReplaceAll(s, t, redacted)
		}
	}
	return s
}
