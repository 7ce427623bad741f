package install

import (
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/pkg/admission"
	"github.com/rollbook/rollbook/pkg/ate/pullpod"
)

// OperatorPodsPolicyName is the policy that admits, from the operator
// roles, outside the helper namespace, only kubectl ate's pull probe.
const OperatorPodsPolicyName = "rollbook-operator-pods"

// maxPullImages bounds a pull probe's containers: a clone's images.
const maxPullImages = 16

// pullProbeRules: the pod is pkg/ate/pullpod's, whole; what varies is the
// node, the names, the images a clone pulls and how, and the pool's pull
// Secrets and ServiceAccount. The images are the operator's choice (a clone's worker image
// is): the probe runs none of them, unprivileged and without a token.
func pullProbeRules() ([]admission.Rule, error) {
	const img = "placeholder.example/image"
	spec := pullpod.Spec{Name: "n", Namespace: "ns", Node: "node-0", SetKey: "k", Pool: "p", Images: []string{img},
		Policy: map[string]corev1.PullPolicy{img: corev1.PullIfNotPresent}, Timeout: 5 * time.Minute}
	pod := spec.Pod()
	container, err := admission.Shape{Object: pod.Spec.Containers[0], Defaults: containerDefaults, Holes: map[string]admission.Hole{
		"name":  func(at string) []admission.Rule { return rules(at+".matches('^pull-[0-9]{1,2}$')", "") },
		"image": func(at string) []admission.Rule { return rules("size("+at+") > 0", "") },
		"imagePullPolicy": func(at string) []admission.Rule {
			return rules(at+" in ['Always', 'IfNotPresent', 'Never']", "")
		},
	}}.Condition("c")
	if err != nil {
		return nil, err
	}
	s := admission.Shape{Object: pod, Defaults: podDefaults, Ignore: serverOwned, Holes: map[string]admission.Hole{
		"metadata.name": func(at string) []admission.Rule {
			return rules(at+".matches('^"+pullpod.NamePrefix+"[0-9a-f]{16}-[0-9a-f]{8}$')", "the name is kube ate's pull probe's")
		},
		"metadata.labels": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("has(%s) && size(%s) == 2 && %s in %s && %s['app.kubernetes.io/managed-by'] == %s", at, at,
				admission.Quote(pullpod.Label), at, at, admission.Quote(pullpod.ManagedBy)),
				"the labels are exactly "+pullpod.Label+" and app.kubernetes.io/managed-by="+pullpod.ManagedBy)
		},
		"metadata.annotations": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("has(%s) && size(%s) == 1 && %s in %s", at, at, admission.Quote(pullpod.AnnPool), at),
				"the annotations are exactly "+pullpod.AnnPool)
		},
		"spec.nodeName": func(at string) []admission.Rule {
			return rules("has("+at+") && size("+at+") > 0", "a pull probe is pinned to its node")
		},
		"spec.activeDeadlineSeconds": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("has(%s) && %s >= 1 && %s <= %d", at, at, at, int64(MaxHelperDeadline.Seconds())),
				"activeDeadlineSeconds is between 1 and a day")
		},
		"spec.imagePullSecrets": func(at string) []admission.Rule {
			return rules("true", "") // the pool's own pull credentials, by name: they only let the kubelet pull
		},
		// The pool's ServiceAccount, for its pull Secrets only: its token is
		// not mounted (automountServiceAccountToken false is pinned).
		"spec.serviceAccountName": func(at string) []admission.Rule {
			return rules("has("+at+") && size("+at+") > 0", "spec.serviceAccountName is the pool's ServiceAccount")
		},
		"spec.serviceAccount": func(at string) []admission.Rule {
			return rules("!has("+at+") || "+at+" == object.spec.serviceAccountName", "spec.serviceAccount is spec.serviceAccountName")
		},
		"spec.containers": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("has(%s) && size(%s) >= 1 && size(%s) <= %d && %s.all(c, %s)", at, at, at, maxPullImages, at,
				container), "each container pulls one image and runs "+pullpod.Command+", unprivileged, read-only, no capability")
		},
	}}
	return s.Rules("object")
}

// containerDefaults are what the API server fills in on a container.
var containerDefaults = map[string]any{
	"terminationMessagePath":   corev1.TerminationMessagePathDefault,
	"terminationMessagePolicy": string(corev1.TerminationMessageReadFile),
}

// OperatorPodsPolicy admits, from whoever holds the operator mark, in any
// namespace but the helper namespace, only kubectl ate's pull probe.
func OperatorPodsPolicy(helperNS string) (*admissionv1.ValidatingAdmissionPolicy, error) {
	rs, err := pullProbeRules()
	if err != nil {
		return nil, err
	}
	match := append(operatorOnly(), admissionv1.MatchCondition{Name: "outside-the-helper-namespace",
		Expression: "request.namespace != " + admission.Quote(helperNS)})
	return policy(OperatorPodsPolicyName, match, []admissionv1.NamedRuleWithOperations{
		rule("", "pods", admissionv1.Create, admissionv1.Update),
		rule("", "pods/ephemeralcontainers", admissionv1.Update),
	}, nil, rs), nil
}

// OperatorPodsPolicyBinding applies the pods policy everywhere.
func OperatorPodsPolicyBinding(ns string) *admissionv1.ValidatingAdmissionPolicyBinding {
	return binding(OperatorPodsPolicyName, ns, nil)
}
