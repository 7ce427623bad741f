package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KubeletVersion is what the fake nodes report in status.nodeInfo.
const KubeletVersion = "v1.37.2"

// CreateNodes registers count fake nodes named <prefix><start…> for kwok to
// manage, parallel at a time, with extra labels and annotations. Existing
// nodes are left alone.
func CreateNodes(ctx context.Context, cs kubernetes.Interface, prefix string, start, count, parallel int,
	labels, annotations map[string]string) error {
	if parallel < 1 {
		parallel = 1
	}
	sem := make(chan struct{}, parallel)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := start; i < start+count; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n := NewNode(name)
			for k, v := range labels {
				n.Labels[k] = v
			}
			if len(annotations) > 0 && n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			for k, v := range annotations {
				n.Annotations[k] = v
			}
			_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// NewNode is a fake node as kwok expects it. Its InternalIP is loopback on
// purpose: the apiserver dials InternalIP:kubeletPort for logs, exec and
// port-forward, and that is where kwok's kubelet-API server listens.
func NewNode(name string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
			Annotations: map[string]string{
				"kwok.x-k8s.io/node":           "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Status: corev1.NodeStatus{
			Allocatable: res,
			Capacity:    res,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: name},
			},
			// kwok keeps nodeInfo as created, so a test can patch it to
			// simulate upgraded node software.
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          KubeletVersion,
				KubeProxyVersion:        KubeletVersion,
				OSImage:                 "Debian GNU/Linux 12 (bookworm)",
				KernelVersion:           "6.1.0-28-amd64",
				ContainerRuntimeVersion: "containerd://2.1.0",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
		},
	}
}
