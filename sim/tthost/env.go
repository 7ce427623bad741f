package tthost

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Environment variables the node agent reads (pkg/nodeagent/agentcmd) and
// the fake tools need (fakehost.RootEnv).
const (
	envHostRoot       = "ROLLBOOK_HOST_ROOT"
	envTerminationLog = "ROLLBOOK_TERMINATION_LOG"
	envSMISource      = "ROLLBOOK_TT_SMI_SOURCE"
	envNodeName       = "NODE_NAME"
	envFakeRoot       = "FAKEHOST_ROOT"
)

// helperEnv is a helper container's environment: the pod's own env vars
// (literal values, and the downward-API fields a helper uses), then the
// runner's, which win, so a pod can never point the fake tools or the
// agent outside the node's host root. Nothing of the sim's own
// environment leaks in.
func helperEnv(pod *corev1.Pod, c corev1.Container, h *Hosts, root, termLog, workDir string, secrets map[string]string) []string {
	var env []string
	for _, e := range c.Env {
		if v, ok := envValue(pod, e, secrets); ok {
			env = append(env, e.Name+"="+v)
		}
	}
	return append(env,
		"PATH="+h.ToolsDir,
		"HOME="+workDir,
		"TMPDIR="+workDir,
		envFakeRoot+"="+root,
		envHostRoot+"="+root,
		envTerminationLog+"="+termLog,
		envSMISource+"="+h.SMISource,
		envNodeName+"="+pod.Spec.NodeName,
	)
}

func envValue(pod *corev1.Pod, e corev1.EnvVar, secrets map[string]string) (string, bool) {
	if e.ValueFrom == nil {
		return e.Value, true
	}
	if r := e.ValueFrom.SecretKeyRef; r != nil {
		v, ok := secrets[r.Name+"/"+r.Key]
		return v, ok
	}
	if f := e.ValueFrom.FieldRef; f != nil {
		switch f.FieldPath {
		case "spec.nodeName":
			return pod.Spec.NodeName, true
		case "metadata.name":
			return pod.Name, true
		case "metadata.namespace":
			return pod.Namespace, true
		case "metadata.uid":
			return string(pod.UID), true
		case "status.hostIP", "status.podIP":
			return hostIP, true
		}
	}
	return "", false
}

// secretEnv reads the Secret keys the pod's env refers to (secretKeyRef),
// as the kubelet does before it starts a container: "name/key" → value.
// A missing Secret or key that is not optional keeps the pod Pending
// (why says which, as a kubelet's CreateContainerConfigError does).
func secretEnv(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (vals map[string]string, why string) {
	vals = map[string]string{}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			r := e.ValueFrom.SecretKeyRef
			s, err := cs.CoreV1().Secrets(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				if r.Optional != nil && *r.Optional {
					continue
				}
				return nil, fmt.Sprintf("CreateContainerConfigError: secret %q: %v", r.Name, err)
			}
			v, ok := s.Data[r.Key]
			if !ok {
				if r.Optional != nil && *r.Optional {
					continue
				}
				return nil, fmt.Sprintf("CreateContainerConfigError: couldn't find key %s in Secret %s/%s", r.Key, pod.Namespace, r.Name)
			}
			vals[r.Name+"/"+r.Key] = string(v)
		}
	}
	return vals, ""
}
