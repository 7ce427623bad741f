package tthost

import (
	corev1 "k8s.io/api/core/v1"
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
func helperEnv(pod *corev1.Pod, c corev1.Container, h *Hosts, root, termLog, workDir string) []string {
	var env []string
	for _, e := range c.Env {
		if v, ok := envValue(pod, e); ok {
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

func envValue(pod *corev1.Pod, e corev1.EnvVar) (string, bool) {
	if e.ValueFrom == nil {
		return e.Value, true
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
