package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Labels and annotations on helper pods.
const (
	// LabelHelper marks a rollbook helper pod; its value is the task. The
	// simulator's helper runner owns pods with this label, and drains skip them.
	LabelHelper = AnnotationPrefix + "helper"
	LabelNode   = AnnotationPrefix + "node"
	// LabelInCluster marks the Jobs (and their pods) of in-cluster runs.
	LabelInCluster = AnnotationPrefix + "in-cluster"
	LabelRun       = AnnotationPrefix + "run"
	// AnnHelperKey is the full, unhashed key the helper's name was made from.
	AnnHelperKey = AnnotationPrefix + "helper-key"
	// AnnSpecHash is SpecHash of the pod as the CLI created it. A pod with
	// a helper's name is adopted only when its live spec hashes to the
	// same value as the pod this run would create (HelperMatches).
	AnnSpecHash = AnnotationPrefix + "helper-spec-hash"
	// LabelControlPlane marks control-plane nodes; helpers require it absent
	// unless HelperSpec.AllowControlPlane.
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
)

// HostPathMount mounts a host directory into the helper.
type HostPathMount struct {
	Name, HostPath, MountPath string
	ReadOnly                  bool
}

// ConfigMapMount is a ConfigMap mounted read-only (a shared module).
type ConfigMapMount struct {
	Name, ConfigMap, MountPath string
}

// SecretMount is a Secret mounted read-only, only the keys listed
// (the kmd helper's signing key), files mode 0400.
type SecretMount struct {
	Name, Secret, MountPath string
	Keys                    []string
}

// NodeLabel is a label a node carries: Key=Value.
type NodeLabel struct{ Key, Value string }

func (l NodeLabel) String() string { return l.Key + "=" + l.Value }

// HelperSpec describes a short-lived pod that does one task on one node.
type HelperSpec struct {
	Task      string // e.g. "kmd"; becomes the rollbook.dev/helper label
	Node      string
	Key       string // what distinguishes runs of the task, e.g. the target version
	Namespace string
	Image     string
	Command   []string
	Env       []corev1.EnvVar
	// Deadline becomes activeDeadlineSeconds: the kubelet kills a helper
	// that outlives it, so a stuck helper can never hold a node forever.
	Deadline time.Duration
	// GracePeriod becomes terminationGracePeriodSeconds: how long a
	// helper deleted while it runs (another tool's forced drain, a node
	// shutdown) has after SIGTERM to finish the device change in flight
	// before SIGKILL (0: killed at once; the agent stops as soon as that
	// change ends, so this bounds the wait, it does not make it).
	GracePeriod time.Duration
	// Protect gives the running helper a PodDisruptionBudget
	// (ProtectHelper): other tools' evictions are refused while it runs.
	Protect    bool
	Privileged bool
	// Capabilities are what an unprivileged helper keeps; every other
	// capability is dropped and privilege escalation is off.
	Capabilities []corev1.Capability
	HostPID      bool
	HostPaths    []HostPathMount
	ConfigMaps   []ConfigMapMount
	Secrets      []SecretMount
	// PriorityClass keeps the helper from being preempted or evicted first
	// (deploy/priorityclass.yaml).
	PriorityClass string
	// Resources are the container's requests and limits: without requests
	// a helper is the first pod the kubelet OOM-kills, maybe mid-flash.
	Resources corev1.ResourceRequirements
	// NodeAccess is the label the cluster admin requires of a node before
	// a helper runs there; the helper requires it in its node affinity,
	// which the kubelet enforces when it admits the pinned pod.
	NodeAccess NodeLabel
	// AllowControlPlane drops the required node affinity that keeps the
	// helper off control-plane nodes (the kubelet rejects a pinned pod
	// whose affinity its node does not match).
	AllowControlPlane bool
	RunID             string
}

// HelperName is the deterministic pod name for (task, node, key), so a
// re-run finds the pod an earlier run created instead of starting another.
// Names stay within 63 characters; long node names are shortened and the
// hash of the full triple keeps them unique.
func HelperName(task, node, key string) string {
	sum := sha256.Sum256([]byte(task + "\x00" + node + "\x00" + key))
	h := hex.EncodeToString(sum[:])[:10]
	prefix := HelperNamePrefix(task)
	room := 63 - len(prefix) - len(h) - 1
	n := strings.ToLower(node)
	if len(n) > room {
		n = strings.TrimRight(n[:room], "-.")
	}
	return prefix + n + "-" + h
}

