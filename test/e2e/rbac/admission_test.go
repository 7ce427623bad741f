//go:build e2e

package rbac

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

const helperNS = deploy.HelperNamespace

// applyHelperPolicy applies deploy/admission/helper-policy.yaml as shipped,
// its allowed images set to the one image the sim's registry serves (the
// release sets the digest of its own), and waits until the API server has
// type-checked it and enforces it.
func applyHelperPolicy(t *testing.T, ctx context.Context, c *simtest.Cluster) {
	t.Helper()
	image := os.Getenv("ROLLBOOK_HELPER_IMAGE")
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	err = deploy.Apply(ctx, dyn, deploy.HelperPolicyFile, func(o *unstructured.Unstructured) {
		if o.GetKind() == "ConfigMap" {
			_ = unstructured.SetNestedField(o.Object, image, "data", "images")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// The type checker reports expressions that do not compile or refer to
	// fields a Pod lacks.
	var vap *admissionv1.ValidatingAdmissionPolicy
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		vap, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "rollbook-helpers", metav1.GetOptions{})
		return err == nil && vap.Status.ObservedGeneration == vap.Generation, err
	})
	if err != nil {
		t.Fatalf("the policy was never type-checked: %v", err)
	}
	if tc := vap.Status.TypeChecking; tc != nil && len(tc.ExpressionWarnings) > 0 {
		t.Fatalf("policy type-check warnings: %+v", tc.ExpressionWarnings)
	}
	// Enforced once the plugin has loaded it: a bare privileged pod is refused.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(helperNS).Create(ctx, privilegedPod("probe-policy"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "rollbook-helpers"), nil
	})
	if err != nil {
		t.Fatalf("the policy is not enforced: %v", err)
	}
}

func privilegedPod(name string) *corev1.Pod {
	yes := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: "kwok-node-0", Containers: []corev1.Container{{Name: "sh", Image: "busybox",
			Command: []string{"sh", "-c", "chroot /host"}, SecurityContext: &corev1.SecurityContext{Privileged: &yes},
			VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}}}
}

