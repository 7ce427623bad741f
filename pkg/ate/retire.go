package ate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
)

// RetireFacts is what retiring the old pools decides on.
type RetireFacts struct {
	Cluster *Cluster `json:"-"`
	// OldPools are the pools pinned to OLD; empty when there is no NEW.
	OldPools []Pool `json:"-"`
	// OldAtelet is OLD's atelet DaemonSet, when a NEW one exists too.
	OldAtelet      string            `json:"oldAtelet,omitempty"`
	RunningOldPods []string          `json:"runningOldPods,omitempty"`
	Bound          []ateapi.Actor    `json:"boundActors,omitempty"`
	Inventory      *ateapi.Inventory `json:"-"`
}

// ObserveRetire reads the cluster, the old pools' pods and the actors.
func ObserveRetire(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, api Inventorier) (*RetireFacts, error) {
	c, err := ObserveCluster(ctx, cs, dyn)
	if err != nil {
		return nil, err
	}
	f := &RetireFacts{Cluster: c}
	if c.New == "" || len(c.Problems) > 0 {
		return f, nil
	}
	f.OldPools = c.OldPools()
	for _, a := range c.Atelets {
		if a.Version == c.Old {
			f.OldAtelet = a.Name
		}
	}
	pods, err := PoolPods(ctx, cs, f.OldPools)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			f.RunningOldPods = append(f.RunningOldPods, p.Namespace+"/"+p.Name+" on "+p.Spec.NodeName)
		}
	}
	if f.Inventory, err = api.Inventory(ctx); err != nil {
		return nil, err
	}
	f.Bound = actorsBoundTo(f.Inventory, f.OldPools)
	return f, nil
}

// Nothing reports that there is nothing to retire: one atelet DaemonSet.
func (f *RetireFacts) Nothing() bool { return f.Cluster.New == "" && len(f.Cluster.Problems) == 0 }

// Checks are the runbook's retire guards, each with its evidence and fix.
func (f *RetireFacts) Checks() []Check {
	c := f.Cluster
	var out []Check
	add := func(name string, ok bool, detail, fix string) {
		if ok && (strings.HasPrefix(detail, "0 ") || strings.HasSuffix(detail, ": ")) {
			detail = "" // nothing to list
		}
		out = append(out, Check{Group: "retire the old pools", Name: name, OK: ok, Detail: detail, Fix: fix})
	}
	add("the roll's shape is known (two atelet DaemonSets, labelled nodes)", len(c.Problems) == 0, strings.Join(c.Problems, "; "),
		"fix the problems shown by kubectl ate status")
	if len(c.Problems) > 0 {
		return out
	}
	if c.New == "" { // nothing to retire: the caller says so
		return out
	}
	add("a NEW version is installed next to OLD", true, ateletNames(c), "")
	atOld := c.NodesAt(c.Old)
	add("no node is at OLD ("+c.Old+")", len(atOld) == 0, fmt.Sprintf("%d node(s) at %s: %s", len(atOld), c.Old, short(atOld)),
		"finish the roll first: kubectl ate roll next-node --all --wait")
	add("no old-pool pod is Running (Pending is expected)", len(f.RunningOldPods) == 0,
		fmt.Sprintf("%d Running: %s", len(f.RunningOldPods), short(f.RunningOldPods)),
		"finish the roll: every node's old-pool pods go in its step e (kubectl ate roll next-node)")
	add("no actor is bound to an old-pool worker", len(f.Bound) == 0, fmt.Sprintf("%d bound: %s", len(f.Bound), actorNames(f.Bound)),
		"suspend them (kubectl ate suspend actor NAME -a ATESPACE); they resume on a new-pool worker")
	var unpaired []string
	for _, p := range f.OldPools {
		if p.CloneName == "" {
			unpaired = append(unpaired, p.Key())
		}
	}
	add("every old pool has a clone serving on NEW", len(unpaired) == 0, "without a clone: "+short(unpaired),
		"clone it first (kubectl ate roll clone-pools): retiring it would leave its actors no worker")
	return out
}

func ateletNames(c *Cluster) string {
	var names []string
	for _, a := range c.Atelets {
		names = append(names, a.Name+" ("+a.Version+")")
	}
	return strings.Join(names, ", ")
}

