package roll

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// RetireRunbookName names the runbook that retires the old version.
const RetireRunbookName = "ate-retire"

// BackupOptions say where retire saves each old pool before deleting it.
type BackupOptions struct {
	// Dir is the local directory of the YAML files.
	Dir string
	// ConfigMap also saves each pool as a ConfigMap in its namespace.
	ConfigMap bool
}

// RetireRunbook reclaims the rollback reserve once every node is at NEW:
// save each old pool, delete the old pools, delete the OLD atelet
// DaemonSet. The two deleting steps are the rollback's, run on OLD. Run it
// on runbook.ScopeTarget{Scope: "roll"}.
func RetireRunbook(cs kubernetes.Interface, dyn dynamic.Interface, api fleet.Inventorier, rec kube.Recorder,
	b BackupOptions) *runbook.Runbook[removalFacts] {
	guards := []runbook.Guard[removalFacts]{
		{Name: "no old-pool pod is Running (Pending is expected)", Check: func(f removalFacts) (bool, string) {
			return len(f.running) == 0, fmt.Sprintf("%d Running: %s; finish the roll: every node's old-pool pods go in its step e "+
				"(kubectl ate roll next-node)", len(f.running), fleet.Brief(f.running))
		}},
		{Name: "every old pool has a clone serving on NEW", Check: func(f removalFacts) (bool, string) {
			var unpaired []string
			for _, p := range f.pools {
				if p.CloneName == "" {
					unpaired = append(unpaired, p.Key())
				}
			}
			return len(unpaired) == 0, fmt.Sprintf("without a clone: %s; clone it first (kubectl ate roll clone-pools): retiring "+
				"it would leave its actors no worker", fleet.Brief(unpaired))
		}},
		{Name: "every clone has a worker serving (registered, ACTIVE, capacity reported)", Check: func(f removalFacts) (bool, string) {
			return len(f.unserved) == 0, fmt.Sprintf("no worker serves for %s: retiring the old pool would leave its actors "+
				"nowhere to resume. Are the clone's pods Pending (kubectl get pods -n NS -l %s; a ResourceQuota, a taint, an "+
				"image of another architecture)?", fleet.Brief(f.unserved), fleet.PoolLabel)
		}},
	}
	// The backup step refuses on every guard the delete refuses on: a
	// refused retire writes nothing.
	backupGuards := append([]runbook.Guard[removalFacts]{shapeKnown(), noNodeAt(retireOld), noNodeHalfway(), noActorBound(retireOld)},
		guards...)
	return &runbook.Runbook[removalFacts]{
		Name:  RetireRunbookName,
		Title: "Retire the old version's pools and atelet after the roll",
		Doc: `Reclaims the rollback reserve once the new version has soaked, and ends the rollback
option. Refused unless no node is at OLD, no old-pool pod is Running (Pending is expected),
no actor is bound to an old-pool worker and every old pool has a clone serving on NEW. Each
old WorkerPool is saved first, stripped of server-set fields so that kubectl apply -f
recreates it; then the old pools (their Deployments and pods go with them) and the OLD atelet
DaemonSet are deleted, with the same steps a rollback runs on NEW.`,
		Observe: func(ctx context.Context, _ runbook.Target) (removalFacts, error) {
			f, err := observeRemoval(ctx, cs, dyn, api, retireOld)
			if err != nil {
				return f, err
			}
			f.backup = b
			f.saved, err = savedBackups(ctx, cs, f.pools, b)
			return f, err
		},
		Steps: []runbook.Step[removalFacts]{
			{
				ID: "ate.retire.backup", Title: "Save each old pool's YAML",
				Doc: "Save each WorkerPool pinned to OLD as YAML in --backup-dir (and with --backup-configmap as a ConfigMap in its " +
					"namespace), without server-set fields. Nothing is deleted until every backup is saved; a backup is done when " +
					"its content equals the pool's.",
				Done: func(f removalFacts) (bool, string) {
					if len(f.c.Problems) > 0 {
						return false, "the roll's shape is unknown"
					}
					missing := 0
					for _, p := range f.pools {
						if !f.saved[p.Key()] {
							missing++
						}
					}
					if f.version == "" {
						return true, "one atelet DaemonSet (" + f.c.Old + "): nothing to retire"
					}
					return missing == 0, fmt.Sprintf("%d of %d old pool(s) saved in %s", len(f.pools)-missing, len(f.pools), f.backup.Dir)
				},
				Guards: backupGuards,
				Plan: func(f removalFacts) []runbook.Change {
					var out []runbook.Change
					for _, p := range f.pools {
						out = append(out, runbook.Change{Object: "workerpool/" + p.Key(), Action: "save", Detail: "to " +
							BackupFile(f.backup.Dir, p)})
						if f.backup.ConfigMap {
							out = append(out, runbook.Change{Object: "configmap/" + p.Namespace + "/" + BackupConfigMapName(p),
								Action: "create or update", Detail: "backup of workerpool/" + p.Key()})
						}
					}
					return out
				},
				Act: func(ctx context.Context, f removalFacts) error {
					for _, p := range f.pools {
						if err := writeBackup(ctx, cs, rec, p, f.backup); err != nil {
							return err
						}
					}
					return nil
				},
			},
			deletePoolsStep("ate.retire.delete-old-pools", retireOld, dyn, rec,
				"Delete each WorkerPool pinned to OLD (its Deployment and pods go with it), once its backup is saved. The pools "+
					"pinned to NEW serve on.", guards...),
			deleteAteletStep("ate.retire.delete-old-atelet", retireOld, cs, rec,
				"Delete the atelet DaemonSet of OLD once no node carries OLD (it runs no pod then) and no pool is pinned to OLD. "+
					"The NEW atelet DaemonSet becomes the only one."),
		},
	}
}

