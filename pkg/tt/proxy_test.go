package tt

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The CLI's proxy environment reaches the helpers that go to the network
// (probe: git ls-remote; kmd: git clone; flash: the bundle), in a stable
// order, and no other helper.
func TestProxyEnvReachesNetworkHelpers(t *testing.T) {
	for _, k := range ProxyEnvNames {
		t.Setenv(k, "")
	}
	t.Setenv("HTTPS_PROXY", "http://proxy.example:3128")
	t.Setenv("no_proxy", ".svc,10.0.0.0/8")
	h := HelperConfig{Image: "img", Namespace: "ns", Proxy: ProxyFromEnv()}
	env := func(task string) map[string]string {
		out := map[string]string{}
		for _, e := range HelperSpecFor(h, task, "n", "k", []string{"kubectl-tt", "node-agent", task}).Pod().Spec.Containers[0].Env {
			if e.ValueFrom == nil {
				out[e.Name] = e.Value
			}
		}
		return out
	}
	for _, task := range []string{"probe", "kmd", "flash"} {
		got := env(task)
		if got["HTTPS_PROXY"] != "http://proxy.example:3128" || got["no_proxy"] != ".svc,10.0.0.0/8" {
			t.Errorf("%s helper env %v lacks the proxy", task, got)
		}
		if v, ok := got["HTTP_PROXY"]; ok {
			t.Errorf("%s helper: HTTP_PROXY, empty in the CLI's environment, was passed on as %q", task, v)
		}
	}
	if got := env("smi"); len(got) != 0 {
		t.Errorf("the smi helper reaches no network but got %v", got)
	}
	a := HelperSpecFor(h, "kmd", "n", "k", nil).Pod().Spec.Containers[0].Env
	b := HelperSpecFor(h, "kmd", "n", "k", nil).Pod().Spec.Containers[0].Env
	if !equalEnv(a, b) {
		t.Error("the helper's env order is not stable (its spec hash would change between runs)")
	}
}

func equalEnv(a, b []corev1.EnvVar) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}

// A proxy with credentials would put them in every network helper's pod
// spec, where viewers read them: the run is refused before any API call.
func TestProxyCredentialsAreRefused(t *testing.T) {
	for _, v := range []string{"http://user:secret@proxy.example:3128", "http://token@proxy.example", "http://p.example\n"} {
		h := HelperConfig{Image: "img", Namespace: "ns", Proxy: map[string]string{"https_proxy": v}}
		err := h.Validate()
		if err == nil {
			t.Errorf("proxy %q: accepted", v)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "token") {
			t.Errorf("the refusal prints the credentials: %v", err)
		}
	}
	if err := (HelperConfig{Image: "img", Namespace: "ns", Proxy: map[string]string{"HTTPS_PROXY": "http://p.example:3128"}}).Validate(); err != nil {
		t.Errorf("a proxy without credentials: %v", err)
	}
}