// HelperNamePrefix begins the name of every helper of task.
func HelperNamePrefix(task string) string { return "rollbook-" + task + "-" }

// Pod renders the helper pod: pinned to the node with spec.nodeName (no
// scheduler involved), tolerating every taint (the node is cordoned and may
// be tainted), never restarted, and bounded by activeDeadlineSeconds.
func (s HelperSpec) Pod() *corev1.Pod {
	deadline := int64(s.Deadline / time.Second)
	if deadline <= 0 {
		deadline = 600
	}
	priv := s.Privileged
	var mounts []corev1.VolumeMount
	var vols []corev1.Volume
	for _, m := range s.HostPaths {
		mounts = append(mounts, corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
		vols = append(vols, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: m.HostPath, Type: ptr.To(corev1.HostPathUnset)}}})
	}
	for _, m := range s.ConfigMaps {
		mounts = append(mounts, corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: m.ConfigMap},
				DefaultMode: ptr.To[int32](0o444)}}})
	}
	for _, m := range s.Secrets {
		mode := int32(0o400)
		items := make([]corev1.KeyToPath, 0, len(m.Keys))
		for _, k := range m.Keys {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
		mounts = append(mounts, corev1.VolumeMount{Name: m.Name, MountPath: m.MountPath, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: m.Secret, Items: items, DefaultMode: &mode}}})
	}
	grace := int64(s.GracePeriod / time.Second)
	sc := &corev1.SecurityContext{Privileged: &priv}
	if !priv {
		sc.AllowPrivilegeEscalation = new(bool)
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: s.Capabilities}
	}
	var required []corev1.NodeSelectorRequirement
	if s.NodeAccess.Key != "" {
		required = append(required, corev1.NodeSelectorRequirement{Key: s.NodeAccess.Key, Operator: corev1.NodeSelectorOpIn,
			Values: []string{s.NodeAccess.Value}})
	}
	if !s.AllowControlPlane {
		required = append(required, corev1.NodeSelectorRequirement{Key: LabelControlPlane, Operator: corev1.NodeSelectorOpDoesNotExist})
	}
	var affinity *corev1.Affinity
	if len(required) > 0 {
		affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: required,
			}}}}}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      HelperName(s.Task, s.Node, s.Key),
			Namespace: s.Namespace,
			Labels: map[string]string{
				LabelHelper: s.Task,
				LabelNode:   labelSafe(s.Node),
				LabelRun:    labelSafe(s.RunID),
			},
			Annotations: map[string]string{AnnHelperKey: s.Key},
		},
		Spec: corev1.PodSpec{
			NodeName:                      s.Node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			HostPID:                       s.HostPID,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Affinity:                      affinity,
			PriorityClassName:             s.PriorityClass,
			AutomountServiceAccountToken:  new(bool),
			Containers: []corev1.Container{{
				Name:                     s.Task,
				Image:                    s.Image,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				Command:                  s.Command,
				Env:                      s.Env,
				VolumeMounts:             mounts,
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				SecurityContext:          sc,
				Resources:                s.Resources,
			}},
			Volumes: vols,
		},
	}
	p.Annotations[AnnSpecHash] = SpecHash(p)
	return p
}

// labelSafe shortens a value to the 63 characters a label value may hold.
func labelSafe(v string) string {
	if len(v) > 63 {
		return strings.TrimRight(v[:63], "-_.")
	}
	return v
}

// ForeignHelperError is a pod that has a helper's name but not the spec
// this run would create, and has not finished: it may be another release's
// helper half-way through a flash, so it is neither adopted nor stopped.
type ForeignHelperError struct{ Pod *corev1.Pod }

func (e *ForeignHelperError) Error() string {
	return fmt.Sprintf("pod %s/%s has the helper's name but not the spec this run creates (%s %s, want another), and is %s: "+
		"it is not adopted; wait until it ends (or delete it if it is not rollbook's) and re-run the same command",
		e.Pod.Namespace, e.Pod.Name, AnnSpecHash, SpecHash(e.Pod), e.Pod.Status.Phase)
}

