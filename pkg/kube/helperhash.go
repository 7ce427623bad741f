package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// helperShape is what a helper pod does and may touch, read the same way
// from the pod the CLI renders and from the pod the API server returns
// (server-side defaults such as dnsPolicy, a fieldRef's apiVersion or the
// ServiceAccount name are left out, so they never make a match fail).
type helperShape struct {
	Task, Key, Node      string
	HostPID, HostNet     bool
	HostIPC              bool
	Automount            string
	Priority             string
	RestartPolicy        string
	Deadline             int64
	Affinity             *corev1.Affinity `json:",omitempty"`
	Volumes              []volumeShape
	Containers           []containerShape
	Init, Ephemeral      int
	SecurityContextGiven bool
}

type volumeShape struct {
	Name, HostPath string
	ConfigMap      string `json:",omitempty"`
	Secret         string `json:",omitempty"`
	Other          bool   // any source but hostPath
}

type containerShape struct {
	Name, Image     string
	Command, Args   []string
	Env             []string
	Mounts          []string
	Privileged      bool
	Escalation      string
	CapAdd, CapDrop []string
	Resources       map[string]string
	Devices         int
}

func boolOf(b *bool) string {
	if b == nil {
		return "unset"
	}
	if *b {
		return "true"
	}
	return "false"
}

func shapeOf(p *corev1.Pod) helperShape {
	s := helperShape{
		Task: p.Labels[LabelHelper], Key: p.Annotations[AnnHelperKey], Node: p.Spec.NodeName,
		HostPID: p.Spec.HostPID, HostNet: p.Spec.HostNetwork, HostIPC: p.Spec.HostIPC,
		Automount: boolOf(p.Spec.AutomountServiceAccountToken), Priority: p.Spec.PriorityClassName,
		RestartPolicy: string(p.Spec.RestartPolicy), Affinity: p.Spec.Affinity,
		Init: len(p.Spec.InitContainers), Ephemeral: len(p.Spec.EphemeralContainers),
		SecurityContextGiven: p.Spec.SecurityContext != nil && (p.Spec.SecurityContext.RunAsUser != nil ||
			p.Spec.SecurityContext.SELinuxOptions != nil || len(p.Spec.SecurityContext.Sysctls) > 0),
	}
	if d := p.Spec.ActiveDeadlineSeconds; d != nil {
		s.Deadline = *d
	}
	for _, v := range p.Spec.Volumes {
		vs := volumeShape{Name: v.Name}
		if v.HostPath != nil {
			vs.HostPath = v.HostPath.Path
		} else {
			if v.ConfigMap != nil {
				vs.ConfigMap = v.ConfigMap.Name
			}
			if v.Secret != nil {
				vs.Secret = v.Secret.SecretName
			}
			vs.Other = true
		}
		s.Volumes = append(s.Volumes, vs)
	}
	for _, c := range p.Spec.Containers {
		cs := containerShape{Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args, Devices: len(c.VolumeDevices),
			Resources: map[string]string{}, Escalation: "unset"}
		for _, e := range c.Env {
			v := "=" + e.Value
			if e.ValueFrom != nil {
				v = "<other>"
				if f := e.ValueFrom.FieldRef; f != nil {
					v = "<field " + f.FieldPath + ">"
				}
			}
			cs.Env = append(cs.Env, e.Name+v)
		}
		for _, m := range c.VolumeMounts {
			mp := "None"
			if m.MountPropagation != nil {
				mp = string(*m.MountPropagation)
			}
			cs.Mounts = append(cs.Mounts, m.Name+":"+m.MountPath+":"+boolOf(&m.ReadOnly)+":"+m.SubPath+m.SubPathExpr+":"+mp)
		}
		if sc := c.SecurityContext; sc != nil {
			cs.Privileged = sc.Privileged != nil && *sc.Privileged
			cs.Escalation = boolOf(sc.AllowPrivilegeEscalation)
			if sc.Capabilities != nil {
				for _, a := range sc.Capabilities.Add {
					cs.CapAdd = append(cs.CapAdd, string(a))
				}
				for _, d := range sc.Capabilities.Drop {
					cs.CapDrop = append(cs.CapDrop, string(d))
				}
			}
		}
		for n, q := range c.Resources.Requests {
			cs.Resources["requests."+string(n)] = q.String()
		}
		for n, q := range c.Resources.Limits {
			cs.Resources["limits."+string(n)] = q.String()
		}
		sort.Strings(cs.CapAdd)
		sort.Strings(cs.CapDrop)
		s.Containers = append(s.Containers, cs)
	}
	return s
}

// SpecHash hashes what a helper pod runs and may touch: image, command,
// env, mounts, privileges, host namespaces, node, affinity, resources.
// The run ID is not part of it, so a re-run adopts an earlier run's
// helper of the same spec.
func SpecHash(p *corev1.Pod) string {
	raw, _ := json.Marshal(shapeOf(p))
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:20]
}

// HelperMatches reports whether p is the helper s renders: its live spec
// hashes to what s would create, and it says so in its annotation. Only
// such a pod is adopted, and only its termination message is trusted.
func HelperMatches(p *corev1.Pod, s HelperSpec) bool {
	want := s.Pod().Annotations[AnnSpecHash]
	return p != nil && p.Annotations[AnnSpecHash] == want && SpecHash(p) == want
}