// proveHelperPolicy: as the tt-operator, rollbook's exact helper pods are
// admitted in the helper namespace and every variation that would widen
// them is refused; no pod may be created anywhere else.
func proveHelperPolicy(t *testing.T, ctx context.Context, c *simtest.Cluster) {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operator}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := tt.HelperConfig{Image: os.Getenv("ROLLBOOK_HELPER_IMAGE"), Namespace: helperNS, Timeout: time.Minute,
		PriorityClass: deploy.HelperPriorityClass}
	helper := func(task string) *corev1.Pod {
		return tt.HelperSpecFor(h, task, "kwok-node-0", "k", []string{"kubectl-tt", "node-agent", task, "--version", "1.2.3"}).Pod()
	}
	create := func(ns string, p *corev1.Pod) error {
		_, err := as.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for _, task := range []string{"probe", "kmd", "smi", "flash", "clean-cache"} {
		got, err := as.CoreV1().Pods(helperNS).Create(ctx, helper(task), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Errorf("the %s helper as kubectl tt renders it was refused: %v", task, err)
			continue
		}
		// The API server resolved its PriorityClass, and it asks for what it uses.
		res := got.Spec.Containers[0].Resources
		if got.Spec.Priority == nil || *got.Spec.Priority != 1000000000 || res.Requests.Memory().IsZero() || res.Limits.Memory().IsZero() {
			t.Errorf("the %s helper: priority %v, requests %v, limits %v", task, got.Spec.Priority, res.Requests, res.Limits)
		}
	}
	// The proxy environment (kubectl-tt's own) reaches the helpers that go
	// to the network: literal env, admitted.
	proxied := h
	proxied.Proxy = map[string]string{"HTTPS_PROXY": "http://proxy.example:3128", "no_proxy": "10.0.0.0/8,.svc"}
	for _, task := range []string{"probe", "kmd", "flash"} {
		p := tt.HelperSpecFor(proxied, task, "kwok-node-0", "k", []string{"kubectl-tt", "node-agent", task, "--version", "1.2.3"}).Pod()
		if err := create(helperNS, p); err != nil {
			t.Errorf("the %s helper with the proxy environment was refused: %v", task, err)
		}
	}
	// A presigned URL reaches the flash helper from its Secret: admitted.
	presigned := helper("flash")
	presigned.Spec.Containers[0].Env = append(presigned.Spec.Containers[0].Env, secretEnv(tt.BundleSecretName, tt.BundleSecretKey))
	if err := create(helperNS, presigned); err != nil {
		t.Errorf("the flash helper reading the bundle URL's Secret was refused: %v", err)
	}
	// The kmd helper with a shared module (build once per kernel) is
	// admitted: a second volume, ConfigMap tt-kmd-<16 hex>, read-only.
	withModule := func(task, cm string, readOnly bool) *corev1.Pod {
		s := tt.HelperSpecFor(h, task, "kwok-node-0", "k", []string{"kubectl-tt", "node-agent", task, "--version", "1.2.3"})
		s.ConfigMaps = []kube.ConfigMapMount{{Name: "module", ConfigMap: cm, MountPath: tt.SharedModuleMount}}
		p := s.Pod()
		p.Spec.Containers[0].VolumeMounts[1].ReadOnly = readOnly
		return p
	}
	if err := create(helperNS, withModule("kmd", tt.SharedModuleName("6.1.0-28-amd64", "2.8.1", ""), true)); err != nil {
		t.Errorf("the kmd helper with a shared module, as kubectl tt renders it, was refused: %v", err)
	}
	// With --signing-secret: the named Secret's two keys, read-only at
	// /rollbook/signing, alone or next to a shared module.
	withSigning := func(task, secret string, module bool, edit func(*corev1.Pod)) *corev1.Pod {
		s := tt.HelperSpecFor(h, task, "kwok-node-0", "k", []string{"kubectl-tt", "node-agent", task, "--version", "1.2.3"})
		if module {
			s.ConfigMaps = []kube.ConfigMapMount{{Name: "module", ConfigMap: tt.SharedModuleName("6.1.0-28-amd64", "2.8.1", ""),
				MountPath: tt.SharedModuleMount}}
		}
		s.Secrets = []kube.SecretMount{tt.SigningSecretMount(secret)}
		p := s.Pod()
		if edit != nil {
			edit(p)
		}
		return p
	}
	for _, module := range []bool{false, true} {
		if err := create(helperNS, withSigning("kmd", tt.DefaultSigningSecret, module, nil)); err != nil {
			t.Errorf("the kmd helper with the signing Secret (shared module %v), as kubectl tt renders it, was refused: %v", module, err)
		}
	}
	lastMount := func(p *corev1.Pod) *corev1.VolumeMount {
		m := p.Spec.Containers[0].VolumeMounts
		return &m[len(m)-1]
	}
	yes := true
	cases := []struct {
		name string
		pod  func() *corev1.Pod
	}{
		{"a bare privileged pod", func() *corev1.Pod { return privilegedPod("bare") }},
		{"another image", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Containers[0].Image = "ghcr.io/someone/node-agent:latest"
			return p
		}},
		{"another command", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Containers[0].Command = []string{"sh", "-c", "cat /host/etc/kubernetes/admin.conf"}
			return p
		}},
		{"an unknown node-agent task", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Containers[0].Command = []string{"kubectl-tt", "node-agent", "shell"}
			return p
		}},
		{"args after the command", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Containers[0].Args = []string{"--host-root", "/"}
			return p
		}},
		{"another Secret in the env", func() *corev1.Pod {
			p := helper("flash")
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, secretEnv("other", tt.BundleSecretKey))
			return p
		}},
		{"another key of the bundle Secret", func() *corev1.Pod {
			p := helper("flash")
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, secretEnv(tt.BundleSecretName, "token"))
			return p
		}},
		{"the bundle Secret in a kmd helper", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, secretEnv(tt.BundleSecretName, tt.BundleSecretKey))
			return p
		}},
		{"envFrom a Secret", func() *corev1.Pod {
			p := helper("flash")
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: tt.BundleSecretName}}}}
			return p
		}},
		{"a ConfigMap in the env", func() *corev1.Pod {
			p := helper("flash")
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "rollbook-helper-policy"},
					Key: "images"}}})
			return p
		}},
		{"a ServiceAccount token", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.AutomountServiceAccountToken = &yes
			return p
		}},
		{"a second host mount", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "pki", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/etc/kubernetes/pki"}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "pki", MountPath: "/pki"})
			return p
		}},
		{"another host path", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Volumes[0].HostPath.Path = "/etc"
			return p
		}},
		{"a privileged probe", func() *corev1.Pod {
			p := helper("probe")
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
			return p
		}},
		{"a probe writing the host", func() *corev1.Pod {
			p := helper("probe")
			p.Spec.Containers[0].VolumeMounts[0].ReadOnly = false
			return p
		}},
		{"a probe with SYS_ADMIN", func() *corev1.Pod {
			p := helper("probe")
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = append(p.Spec.Containers[0].SecurityContext.Capabilities.Add, "SYS_ADMIN")
			return p
		}},
		{"host network", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.HostNetwork = true
			return p
		}},
		{"host PID for smi", func() *corev1.Pod {
			p := helper("smi")
			p.Spec.HostPID = true
			return p
		}},
		{"a second container", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.Containers = append(p.Spec.Containers, privilegedPod("x").Spec.Containers[0])
			return p
		}},
		{"an init container", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.InitContainers = privilegedPod("x").Spec.Containers
			return p
		}},
		{"a task label that is not its command's", func() *corev1.Pod {
			p := helper("kmd")
			p.Labels["rollbook.dev/helper"] = "probe"
			return p
		}},
		{"no node", func() *corev1.Pod {
			p := helper("kmd")
			p.Spec.NodeName = ""
			return p
		}},
		{"a shared module on a flash helper", func() *corev1.Pod {
			return withModule("flash", tt.SharedModuleName("6.1.0-28-amd64", "2.8.1", ""), true)
		}},
		{"another ConfigMap as the module", func() *corev1.Pod { return withModule("kmd", "rollbook-helper-policy", true) }},
		{"a writable module mount", func() *corev1.Pod {
			return withModule("kmd", tt.SharedModuleName("6.1.0-28-amd64", "2.8.1", ""), false)
		}},
		{"another Secret as the signing key", func() *corev1.Pod { return withSigning("kmd", "some-other-secret", true, nil) }},
		{"the signing Secret on a flash helper", func() *corev1.Pod { return withSigning("flash", tt.DefaultSigningSecret, false, nil) }},
		{"the signing Secret on a probe", func() *corev1.Pod { return withSigning("probe", tt.DefaultSigningSecret, false, nil) }},
		{"a writable signing mount", func() *corev1.Pod {
			return withSigning("kmd", tt.DefaultSigningSecret, false, func(p *corev1.Pod) { lastMount(p).ReadOnly = false })
		}},
		{"the signing Secret elsewhere", func() *corev1.Pod {
			return withSigning("kmd", tt.DefaultSigningSecret, false, func(p *corev1.Pod) { lastMount(p).MountPath = "/etc" })
		}},
		{"every key of the signing Secret", func() *corev1.Pod {
			return withSigning("kmd", tt.DefaultSigningSecret, false, func(p *corev1.Pod) {
				p.Spec.Volumes[len(p.Spec.Volumes)-1].Secret.Items = nil
			})
		}},
		{"another key of the signing Secret", func() *corev1.Pod {
			return withSigning("kmd", tt.DefaultSigningSecret, false, func(p *corev1.Pod) {
				p.Spec.Volumes[len(p.Spec.Volumes)-1].Secret.Items[1].Key = "token"
			})
		}},
		{"control-plane nodes allowed", func() *corev1.Pod {
			p := helper("flash")
			p.Spec.Affinity = nil
			return p
		}},
	}
	for _, tc := range cases {
		err := create(helperNS, tc.pod())
		if err == nil || !strings.Contains(err.Error(), "rollbook-helpers") {
			t.Errorf("%s in %s: want refused by the rollbook-helpers policy, got %v", tc.name, helperNS, err)
			continue
		}
		t.Logf("%s: refused: %v", tc.name, err)
	}
	// The policy binds everyone there, cluster admins too.
	if _, err := c.Client.CoreV1().Pods(helperNS).Create(ctx, privilegedPod("admin"),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "rollbook-helpers") {
		t.Errorf("a cluster admin's bare privileged pod in %s: want refused by the policy, got %v", helperNS, err)
	}
	// Anywhere else, the operator creates no pod at all, not even a helper.
	for _, ns := range []string{"kube-system", "default", "tt-system"} {
		p := helper("kmd")
		p.Namespace = ns
		if err := create(ns, p); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot create resource") {
			t.Errorf("operator creating a pod in %s: want Forbidden by RBAC, got %v", ns, err)
		}
	}
}

func secretEnv(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: tt.EnvBundleURL, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
}
