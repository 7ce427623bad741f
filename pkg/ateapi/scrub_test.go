package ateapi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// echoReviewer refuses every token and repeats it, as a careless server
// might.
type echoReviewer struct{}

func (echoReviewer) Review(_ context.Context, token, _ string) (string, error) {
	return "", fmt.Errorf("token %q is not known here", token)
}

// The constructor's own call (reflection) already carries the token: an
// error from it is scrubbed like every later one.
func TestDialErrorIsScrubbedOfTheToken(t *testing.T) {
	pki, err := fakesubstrate.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fakesubstrate.Start(fakesubstrate.Options{Certificate: &pki.Certificate, TokenReviewer: echoReviewer{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pki.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &harness{srv: srv, pki: pki, caFile: caFile}
	_, err = h.dial(t, nil)
	if err == nil {
		t.Fatal("dial with a refused token succeeded")
	}
	if strings.Contains(err.Error(), goodToken) {
		t.Fatalf("the token reached the error: %v", err)
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("status code lost: %v", status.Code(err))
	}
}
