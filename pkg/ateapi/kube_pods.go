package ateapi

import (
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ChoosePod picks the pod to forward to: Running, Ready=True, not being
// deleted; the newest such pod wins (during an API-server roll it is the one
// that stays), ties broken by name for determinism.
func ChoosePod(pods []corev1.Pod) (*corev1.Pod, error) {
	var ok []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			ok = append(ok, p)
		}
	}
	if len(ok) == 0 {
		return nil, fmt.Errorf("none of its %d pods is Running and Ready", len(pods))
	}
	sort.Slice(ok, func(i, j int) bool {
		ti, tj := ok[i].CreationTimestamp, ok[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return ok[i].Name < ok[j].Name
	})
	return ok[0], nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// APIServicePort picks the Service port to reach: the only one, else the
// one named "grpc", else 443.
func APIServicePort(svc *corev1.Service) (corev1.ServicePort, error) {
	ports := svc.Spec.Ports
	if len(ports) == 1 {
		return ports[0], nil
	}
	for _, want := range []func(corev1.ServicePort) bool{
		func(p corev1.ServicePort) bool { return p.Name == "grpc" },
		func(p corev1.ServicePort) bool { return p.Port == 443 },
	} {
		for _, p := range ports {
			if want(p) {
				return p, nil
			}
		}
	}
	return corev1.ServicePort{}, fmt.Errorf("ateapi: service %s/%s has no port named grpc or numbered 443", svc.Namespace, svc.Name)
}

// ResolveTargetPort maps a Service port to the pod's container port: a
// numeric targetPort as is, unset as the service port, a named one through
// the pod's container ports.
func ResolveTargetPort(sp corev1.ServicePort, pod *corev1.Pod) (int32, error) {
	tp := sp.TargetPort
	switch {
	case tp.Type == intstr.Int && tp.IntVal != 0:
		return tp.IntVal, nil
	case tp.Type == intstr.Int:
		return sp.Port, nil
	case tp.StrVal == "":
		return 0, errors.New("ateapi: empty targetPort name")
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == tp.StrVal && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
				return p.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("ateapi: pod %s/%s has no container port named %q", pod.Namespace, pod.Name, tp.StrVal)
}
