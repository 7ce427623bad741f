package roll

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/kube"
)

// The facts the rollback's "control plane first" rests on are recorded on
// the NEW atelet DaemonSet when they become true, never re-derived from
// node labels that drift: a node that joins at OLD after every node reached
// NEW (an autoscaler, an auto-repair from the pool's label) does not make
// step 6 un-happen.

// RecordEveryNodeReached writes fleet.AnnEveryNodeReached on the NEW atelet
// DaemonSet when c shows every node labelled NEW (from then on step 6 may
// run) and the fact is not recorded since the last revert. It changes
// nothing otherwise.
func RecordEveryNodeReached(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, c *fleet.Cluster) error {
	a := c.NewAtelet()
	if a == nil || !c.AllAt(c.New) {
		return nil
	}
	if _, ok := c.ControlPlaneMayBeNew(); ok {
		return nil
	}
	now := time.Now().UTC()
	keys := map[string]*string{fleet.AnnEveryNodeReached: ptr.To(now.Format(time.RFC3339Nano)), fleet.AnnStep6Seen: nil,
		fleet.AnnAPIServerAtReached: nil}
	msg := fmt.Sprintf("every node is at %s: from now on step 6 may upgrade the control plane, and a rollback first needs the "+
		"OLD API server back (--control-plane-reverted)", c.New)
	if c.APIServer != "" {
		keys[fleet.AnnAPIServerAtReached] = &c.APIServer
		msg += fmt.Sprintf("; Deployment %s/%s runs %s", fleet.Namespace, fleet.APIServerDeployment, c.APIServer)
	}
	return annotateAtelet(ctx, cs, rec, a.Name, keys, "EveryNodeReached", msg)
}

// RecordStep6Seen writes fleet.AnnStep6Seen on the NEW atelet DaemonSet
// the first time a run sees the API server run other images than when
// every node reached NEW: step 6 ran, and the images it brought are known
// even once a revert replaced them.
func RecordStep6Seen(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, c *fleet.Cluster) error {
	a := c.NewAtelet()
	if a == nil || !c.Step6Unrecorded() {
		return nil
	}
	s := c.Step6()
	v := time.Now().UTC().Format(time.RFC3339) + " " + s.After
	return annotateAtelet(ctx, cs, rec, a.Name, map[string]*string{fleet.AnnStep6Seen: &v}, "Step6Seen",
		"step 6 ran: "+s.String())
}

// RecordControlPlaneReverted writes fleet.AnnControlPlaneReverted on the
// NEW atelet DaemonSet: a rollback was told the OLD API server is back (or
// that step 6 never ran), so later runs need not be told again until every
// node reaches NEW once more.
func RecordControlPlaneReverted(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, c *fleet.Cluster) error {
	a := c.NewAtelet()
	if a == nil {
		return nil
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	return annotateAtelet(ctx, cs, rec, a.Name, map[string]*string{fleet.AnnControlPlaneReverted: &now}, "ControlPlaneReverted",
		"the rollback was told (--control-plane-reverted) that the OLD API server is back, or that step 6 never ran")
}

// annotateAtelet sets (nil: removes) keys on the atelet DaemonSet name.
func annotateAtelet(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, name string, keys map[string]*string,
	reason, msg string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": keys}})
	if err != nil {
		return err
	}
	ds, err := cs.AppsV1().DaemonSets(fleet.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("record %s on DaemonSet %s: %w", reason, name, err)
	}
	rec.Record(ctx, corev1.ObjectReference{Kind: "DaemonSet", APIVersion: "apps/v1", Namespace: ds.Namespace, Name: ds.Name,
		UID: ds.UID}, false, reason, msg)
	return nil
}
