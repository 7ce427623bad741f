//go:build e2e

// Package privatepull rolls to a clone whose worker image the registry
// serves only with a pull Secret that the pool's pods get from their
// ServiceAccount (the ServiceAccount admission plugin adds its
// imagePullSecrets to a pod that names none). The roll's pull probe must
// pull as those pods will: with their ServiceAccount, not the namespace's
// default one, or it reports a private image as unpullable and the roll
// never starts.
package privatepull

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollbook/rollbook/internal/atetest"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/fleet"
)

const (
	ns, pool = "ate-private", "python-private" // a microvm pool
	account  = "puller"
	secret   = "regcred"
)

func TestMain(m *testing.M) {
	os.Setenv("ROLLBOOK_SIM_PRIVATE_IMAGES", atetest.ImageVM+"="+secret)
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}

func TestAPrivateImageIsPulledWithThePoolsServiceAccount(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	// The fleet's microvm pool (ate-batch) pulls with its namespace's
	// default account; the new pool, in a namespace of its own, with its
	// account only.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{ns, "ate-batch"} {
		if _, err := c.Client.CoreV1().Secrets(n).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret},
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example":{"auth":"dXNlcjpwYXNz"}}}`)}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: secret}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ServiceAccounts("ate-batch").Patch(ctx, "default", types.MergePatchType,
		[]byte(`{"imagePullSecrets":[{"name":"`+secret+`"}]}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The sim's registry: without the Secret the kubelet's pull is denied,
	// with the account's it is not.
	if why := pullOf(t, ctx, "default"); !strings.Contains(why, "pull access denied") {
		t.Fatalf("a pod of the default account: %q, want the registry's denial", why)
	}
	if why := pullOf(t, ctx, account); why != "" {
		t.Fatalf("a pod of %s: %q, want its image pulled", account, why)
	}
	// Two pools in the namespace, made like the fleet's: a gvisor one whose
	// pods run as the default account (its image is public), and a microvm
	// one whose pods run as the account. Each must be proven with its own
	// credentials, not one probe for the namespace.
	newPool(t, ctx, "ate-workers", "python-small", "python-a-public", "")
	newPool(t, ctx, "ate-batch", "python-small", pool, account)
	atetest.DeployAtelet(t, atetest.NewV)
	atetest.MustRun(t, ctx, atetest.CloneArgs...)
	atetest.MustRun(t, ctx, "roll", "next-node", "--all", "--wait", "--pull-timeout", "1m")
	atetest.AllAt(t, ctx, atetest.NewV, "after the roll")
	atetest.NoActorLost(t, ctx)
}

// pullOf runs a pod of the private image as account on a node and returns
// why its pull failed ("" once it runs).
func pullOf(t *testing.T, ctx context.Context, account string) string {
	t.Helper()
	cs := simtest.Get(t).Client
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pull-as-" + account, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "kwok-node-0", ServiceAccountName: account, AutomountServiceAccountToken: new(bool),
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "c", Image: atetest.ImageVM}}}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) }()
	why := ""
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Status.Phase == corev1.PodRunning {
			return true, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				why = w.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("pod %s neither ran nor failed its pull: %v", pod.Name, err)
	}
	return why
}

// newPool creates a pool in ns made like the fleet's from/name, of no
// worker, its pods to run as account ("" the default).
func newPool(t *testing.T, ctx context.Context, from, name, as, account string) {
	t.Helper()
	dyn := atetest.Dynamic(t).Resource(fleet.WorkerPoolGVR)
	src, err := dyn.Namespace(from).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &unstructured.Unstructured{Object: map[string]any{"apiVersion": src.GetAPIVersion(), "kind": src.GetKind(),
		"metadata": map[string]any{"name": as, "namespace": ns, "labels": src.GetLabels()}, "spec": src.Object["spec"]}}
	// No worker: the fleet's nodes have no room for more, and the probe
	// pulls what the clone's template names, pods or none.
	if err := unstructured.SetNestedField(p.Object, int64(0), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if account != "" {
		if err := unstructured.SetNestedField(p.Object, account, "spec", "template", "serviceAccountName"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dyn.Namespace(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
