//go:build e2e

package security

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/ate/pullpod"
	"github.com/rollbook/rollbook/pkg/install"
)

// The ate operator creates pods in WorkerPool namespaces for one reason,
// the pull probe: that pod, as kubectl ate renders it, is admitted, and
// one that differs from it in any field is refused.
func TestOperatorPodsArePullProbes(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, 10*time.Minute)
	as := setup(t, ctx, c, testParams())
	const ns = "ate-workers" // a WorkerPool namespace of deploy/rbac/ate-operator.yaml
	images := []string{"registry.example/ateom-gvisor:v0.3.0@sha256:" + strings.Repeat("0", 64), "registry.example/sidecar:1"}
	probe := func(imgs ...string) *corev1.Pod {
		policy := map[string]corev1.PullPolicy{}
		for _, i := range imgs {
			policy[i] = corev1.PullIfNotPresent
		}
		return pullpod.Spec{Name: pullpod.NamePrefix + strings.Repeat("a", 16) + "-0123abcd", Namespace: ns, Node: "kwok-node-0",
			SetKey: strings.Repeat("a", 16), Pool: ns + "/counter", Images: imgs, Policy: policy,
			Secrets: []corev1.LocalObjectReference{{Name: "registry"}}, Timeout: 5 * time.Minute}.Pod()
	}
	for _, p := range []*corev1.Pod{probe(images[0]), probe(images...)} {
		if o, _, err := createAs(ctx, as, ns, install.OperatorPodsPolicyName, p); o != admitted {
			t.Fatalf("the pull probe as kubectl ate renders it (%d images) was refused: %v", len(p.Spec.Containers), err)
		}
	}
	otherObjects(t, ctx, c)
	var tally mutationTally
	tally.refuseEvery(t, ctx, as, ns, install.OperatorPodsPolicyName, variant{"pull probe", probe(images[0])}, []string{
		"apiVersion", "kind", "status.*",
		"metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion", "metadata.generation",
		"metadata.creationTimestamp", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds", "metadata.managedFields",
		"metadata.managedFields.*", "metadata.selfLink", `metadata.labels["` + pullpod.Label + `"]`,
		`metadata.annotations["` + pullpod.AnnPool + `"]`, "spec.nodeName", "spec.activeDeadlineSeconds", "spec.priority",
		"spec.preemptionPolicy", "spec.imagePullSecrets.*", "spec.imagePullSecrets", "spec.containers[*].image",
		"spec.containers[*].imagePullPolicy", "spec.containers[*].name",
	})
	for name, mut := range map[string]func(p *corev1.Pod){
		"a shell":                     func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "x"} },
		"a second command":            func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"x"} },
		"another name":                func(p *corev1.Pod) { p.Name = "x" },
		"no node":                     func(p *corev1.Pod) { p.Spec.NodeName = "" },
		"a container of its own name": func(p *corev1.Pod) { p.Spec.Containers[0].Name = "x" },
		"17 images": func(p *corev1.Pod) {
			var many []string
			for i := range 17 {
				many = append(many, fmt.Sprintf("registry.example/i%d:1", i))
			}
			*p = *probe(many...)
		},
	} {
		p := probe(images[0])
		mut(p)
		tally.tried++
		if o, _, err := createAs(ctx, as, ns, install.OperatorPodsPolicyName, p); o != refusedByPolicy {
			t.Errorf("the pull probe with %s: want refused by the policy, got %v", name, err)
		}
	}
	tally.report(t)
}
