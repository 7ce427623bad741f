package substrate

import (
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// WorkerPool is the part of a WorkerPool object the controller and syncer
// read (schema: workerpool.crd.yaml).
type WorkerPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WorkerPoolSpec   `json:"spec"`
	Status            WorkerPoolStatus `json:"status,omitempty"`
}

// WorkerPoolSpec is .spec.
type WorkerPoolSpec struct {
	Replicas       int32          `json:"replicas"`
	WorkerImage    string         `json:"workerImage"`
	SandboxClasses []SandboxClass `json:"sandboxClasses,omitempty"`
	SandboxClass   string         `json:"sandboxClass,omitempty"`
	Template       PoolTemplate   `json:"template,omitempty"`
}

// SandboxClass is one entry of .spec.sandboxClasses.
type SandboxClass struct {
	Name      string     `json:"name"`
	ConfigRef *ConfigRef `json:"configRef,omitempty"`
}

// ConfigRef names a SandboxConfig.
type ConfigRef struct {
	Name string `json:"name"`
}

// PoolTemplate is .spec.template: how the worker pods are shaped.
type PoolTemplate struct {
	Labels             map[string]string             `json:"labels,omitempty"`
	Annotations        map[string]string             `json:"annotations,omitempty"`
	NodeSelector       map[string]string             `json:"nodeSelector,omitempty"`
	Tolerations        []corev1.Toleration           `json:"tolerations,omitempty"`
	NodeAffinity       *corev1.NodeAffinity          `json:"nodeAffinity,omitempty"`
	PriorityClassName  string                        `json:"priorityClassName,omitempty"`
	ServiceAccountName string                        `json:"serviceAccountName,omitempty"`
	ImagePullSecrets   []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	Resources          corev1.ResourceRequirements   `json:"resources,omitempty"`
}

// WorkerPoolStatus is .status; readyReplicas is absent when 0, as upstream.
type WorkerPoolStatus struct {
	Replicas      int32  `json:"replicas"`
	ReadyReplicas int32  `json:"readyReplicas,omitempty"`
	Selector      string `json:"selector,omitempty"`
}

// PoolFromUnstructured decodes a WorkerPool read through the dynamic client.
func PoolFromUnstructured(u *unstructured.Unstructured) (*WorkerPool, error) {
	p := &WorkerPool{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, fmt.Errorf("workerpool %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return p, nil
}

// ToUnstructured encodes a WorkerPool for the dynamic client.
func (p *WorkerPool) ToUnstructured() (*unstructured.Unstructured, error) {
	c := *p // the converter copies; only TypeMeta differs
	c.APIVersion, c.Kind = "ate.dev/v1alpha1", "WorkerPool"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// SandboxClassName is the pool's class: sandboxClasses[0], else the older
// sandboxClass, else gvisor (the older field's default).
func (p *WorkerPool) SandboxClassName() string {
	switch {
	case len(p.Spec.SandboxClasses) > 0:
		return p.Spec.SandboxClasses[0].Name
	case p.Spec.SandboxClass != "":
		return p.Spec.SandboxClass
	}
	return "gvisor"
}

// PoolSelector is the label selector of a pool's pods, also written to
// .status.selector for the scale subresource.
func PoolSelector(pool string) string { return PoolLabel + "=" + pool }

// workerGracePeriod is the worker pods' terminationGracePeriodSeconds,
// hardcoded upstream since #756.
const workerGracePeriod = 3600

// RenderDeployment renders a pool as the real controller does (§5.2): named
// after the pool, owned by it, labels = template.labels + the pool label,
// one "ateom" container with the worker image and the template's resources,
// the template's nodeSelector (the version pin), tolerations and affinity.
func RenderDeployment(p *WorkerPool) *appsv1.Deployment {
	labels := maps.Clone(p.Spec.Template.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[PoolLabel] = p.Name
	var affinity *corev1.Affinity
	if p.Spec.Template.NodeAffinity != nil {
		affinity = &corev1.Affinity{NodeAffinity: p.Spec.Template.NodeAffinity.DeepCopy()}
	}
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "ate.dev/v1alpha1", Kind: "WorkerPool", Name: p.Name, UID: p.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(p.Spec.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{PoolLabel: p.Name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: maps.Clone(p.Spec.Template.Annotations)},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "ateom",
						Image: p.Spec.WorkerImage,
						Args: []string{"--pod-uid=$(POD_UID)", "--sandbox-class=" + p.SandboxClassName(),
							"--https-listen=:443", "--connect-listen=:8443", "--egress-listen=0.0.0.0:15001"},
						Env: []corev1.EnvVar{{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}},
						Ports:     []corev1.ContainerPort{{Name: "readyz", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
						Resources: *p.Spec.Template.Resources.DeepCopy(),
					}},
					NodeSelector:                  maps.Clone(p.Spec.Template.NodeSelector),
					Tolerations:                   p.Spec.Template.Tolerations,
					Affinity:                      affinity,
					PriorityClassName:             p.Spec.Template.PriorityClassName,
					ServiceAccountName:            p.Spec.Template.ServiceAccountName,
					ImagePullSecrets:              p.Spec.Template.ImagePullSecrets,
					TerminationGracePeriodSeconds: ptr.To[int64](workerGracePeriod),
				},
			},
		},
	}
}

// PoolStatusFrom mirrors a Deployment's status into the pool's.
func PoolStatusFrom(pool string, d *appsv1.Deployment) WorkerPoolStatus {
	return WorkerPoolStatus{Replicas: d.Status.Replicas, ReadyReplicas: d.Status.ReadyReplicas, Selector: PoolSelector(pool)}
}
