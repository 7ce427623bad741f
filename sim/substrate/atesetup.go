package substrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// NameSuffix is ate-setup's versionlabel.NameSuffix: lowercase, every
// character outside [a-z0-9] becomes "-", dashes trimmed; empty or longer
// than 30 becomes "v" + 10 hex digits of sha256(v). "" is "unknown".
func NameSuffix(v string) string {
	if v == "" {
		return "unknown"
	}
	b := []byte(strings.ToLower(v))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-")
	if s == "" || len(s) > 30 {
		sum := sha256.Sum256([]byte(v))
		return "v" + hex.EncodeToString(sum[:])[:10]
	}
	return s
}

// AteletName is the versioned atelet DaemonSet's name.
func AteletName(version string) string { return "atelet-" + NameSuffix(version) }

// AteletDaemonSet renders `ate-setup deploy atelet` for version: name
// atelet-<suffix>, labels app=atelet and the version label, selector on
// both (so two versions coexist), pods pinned to nodes carrying the version
// label, and the host ports that make a new pod wait for the old one.
func AteletDaemonSet(version string) *appsv1.DaemonSet {
	labels := map[string]string{AppLabel: AteletApp, VersionLabel: version}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: AteletName(version), Namespace: Namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{VersionLabel: version},
					TerminationGracePeriodSeconds: ptr.To[int64](330),
					Containers: []corev1.Container{{
						Name:  "atelet",
						Image: "ghcr.io/agent-substrate/substrate/atelet:" + version,
						Args:  []string{"--drain-timeout=5m"},
						Ports: []corev1.ContainerPort{
							{Name: "grpc", ContainerPort: 8085, HostPort: 8085, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: 9090, HostPort: 9090, Protocol: corev1.ProtocolTCP},
						},
					}},
				},
			},
		},
	}
}

// ControllerDeployment is ate-controller's Deployment at version, as
// `ate-setup deploy ate-controller` applies it from a release's prebuilt
// images (tagged with the version). It has no replicas: the sim's pool
// controller runs in the sim's process, and a pod would take a node's
// room; the Deployment records which release the controller is.
func ControllerDeployment(version string) *appsv1.Deployment {
	labels := map[string]string{"app": "ate-controller", "app.kubernetes.io/name": "ate-controller"}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: ControllerName, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ate-controller"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "ate-controller",
					Image: "ghcr.io/agent-substrate/substrate/ate-controller:" + version,
				}}},
			},
		},
	}
}

// DeployController applies ate-controller's Deployment at version (runbook
// step 2, or its rollback from the old checkout).
func DeployController(ctx context.Context, dyn dynamic.Interface, version string) error {
	_, err := apply(ctx, dyn, gvrDeployment, ControllerDeployment(version), fieldManager)
	return err
}

// DeployAtelet applies the atelet DaemonSet for version in ate-system
// (creating the namespace), like `ate-setup deploy atelet`.
func DeployAtelet(ctx context.Context, dyn dynamic.Interface, version string) error {
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := apply(ctx, dyn, gvrNamespace, ns, fieldManager); err != nil {
		return err
	}
	_, err := apply(ctx, dyn, gvrDaemonSet, AteletDaemonSet(version), fieldManager)
	return err
}

// LabelUnlabelledNodes sets the version label on every node without one,
// and never relabels a node: per-node values belong to the rolling upgrade
// (ate-setup's LabelNodesSubstrateVersion). It returns how many it labelled.
func LabelUnlabelledNodes(ctx context.Context, cs kubernetes.Interface, version string) (int, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!" + VersionLabel})
	if err != nil {
		return 0, err
	}
	labelled := 0
	for _, n := range nodes.Items {
		// The patch carries the resourceVersion it was decided on, so a
		// concurrent labeller wins; kwok's heartbeats conflict too, hence
		// the re-read and retry.
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if _, has := cur.Labels[VersionLabel]; has {
				return nil
			}
			patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{%q:%q}}}`, cur.ResourceVersion, VersionLabel, version)
			if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return err
			}
			labelled++
			return nil
		})
		if err != nil {
			return labelled, fmt.Errorf("label node %s: %w", n.Name, err)
		}
	}
	return labelled, nil
}

// SetWorkerSlots gives each node allocatable cpu for exactly slots worker
// pods (the scenario's pools request 1 cpu per worker), so a node holds a
// fixed number of workers as a real one does. kwok keeps the allocatable a
// node was given.
func SetWorkerSlots(ctx context.Context, cs kubernetes.Interface, nodes []string, slots int) error {
	patch := fmt.Sprintf(`{"status":{"allocatable":{"cpu":"%d"},"capacity":{"cpu":"%d"}}}`, slots, slots)
	for _, n := range nodes {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			_, err := cs.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			return err
		})
		if err != nil {
			return fmt.Errorf("worker slots of node %s: %w", n, err)
		}
	}
	return nil
}