// PoolBackup is a WorkerPool as `kubectl apply -f` recreates it: no uid,
// resourceVersion, managedFields, status or other server-set field.
func PoolBackup(u *unstructured.Unstructured) ([]byte, error) {
	b := u.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "managedFields", "creationTimestamp", "generation", "selfLink",
		"deletionTimestamp", "deletionGracePeriodSeconds"} {
		unstructured.RemoveNestedField(b.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(b.Object, "status")
	data, err := yaml.Marshal(b.Object)
	if err != nil {
		return nil, fmt.Errorf("backup of WorkerPool %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return data, nil
}

// BackupFile is where the backup of p goes in dir.
func BackupFile(dir string, p fleet.Pool) string {
	return filepath.Join(dir, "workerpool-"+p.Namespace+"-"+p.Name+".yaml")
}

// BackupConfigMapName names the ConfigMap holding p's backup.
func BackupConfigMapName(p fleet.Pool) string {
	name := BackupConfigMapPrefix + p.Name
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// BackupKey is the ConfigMap data key holding the pool's YAML.
const BackupKey = "workerpool.yaml"

// BackupConfigMapPrefix begins every pool backup's ConfigMap name.
const BackupConfigMapPrefix = "workerpool-backup-"

// savedBackups returns the pools whose backup is in place and current: the
// file in b.Dir and, with b.ConfigMap, the ConfigMap hold the pool as it is.
func savedBackups(ctx context.Context, cs kubernetes.Interface, pools []fleet.Pool, b BackupOptions) (map[string]bool, error) {
	saved := map[string]bool{}
	for _, p := range pools {
		want, err := PoolBackup(p.Object)
		if err != nil {
			return nil, err
		}
		got, err := os.ReadFile(BackupFile(b.Dir, p))
		if errors.Is(err, fs.ErrNotExist) || err == nil && !bytes.Equal(got, want) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the backup of %s: %w", p.Key(), err)
		}
		if b.ConfigMap {
			cm, err := cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, BackupConfigMapName(p), metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err == nil && cm.Data[BackupKey] != string(want) {
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		saved[p.Key()] = true
	}
	return saved, nil
}

// writeBackup saves the pool's YAML in b.Dir (atomically) and, with
// b.ConfigMap, as a ConfigMap in the pool's namespace.
func writeBackup(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, p fleet.Pool, b BackupOptions) error {
	data, err := PoolBackup(p.Object)
	if err != nil {
		return err
	}
	path := BackupFile(b.Dir, p)
	tmp, err := os.CreateTemp(b.Dir, ".workerpool-backup-*")
	if err != nil {
		return fmt.Errorf("backup of %s: %w", p.Key(), err)
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("backup of %s to %s: %w", p.Key(), path, werr)
	}
	rec.Record(ctx, fleet.PoolRef(p.Namespace, p.Name), false, "PoolBackedUp", fmt.Sprintf("saved %s to %s (kubectl apply -f "+
		"recreates it)", p.Key(), path))
	if !b.ConfigMap {
		return nil
	}
	name := BackupConfigMapName(p)
	obj := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "rollbook"},
			Annotations: map[string]string{"rollbook.dev/backup-of": p.Key()}},
		Data: map[string]string{BackupKey: string(data)},
	}
	cms := cs.CoreV1().ConfigMaps(p.Namespace)
	_, err = cms.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *corev1.ConfigMap
		if cur, err = cms.Get(ctx, name, metav1.GetOptions{}); err == nil {
			cur.Data, cur.Annotations = obj.Data, obj.Annotations
			_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("backup of %s to ConfigMap %s/%s: %w", p.Key(), p.Namespace, name, err)
	}
	rec.Record(ctx, fleet.PoolRef(p.Namespace, p.Name), false, "PoolBackedUp", fmt.Sprintf("saved %s to ConfigMap %s/%s, key %s",
		p.Key(), p.Namespace, name, BackupKey))
	return nil
}
