// Package pullpod renders the pod kubectl ate runs before the first node
// of a platform moves: it pulls a clone's images on a node and runs none of
// them. It is a leaf (no client, no substrate API), so the admission policy
// that admits exactly this pod from the operator role is rendered from it
// by kubectl-tt too (pkg/install).
package pullpod

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Label marks the probe pods (value: the image set's key); AnnPool names
// the pool they pull for.
const (
	Label   = "rollbook.dev/ate-pull-probe"
	AnnPool = "rollbook.dev/ate-pull-probe-of"
	// ManagedBy is the app.kubernetes.io/managed-by value of a probe pod.
	ManagedBy = "rollbook"
)

// Command is no file of any image: the container fails to start right
// after its image is pulled, which is all the probe needs.
const Command = "/rollbook-pull-probe-runs-nothing"

// NamePrefix begins every probe pod's name.
const NamePrefix = "rollbook-pull-"

// Spec is one probe: the images of one pool's set on one node.
type Spec struct {
	Name, Namespace, Node string
	SetKey, Pool          string
	Images                []string
	// Policy is each image's pull policy, as the pool's pods pull it.
	Policy  map[string]corev1.PullPolicy
	Secrets []corev1.LocalObjectReference
	// ServiceAccount is the pool's pods' (its token is not mounted): its
	// pull Secrets are the pods' when they name none.
	ServiceAccount string
	Timeout        time.Duration
}

// Pod pulls the set's images on the node and runs none of them: no token,
// no privilege, nothing it could start (restricted Pod Security).
func (s Spec) Pod() *corev1.Pod {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace,
			Labels:      map[string]string{Label: s.SetKey, "app.kubernetes.io/managed-by": ManagedBy},
			Annotations: map[string]string{AnnPool: s.Pool}},
		Spec: corev1.PodSpec{
			NodeName: s.Node, RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false), EnableServiceLinks: ptr.To(false),
			ServiceAccountName:            s.ServiceAccount,
			ImagePullSecrets:              s.Secrets,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			ActiveDeadlineSeconds:         ptr.To(int64((s.Timeout + time.Minute).Seconds())),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		},
	}
	for i, img := range s.Images {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("pull-%d", i), Image: img, ImagePullPolicy: s.Policy[img],
			Command:   []string{Command},
			Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		})
	}
	return pod
}
