//go:build e2e

// Package kubeconfigauth proves kubeconfigs kubectl accepts reach the API
// server through the plugins: an exec credential plugin (users[].user.exec,
// client.authentication.k8s.io/v1) and the oidc auth provider
// (users[].user.auth-provider), and that failures on the way are worded as
// kubectl words them, with no credential printed.
//
// The sim's API server has no OIDC issuer: the oidc provider's id-token here
// is a service-account token (a JWT the API server validates), so the test
// proves the provider is linked, sends its id-token as the bearer token and
// the API server authenticates the request; it does not prove an OIDC
// issuer's discovery or refresh.
package kubeconfigauth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 1}) }

const user = "rollbook-auth-test"

// token is a service-account token the API server accepts, for a user
// bound to cluster-admin (authorization is not what is tested here).
func token(t *testing.T, ctx context.Context) string {
	t.Helper()
	c := simtest.Get(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: "default"}}
	if _, err := c.Client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: user, Namespace: "default"}}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := c.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, user,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func ptr[T any](v T) *T { return &v }

// kubeconfig is the sim's cluster with user u.
func kubeconfig(t *testing.T, u *clientcmdapi.AuthInfo) string {
	t.Helper()
	base, err := clientcmd.LoadFromFile(simtest.Get(t).Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	for name, cl := range base.Clusters {
		cfg.Clusters[name] = cl
		cfg.AuthInfos["u"] = u
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: name, AuthInfo: "u"}
	}
	cfg.CurrentContext = "c"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a plugin's command with kubeconfig kc, in process.
func run(t *testing.T, ctx context.Context, plugin, kc string, args ...string) (string, int) {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	root := ttcmd.NewRootCommand(streams)
	if plugin == "ate" {
		root = atecmd.NewRootCommand(streams)
	}
	code := cli.ExecuteContext(ctx, root, append(args, "--kubeconfig", kc), errOut)
	all := out.String() + errOut.String()
	t.Logf("kubectl %s %s → exit %d\n%s", plugin, strings.Join(args, " "), code, all)
	return all, code
}

// plugin writes an exec credential plugin that logs each call and prints
// an ExecCredential with tok (or fails with exit code fail).
func plugin(t *testing.T, tok string, fail int) (path, calls string) {
	t.Helper()
	dir := t.TempDir()
	path, calls = filepath.Join(dir, "fake-credential-plugin"), filepath.Join(dir, "calls")
	script := fmt.Sprintf(`#!/bin/sh
echo "$KUBERNETES_EXEC_INFO" >>%q
[ %d = 0 ] || { echo "fake plugin: no credentials for you" >&2; exit %d; }
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%%s"}}' %q
`, calls, fail, fail, tok)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, calls
}

func execUser(path string) *clientcmdapi.AuthInfo {
	return &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: path,
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}
}

func TestExecCredentialPlugin(t *testing.T) {
	ctx := simtest.Context(t, 2*time.Minute)
	tok := token(t, ctx)
	path, calls := plugin(t, tok, 0)
	kc := kubeconfig(t, execUser(path))
	for _, p := range []string{"tt", "ate"} {
		out, code := run(t, ctx, p, kc, "status")
		if code != cli.ExitOK && p == "tt" {
			t.Fatalf("kubectl tt status through an exec credential plugin: exit %d", code)
		}
		if strings.Contains(out, tok) {
			t.Fatalf("kubectl %s printed the token", p)
		}
		if strings.Contains(out, "Unauthorized") || strings.Contains(out, "Unable to connect") {
			t.Fatalf("kubectl %s status: not authenticated through the plugin", p)
		}
	}
	b, err := os.ReadFile(calls)
	if err != nil || !strings.Contains(string(b), `"kind":"ExecCredential"`) {
		t.Fatalf("the plugin was not called as client-go calls one (KUBERNETES_EXEC_INFO): %q %v", b, err)
	}

	// A token the API server refuses, a plugin that fails, a plugin that
	// is missing: kubectl's words, exit 1, no credential printed.
	bad, _ := plugin(t, tok[:len(tok)-4]+"AAAA", 0)
	failing, _ := plugin(t, tok, 7)
	for name, c := range map[string]struct {
		path, want string
	}{
		"a refused token":  {bad, "error: You must be logged in to the server (Unauthorized)"},
		"a failing plugin": {failing, "Unable to connect to the server: getting credentials: exec: executable " + failing + " failed with exit code 7"},
		"a missing plugin": {filepath.Join(t.TempDir(), "no-such-plugin"), "Unable to connect to the server: getting credentials: exec: "},
	} {
		out, code := run(t, ctx, "tt", kubeconfig(t, execUser(c.path)), "status")
		if code != cli.ExitFailed || !strings.HasPrefix(out, c.want) || strings.Contains(out, tok[10:40]) {
			t.Errorf("%s: exit %d, want 1 and output starting %q", name, code, c.want)
		}
	}
}

func TestOIDCAuthProvider(t *testing.T) {
	ctx := simtest.Context(t, 2*time.Minute)
	tok := token(t, ctx)
	// client-go keeps one oidc provider per issuer and client in a process:
	// each case names its own client.
	oidc := func(client, idToken string) *clientcmdapi.AuthInfo {
		return &clientcmdapi.AuthInfo{AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{
			"idp-issuer-url": "https://issuer.invalid", "client-id": client, "id-token": idToken}}}
	}
	out, code := run(t, ctx, "tt", kubeconfig(t, oidc("rollbook", tok)), "status")
	if code != cli.ExitOK || strings.Contains(out, "no Auth Provider found") || strings.Contains(out, tok) {
		t.Fatalf("kubectl tt status with an oidc kubeconfig: exit %d", code)
	}
	out, code = run(t, ctx, "tt", kubeconfig(t, oidc("rollbook-refused", tok[:len(tok)-4]+"AAAA")), "status")
	if code != cli.ExitFailed || !strings.HasPrefix(out, "error: You must be logged in to the server (Unauthorized)") {
		t.Fatalf("an id-token the API server refuses: exit %d", code)
	}
}

// A server nobody listens on: kubectl's words, and what the command was
// doing.
func TestConnectionRefused(t *testing.T) {
	ctx := simtest.Context(t, time.Minute)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "secret-token-never-printed"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"tt", "ate"} {
		out, code := run(t, ctx, p, kc, "status")
		want := "The connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?\n"
		if code != cli.ExitFailed || !strings.HasPrefix(out, want) || strings.Contains(out, "secret-token") {
			t.Errorf("kubectl %s status against a closed port: exit %d, want 1 and %q first", p, code, want)
		}
	}
}
