package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestConnectionMessageIsKubectls(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/nodes", Err: fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)}
	tls := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api", Err: errors.New("tls: failed to verify certificate")}
	for _, c := range []struct {
		err        error
		msg, doing string
		recognised bool
	}{
		{refused, "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?", "", true},
		{fmt.Errorf("list nodes: %w", refused), "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?",
			"list nodes", true},
		{WithExitCode(ExitBlocked, fmt.Errorf("probe: %w", tls)), "Unable to connect to the server: tls: failed to verify certificate", "probe", true},
		{apierrors.NewUnauthorized("Unauthorized"), "error: You must be logged in to the server (Unauthorized)", "", true},
		{&url.Error{Op: "Get", URL: "https://x", Err: context.Canceled}, "", "", false}, // Ctrl-C is not a connection error
		{apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("no")), "", "", false},
		{errors.New("plain"), "", "", false},
	} {
		msg, doing, ok := connectionMessage(c.err)
		if msg != c.msg || doing != c.doing || ok != c.recognised {
			t.Errorf("connectionMessage(%v) = %q, %q, %v; want %q, %q, %v", c.err, msg, doing, ok, c.msg, c.doing, c.recognised)
		}
	}
}

// kubectl's auth providers are linked: a kubeconfig naming them gets a
// provider, not "no Auth Provider found".
func TestAuthProvidersLinked(t *testing.T) {
	for _, name := range []string{"oidc", "gcp", "azure"} {
		_, err := rest.GetAuthProvider("https://x", &clientcmdapi.AuthProviderConfig{Name: name,
			Config: map[string]string{"idp-issuer-url": "https://issuer.invalid", "client-id": "c", "id-token": "t"}}, nil)
		// gcp and azure are kubectl's stubs: they say which exec plugin
		// replaced them.
		if err != nil && strings.Contains(err.Error(), "no Auth Provider found") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