// EnsureHelper creates the helper pod, or returns the one an earlier run
// created with the same name when its spec is the one this run would
// create (HelperMatches), and protects it (s.Protect, ProtectHelper). A finished pod with the name but another spec
// (image, command, mounts, privileges) is deleted and replaced, never
// trusted; an unfinished one is a *ForeignHelperError. created says
// whether the returned pod is new.
func EnsureHelper(ctx context.Context, cs kubernetes.Interface, rec Recorder, s HelperSpec) (pod *corev1.Pod, created bool, err error) {
	want := s.Pod()
	pod, err = cs.CoreV1().Pods(s.Namespace).Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		pod, err = cs.CoreV1().Pods(s.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err == nil && pod.DeletionTimestamp != nil {
			// Being deleted (another tool's drain, say; its containers
			// may still be stopping): never adopted, its name is free once
			// it is gone.
			if err := WaitForPodGone(ctx, cs, s.Namespace, want.Name); err != nil {
				return nil, false, fmt.Errorf("wait for helper pod %s/%s being deleted to go: %w", s.Namespace, want.Name, err)
			}
			return EnsureHelper(ctx, cs, rec, s)
		}
		if err != nil || HelperMatches(pod, s) {
			if err == nil && s.Protect {
				err = ProtectHelper(ctx, cs, pod)
			}
			return pod, false, err
		}
		if !PodTerminal(pod) && pod.DeletionTimestamp == nil {
			return nil, false, &ForeignHelperError{Pod: pod}
		}
		if err := replaceForeign(ctx, cs, rec, pod, want); err != nil {
			return nil, false, err
		}
		pod, err = cs.CoreV1().Pods(s.Namespace).Create(ctx, want, metav1.CreateOptions{})
	}
	if err != nil {
		// The pod may exist all the same: if this run made it, say so.
		err = RecordIfApplied(ctx, err, rec, ReasonHelperStarted, helperStartedMessage(s),
			func(ctx context.Context) (corev1.ObjectReference, bool) {
				p, gerr := cs.CoreV1().Pods(s.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
				if gerr != nil {
					return corev1.ObjectReference{}, false
				}
				return PodRef(p), p.Labels[LabelRun] == labelSafe(s.RunID)
			})
		return nil, false, fmt.Errorf("create helper pod %s/%s: %w", s.Namespace, want.Name, err)
	}
	rec.Record(ctx, PodRef(pod), false, ReasonHelperStarted, helperStartedMessage(s))
	if s.Protect {
		if err := ProtectHelper(ctx, cs, pod); err != nil {
			return pod, true, err
		}
	}
	return pod, true, nil
}

// replaceForeign deletes a finished pod that has a helper's name but not
// its spec, and waits until it is gone so the name is free.
func replaceForeign(ctx context.Context, cs kubernetes.Interface, rec Recorder, p, want *corev1.Pod) error {
	if p.DeletionTimestamp == nil {
		_, err := DeleteHelperIfUnchanged(ctx, cs, rec, p, fmt.Sprintf(
			"deleted pod %s: it has a helper's name but not the spec this run creates (spec hash %s, want %s); replacing it",
			p.Name, SpecHash(p), want.Annotations[AnnSpecHash]))
		if err != nil {
			return fmt.Errorf("replace pod %s/%s whose spec is not the helper's: %w", p.Namespace, p.Name, err)
		}
	}
	if err := WaitForPodGone(ctx, cs, p.Namespace, p.Name); err != nil {
		return fmt.Errorf("replace pod %s/%s whose spec is not the helper's: %w", p.Namespace, p.Name, err)
	}
	return nil
}

func helperStartedMessage(s HelperSpec) string {
	return fmt.Sprintf("started %s helper on node %s (%s)", s.Task, s.Node, s.Key)
}

// WaitForHelper watches the helper pod until it has finished.
func WaitForHelper(ctx context.Context, cs kubernetes.Interface, ns, name string) (*corev1.Pod, error) {
	return WaitForPod(ctx, cs, ns, name, PodTerminal)
}

// TerminationMessage returns what the helper's container wrote to its
// termination-message file, read from the pod status (no kubelet log access
// needed), and its exit code.
func TerminationMessage(p *corev1.Pod) (msg string, exitCode int32, ok bool) {
	for _, c := range p.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil {
			return t.Message, t.ExitCode, true
		}
	}
	return "", 0, false
}

