package substrate

import (
	"context"
	"net"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	kwokv1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// apiObjects are what a real install has in ate-system for the API server
// (namespace, ate-client SA, Deployment ate-api-server and Service api), plus the
// test-only kwok ClusterPortForward that sends container port 8443 of every
// ate-system pod to the fake server at addr (host:port).
func apiObjects(addr string, era fakesubstrate.Era) ([]applyItem, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"app": "api", "app.kubernetes.io/name": "ate-api-server"}
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: ClientSA, Namespace: Namespace}}
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: APIDeployment, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{EraAnnotation: string(era)}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "ate-api-server",
					Image: "ghcr.io/agent-substrate/substrate/ateapi:sim-era-" + string(era),
					Args:  []string{"--grpc-listen-addr=0.0.0.0:" + strconv.Itoa(APIContainerPort)},
					Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: APIContainerPort, Protocol: corev1.ProtocolTCP}},
				}}},
			},
		},
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "api"},
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 443, TargetPort: intstr.FromString("grpc"),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	// Selected by namespace (P2: kwok has no label selector here); the
	// ports are container ports, after the Service's 443 → grpc (P1).
	cpf := &kwokv1.ClusterPortForward{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kwok.x-k8s.io/v1alpha1", Kind: "ClusterPortForward"},
		ObjectMeta: metav1.ObjectMeta{Name: "ate-system-api"},
		Spec: kwokv1.ClusterPortForwardSpec{
			Selector: &kwokv1.ObjectSelector{MatchNamespaces: []string{Namespace}},
			Forwards: []kwokv1.Forward{{Ports: []int32{APIContainerPort},
				Target: &kwokv1.ForwardTarget{Address: host, Port: int32(port)}}},
		},
	}
	// The forward exists before the pod, so no dial can miss it (P6).
	return []applyItem{
		{gvrNamespace, ns}, {gvrServiceAccount, sa}, {gvrClusterPortForward, cpf},
		{gvrService, svc}, {gvrDeployment, dep},
	}, nil
}

// installAPI applies apiObjects in order.
func installAPI(ctx context.Context, dyn dynamic.Interface, addr string, era fakesubstrate.Era) error {
	items, err := apiObjects(addr, era)
	if err != nil {
		return err
	}
	for _, it := range items {
		if _, err := apply(ctx, dyn, it.gvr, it.obj, fieldManager); err != nil {
			return err
		}
	}
	return nil
}
