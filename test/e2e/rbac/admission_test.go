//go:build e2e

package rbac

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/admissiontest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/tt"
)

const helperNS = deploy.HelperNamespace

// applyAdmission applies the admission objects a cluster admin applies
// (the helper policy, the operator's node writes and objects), with the
// sim's image and bundles allowed; every helper of the rolls that follow
// passes them. test/e2e/security mutates every field against them.
func applyAdmission(t *testing.T, ctx context.Context, c *simtest.Cluster) {
	t.Helper()
	p := tt.DefaultAdminParams()
	p.Images = []string{os.Getenv("ROLLBOOK_HELPER_IMAGE")}
	p.BundleURLs = append(p.BundleURLs, "file://"+filepath.Join(c.Dir, "bundles")+"/")
	// The sim's tt-kmd tags resolve at the fake repository, and its bundles
	// carry no published checksum: these rolls run unpinned, as the admin
	// allows here.
	p.AllowUnpinned = true
	admissiontest.Apply(t, ctx, c.RESTConfig, helperNS, p)
}

func privilegedPod(name string) *corev1.Pod {
	yes := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: "kwok-node-0", Containers: []corev1.Container{{Name: "sh", Image: "busybox",
			Command: []string{"sh", "-c", "chroot /host"}, SecurityContext: &corev1.SecurityContext{Privileged: &yes},
			VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}}}
}

// proveHelperPolicy: the policy binds cluster admins in the helper
// namespace too, and the operator creates no pod anywhere else.
func proveHelperPolicy(t *testing.T, ctx context.Context, c *simtest.Cluster) {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: operator}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(helperNS).Create(ctx, privilegedPod("admin"),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "rollbook-helpers") {
		t.Errorf("a cluster admin's bare privileged pod in %s: want refused by the policy, got %v", helperNS, err)
	}
	h := tt.HelperConfig{Image: os.Getenv("ROLLBOOK_HELPER_IMAGE"), Namespace: helperNS, Timeout: time.Minute,
		PriorityClass: deploy.HelperPriorityClass}
	for _, ns := range []string{"kube-system", "default", "tt-system"} {
		p := tt.SMIHelperSpec(&tt.SMIConfig{Version: "1.2.3", Helper: h}, "kwok-node-0").Pod()
		p.Namespace = ns
		_, err := as.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot create resource") {
			t.Errorf("operator creating a pod in %s: want Forbidden by RBAC, got %v", ns, err)
		}
	}
}