// HelperFailureReason explains a helper pod that failed without a result:
// deadline exceeded, image pull errors, eviction.
func HelperFailureReason(p *corev1.Pod) string {
	if p.Status.Reason != "" {
		return strings.TrimSpace(p.Status.Reason + ": " + p.Status.Message)
	}
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason + ": " + w.Message
		}
		if t := c.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("container %s exited %d (%s)", c.Name, t.ExitCode, t.Reason)
		}
	}
	return string(p.Status.Phase)
}

// CleanupHelpers deletes finished helper pods of task in ns (all nodes when
// node is ""), and unfinished ones whose deadline passed more than a minute
// ago (the kubelet should have killed them; a lost node never will). It
// returns the names it deleted.
func CleanupHelpers(ctx context.Context, cs kubernetes.Interface, rec Recorder, ns, task, node string) ([]string, error) {
	sel := labels.Set{LabelHelper: task}
	if node != "" {
		sel[LabelNode] = labelSafe(node)
	}
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list %s helpers: %w", task, err)
	}
	return CleanupHelperPods(ctx, cs, rec, l.Items, task)
}

// CleanupHelperPods is CleanupHelpers over pods already read (a node's pods:
// helpers are pinned by name, so a list of the node's pods has them all);
// pods of other tasks are left alone. Deletes are UID-preconditioned, so a
// pod replaced since it was read is never hit.
func CleanupHelperPods(ctx context.Context, cs kubernetes.Interface, rec Recorder, pods []corev1.Pod, task string) ([]string, error) {
	var deleted []string
	for i := range pods {
		p := &pods[i]
		if p.Labels[LabelHelper] != task {
			continue
		}
		if finished := PodTerminal(p) || helperStale(p, ServerNow()); p.DeletionTimestamp != nil || !finished {
			continue
		}
		did, err := DeleteHelperIfUnchanged(ctx, cs, rec, p,
			fmt.Sprintf("deleted finished %s helper (phase %s)", task, p.Status.Phase))
		if err != nil {
			return deleted, fmt.Errorf("delete helper %s/%s: %w", p.Namespace, p.Name, err)
		}
		if did {
			deleted = append(deleted, p.Name)
		}
	}
	return deleted, nil
}

// RemoveOtherRunsHelpers deletes task's helpers on node that another run
// started, whatever their phase: the lock makes that run dead, a killed
// run's helper is named after it, and nobody else would remove it. Only for
// read-only tasks (a probe): a running one is stopped mid-way.
func RemoveOtherRunsHelpers(ctx context.Context, cs kubernetes.Interface, rec Recorder, ns, task, node, runID string) error {
	sel := labels.Set{LabelHelper: task, LabelNode: labelSafe(node)}
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return fmt.Errorf("list %s helpers: %w", task, err)
	}
	return RemoveOtherRunsHelperPods(ctx, cs, rec, l.Items, task, runID)
}

// OtherRunsHelper reports a task helper that another run started and that
// is not already being deleted.
func OtherRunsHelper(p *corev1.Pod, task, runID string) bool {
	return p.Labels[LabelHelper] == task && p.DeletionTimestamp == nil && p.Labels[LabelRun] != labelSafe(runID)
}

// RemoveOtherRunsHelperPods is RemoveOtherRunsHelpers over pods already read
// (a node's pods); pods of other tasks are left alone.
func RemoveOtherRunsHelperPods(ctx context.Context, cs kubernetes.Interface, rec Recorder, pods []corev1.Pod, task, runID string) error {
	for i := range pods {
		p := &pods[i]
		if !OtherRunsHelper(p, task, runID) {
			continue
		}
		_, err := DeleteHelperIfUnchanged(ctx, cs, rec, p,
			fmt.Sprintf("deleted the %s helper of an earlier run (phase %s)", task, p.Status.Phase))
		if err != nil {
			return fmt.Errorf("delete helper %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// helperStale: p outlived its deadline by a minute. now is the API
// server's (ServerNow): creationTimestamp is its clock's, not this
// machine's.
func helperStale(p *corev1.Pod, now time.Time) bool {
	if p.Spec.ActiveDeadlineSeconds == nil {
		return false
	}
	limit := time.Duration(*p.Spec.ActiveDeadlineSeconds)*time.Second + time.Minute
	return now.Sub(p.CreationTimestamp.Time) > limit
}