// PoolBackup is a WorkerPool as `kubectl apply -f` recreates it: no uid,
// resourceVersion, managedFields, status or other server-set field.
func PoolBackup(u *unstructured.Unstructured) (*unstructured.Unstructured, []byte, error) {
	b := u.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "managedFields", "creationTimestamp", "generation", "selfLink",
		"deletionTimestamp", "deletionGracePeriodSeconds"} {
		unstructured.RemoveNestedField(b.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(b.Object, "status")
	data, err := yaml.Marshal(b.Object)
	if err != nil {
		return nil, nil, fmt.Errorf("backup of WorkerPool %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return b, data, nil
}

// BackupFile is where the backup of p goes in dir.
func BackupFile(dir string, p Pool) string {
	return filepath.Join(dir, "workerpool-"+p.Namespace+"-"+p.Name+".yaml")
}

// BackupConfigMapName names the ConfigMap holding p's backup.
func BackupConfigMapName(p Pool) string {
	name := "workerpool-backup-" + p.Name
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// BackupKey is the ConfigMap data key holding the pool's YAML.
const BackupKey = "workerpool.yaml"

// WriteBackup saves the pool's YAML in dir (atomically) and, when cm, as a
// ConfigMap in the pool's namespace. It returns where it went.
func WriteBackup(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, p Pool, dir string, cm bool) ([]string, error) {
	_, data, err := PoolBackup(p.Object)
	if err != nil {
		return nil, err
	}
	path := BackupFile(dir, p)
	tmp, err := os.CreateTemp(dir, ".workerpool-backup-*")
	if err != nil {
		return nil, fmt.Errorf("backup of %s: %w", p.Key(), err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return nil, fmt.Errorf("backup of %s to %s: %w", p.Key(), path, werr)
	}
	where := []string{path}
	rec.Record(ctx, poolRef(p.Namespace, p.Name), false, "PoolBackedUp", fmt.Sprintf("saved %s to %s (kubectl apply -f "+
		"recreates it)", p.Key(), path))
	if cm {
		name := BackupConfigMapName(p)
		obj := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
				Labels:      map[string]string{"app.kubernetes.io/managed-by": "rollbook"},
				Annotations: map[string]string{"rollbook.dev/backup-of": p.Key()}},
			Data: map[string]string{BackupKey: string(data)},
		}
		cms := cs.CoreV1().ConfigMaps(p.Namespace)
		_, err := cms.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *corev1.ConfigMap
			if cur, err = cms.Get(ctx, name, metav1.GetOptions{}); err == nil {
				cur.Data, cur.Annotations = obj.Data, obj.Annotations
				_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return where, fmt.Errorf("backup of %s to ConfigMap %s/%s: %w", p.Key(), p.Namespace, name, err)
		}
		where = append(where, "configmap/"+p.Namespace+"/"+name)
		rec.Record(ctx, poolRef(p.Namespace, p.Name), false, "PoolBackedUp", fmt.Sprintf("saved %s to ConfigMap %s/%s, "+
			"key %s", p.Key(), p.Namespace, name, BackupKey))
	}
	return where, nil
}

// DeletePool deletes an old pool (its Deployment and pods go with it) and
// waits until it is gone.
func DeletePool(ctx context.Context, dyn dynamic.Interface, rec kube.Recorder, p Pool) error {
	res := dyn.Resource(WorkerPoolGVR).Namespace(p.Namespace)
	uid := p.Object.GetUID()
	err := res.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete WorkerPool %s: %w", p.Key(), err)
	}
	if err == nil {
		rec.Record(ctx, poolRef(p.Namespace, p.Name), false, "PoolRetired", fmt.Sprintf("retired %s (pinned to %s); no node, pod or "+
			"actor used it", p.Key(), p.Pin))
	}
	return waitGone(ctx, func(ctx context.Context) error {
		_, err := res.Get(ctx, p.Name, metav1.GetOptions{})
		return err
	})
}

// DeleteAtelet deletes an atelet DaemonSet and waits until it is gone.
func DeleteAtelet(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, name, why string) error {
	ds, err := cs.AppsV1().DaemonSets(Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	uid := ds.UID
	err = cs.AppsV1().DaemonSets(Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete DaemonSet %s/%s: %w", Namespace, name, err)
	}
	if err == nil {
		rec.Record(ctx, dsRef(ds), false, "AteletDeleted", why)
	}
	return waitGone(ctx, func(ctx context.Context) error {
		_, err := cs.AppsV1().DaemonSets(Namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
}
