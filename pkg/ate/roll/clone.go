package roll

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// digestRef is an image reference pinned by digest.
var digestRef = regexp.MustCompile(`^[a-z0-9]+([._/:-][a-z0-9]+)*(:[\w][\w.-]{0,127})?@sha256:[a-f0-9]{64}$`)

// ValidateImage accepts only digest-pinned references, as the runbook
// requires (a tag could move under a serving pool).
func ValidateImage(ref string) error {
	if !digestRef.MatchString(ref) {
		return fmt.Errorf("image %q must be pinned by digest (REPO[:TAG]@sha256:<64 hex>)", ref)
	}
	return nil
}

// Images are the new worker images per sandbox class; Any, when set, is a
// bare ref for every class (only when the serving pools share one class).
type Images struct {
	ByClass map[string]string
	Any     string
}

// ParseImages reads --image values: CLASS=REF@sha256:… (repeatable) or one
// bare REF@sha256:….
func ParseImages(values []string) (Images, error) {
	im := Images{ByClass: map[string]string{}}
	for _, v := range values {
		class, ref, hasClass := strings.Cut(v, "=")
		if !hasClass {
			if im.Any != "" {
				return im, fmt.Errorf("--image %q: only one bare image is allowed; give CLASS=REF@sha256:… per sandbox class", v)
			}
			im.Any = v
			ref = v
		} else {
			if class == "" || validation.IsDNS1123Label(class) != nil {
				return im, fmt.Errorf("--image %q: %q is not a sandbox class name (CLASS=REF@sha256:…)", v, class)
			}
			if _, dup := im.ByClass[class]; dup {
				return im, fmt.Errorf("--image: sandbox class %q given twice", class)
			}
			im.ByClass[class] = ref
		}
		if err := ValidateImage(ref); err != nil {
			return im, fmt.Errorf("--image %q: %w", v, err)
		}
	}
	return im, nil
}

// For returns the image of class, or says which --image is missing. A bare
// image serves only when every serving pool has the same class (classes).
func (im Images) For(class string, classes map[string]bool) (string, error) {
	if ref, ok := im.ByClass[class]; ok {
		return ref, nil
	}
	if im.Any != "" && len(classes) <= 1 {
		return im.Any, nil
	}
	if im.Any != "" {
		return "", fmt.Errorf("the serving pools use %d sandbox classes (%s), so a bare --image is ambiguous; "+
			"give --image CLASS=REF@sha256:… for each", len(classes), strings.Join(sortedKeys(classes), ", "))
	}
	return "", fmt.Errorf("no image for sandbox class %q: pass --image %s=REF@sha256:…", class, class)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// CloneName is the name of the clone of pool for version: the pool name
// with its version suffix replaced (counter-v2 → counter-v3) or appended.
func CloneName(pool, version string) string {
	suffix := "-" + strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(version, "-"))
	base := regexp.MustCompile(`-v[0-9][-a-z0-9]*$`).ReplaceAllString(pool, "")
	name := strings.Trim(base+suffix, "-")
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = name[:validation.DNS1123SubdomainMaxLength]
	}
	return name
}

// ClonePlan is one clone to create.
type ClonePlan struct {
	From   fleet.Pool
	Name   string
	Image  string
	Object *unstructured.Unstructured
	// Schema is the served WorkerPool schema the plan was made for (nil:
	// unknown; what is stored is then only read back).
	Schema *fleet.Schema
}

// PlanClones is PlanClonesFor with the served schema unknown.
func PlanClones(c *fleet.Cluster, images Images) ([]ClonePlan, error) {
	return PlanClonesFor(c, images, nil)
}

// PlanClonesFor builds the clone of every OLD-pinned pool that has none:
// same namespace and labels, the whole spec copied, the new image and the
// NEW pin; never status, uid, resourceVersion or managedFields. images
// picks the image per sandbox class. The clone names its image and class
// in the fields the served schema declares (s; nil: as its source does):
// a field the schema does not declare is pruned on write, so a clone of a
// microvm pool written with spec.sandboxClasses under a schema without it
// would be stored with no class and serve the default one. A clone that
// still needs a field the schema lacks is refused: the new release's CRDs
// are not applied (runbook step 1).
func PlanClonesFor(c *fleet.Cluster, images Images, s *fleet.Schema) ([]ClonePlan, error) {
	if c.New == "" {
		return nil, fmt.Errorf("there is no NEW atelet DaemonSet yet: deploy the new atelet first (ate-setup deploy atelet)")
	}
	classes := map[string]bool{}
	for _, p := range c.OldPools() {
		classes[p.SandboxClass] = true
	}
	var plans []ClonePlan
	for _, p := range c.OldPools() {
		if p.CloneName != "" {
			continue
		}
		img, err := images.For(p.SandboxClass, classes)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.Key(), err)
		}
		spec, ok, _ := unstructured.NestedMap(p.Object.Object, "spec")
		if !ok {
			return nil, fmt.Errorf("pool %s has no spec", p.Key())
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": p.Object.GetAPIVersion(), "kind": p.Object.GetKind(),
			"metadata": map[string]any{"name": CloneName(p.Name, c.New), "namespace": p.Namespace},
			"spec":     spec,
		}}
		obj.SetLabels(p.Labels)
		obj.SetAnnotations(map[string]string{fleet.AnnClonedFrom: p.Key(),
			fleet.AnnSourceGeneration: strconv.FormatInt(p.Object.GetGeneration(), 10)})
		imageField := "workerImage"
		if s != nil && !s.Has("spec", "workerImage") && s.Has("spec", "ateomImage") {
			imageField = "ateomImage" // a release before the rename
		}
		unstructured.RemoveNestedField(obj.Object, "spec", "workerImage")
		unstructured.RemoveNestedField(obj.Object, "spec", "ateomImage")
		_ = unstructured.SetNestedField(obj.Object, img, "spec", imageField)
		_ = unstructured.SetNestedField(obj.Object, c.New, "spec", "template", "nodeSelector", fleet.VersionLabel)
		_, hasClasses, _ := unstructured.NestedSlice(obj.Object, "spec", "sandboxClasses")
		if !hasClasses && p.SandboxClass != "" && s != nil && s.Has("spec", "sandboxClasses") {
			_ = unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"name": p.SandboxClass}}, "spec", "sandboxClasses")
			unstructured.RemoveNestedField(obj.Object, "spec", "sandboxClass")
		}
		if s != nil {
			cs, _, _ := unstructured.NestedMap(obj.Object, "spec")
			if lost := s.Pruned(cs, "spec"); len(lost) > 0 {
				return nil, fmt.Errorf("the served WorkerPool schema (CRD %s) does not declare %s, which the clone of %s needs: "+
					"a write would drop it. Apply the new release's CRDs first (runbook step 1: kubectl apply -f "+
					"manifests/ate-install/generated from its checkout), then re-run", fleet.WorkerPoolCRDName, fleet.Brief(lost), p.Key())
			}
		}
		plans = append(plans, ClonePlan{From: p, Name: obj.GetName(), Image: img, Object: obj, Schema: s})
	}
	return plans, nil
}

// CloneDiff names every way clone differs from its source beyond what a
// clone changes — the image, the pin, and how the served schema spells the
// sandbox class (the class itself must stay) — field by field, and its
// labels (the scheduler matches actors by them); s, when known, lets a
// field the schema defaults appear on the clone alone.
func CloneDiff(source, clone fleet.Pool, s *fleet.Schema) []string {
	var out []string
	if a, b := classOf(source), classOf(clone); a != b {
		out = append(out, fmt.Sprintf("sandbox class: %s in the source, %s in the clone", a, b))
	}
	if !maps.Equal(source.Labels, clone.Labels) {
		out = append(out, fmt.Sprintf("labels: %v in the source, %v in the clone", source.Labels, clone.Labels))
	}
	if source.Object == nil || clone.Object == nil {
		return out
	}
	ss, _, _ := unstructured.NestedMap(source.Object.Object, "spec")
	cs, _, _ := unstructured.NestedMap(clone.Object.Object, "spec")
	return append(out, fleet.SpecDiff(ss, cs, s, "workerImage", "ateomImage", "sandboxClass", "sandboxClasses",
		"template.nodeSelector."+fleet.VersionLabel)...)
}

// classOf is the pool's sandbox class, gvisor when it names none (the
// older field's default).
func classOf(p fleet.Pool) string {
	if p.SandboxClass == "" {
		return "gvisor"
	}
	return p.SandboxClass
}

// CreateClone creates the clone and reads back what was stored: it must
// differ from its source only in image and pin (CloneDiff), or it is
// reported, not fixed — rollbook never edits a pool. An existing clone is
// verified the same way, never overwritten.
func CreateClone(ctx context.Context, dyn dynamic.Interface, rec kube.Recorder, p ClonePlan) error {
	res := dyn.Resource(fleet.WorkerPoolGVR).Namespace(p.From.Namespace)
	stored, err := res.Create(ctx, p.Object, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := res.Get(ctx, p.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		got := fleet.PoolOf(cur)
		if got.Pin != pinOf(p.Object) || got.Image != p.Image {
			return runbook.Blocked(fmt.Errorf("WorkerPool %s/%s already exists with pin %q and image %q, not %q and %q; rollbook does "+
				"not edit pools — rename or delete it", p.From.Namespace, p.Name, got.Pin, got.Image, pinOf(p.Object), p.Image))
		}
		return storedAsPlanned(p, cur)
	}
	message := fmt.Sprintf("cloned from %s with image %s, pinned to %s", p.From.Key(), p.Image, pinOf(p.Object))
	if err != nil {
		// Created all the same if the clone is there now, as planned.
		err = kube.RecordIfApplied(ctx, err, rec, "PoolCloned", message, func(ctx context.Context) (corev1.ObjectReference, bool) {
			cur, gerr := res.Get(ctx, p.Name, metav1.GetOptions{})
			if gerr != nil {
				return corev1.ObjectReference{}, false
			}
			got := fleet.PoolOf(cur)
			return fleet.PoolRef(p.From.Namespace, p.Name), got.Pin == pinOf(p.Object) && got.Image == p.Image &&
				cur.GetAnnotations()[fleet.AnnClonedFrom] == p.From.Key()
		})
		return fmt.Errorf("create WorkerPool %s/%s: %w", p.From.Namespace, p.Name, err)
	}
	rec.Record(ctx, fleet.PoolRef(p.From.Namespace, p.Name), false, "PoolCloned", message)
	return storedAsPlanned(p, stored)
}

// storedAsPlanned reads back the clone as the API server stored it (after
// its schema pruned and defaulted it, and admission had its say).
func storedAsPlanned(p ClonePlan, stored *unstructured.Unstructured) error {
	got := fleet.PoolOf(stored)
	diff := CloneDiff(p.From, got, p.Schema)
	if got.Image != p.Image {
		diff = append(diff, fmt.Sprintf("image: %s planned, %s stored", p.Image, fleet.OrNone(got.Image)))
	}
	if len(diff) == 0 {
		return nil
	}
	return runbook.Blocked(fmt.Errorf("the clone %s/%s as stored differs from its source %s: %s. Rollbook does not edit pools: find what "+
		"changed it (a served CRD schema older than the new release's — runbook step 1, kubectl apply -f manifests/ate-install/"+
		"generated —, an admission webhook), delete the clone before any node is at NEW (kubectl delete workerpool -n %s %s) "+
		"and re-run", p.From.Namespace, p.Name, p.From.Key(), strings.Join(diff, "; "), p.From.Namespace, p.Name))
}

func pinOf(u *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(u.Object, "spec", "template", "nodeSelector", fleet.VersionLabel)
	return v
}

// CheckLimits refuses a clone whose resource limits are below the old
// pool's: a worker only accepts actors whose limits fit.
func CheckLimits(p ClonePlan) error {
	oldLim, _, _ := unstructured.NestedStringMap(p.From.Object.Object, "spec", "template", "resources", "limits")
	newLim, _, _ := unstructured.NestedStringMap(p.Object.Object, "spec", "template", "resources", "limits")
	for k, ov := range oldLim {
		nv, ok := newLim[k]
		if !ok {
			return fmt.Errorf("clone of %s drops limit %s", p.From.Key(), k)
		}
		o, err1 := resource.ParseQuantity(ov)
		n, err2 := resource.ParseQuantity(nv)
		if err1 == nil && err2 == nil && n.Cmp(o) < 0 {
			return fmt.Errorf("clone of %s shrinks limit %s from %s to %s", p.From.Key(), k, ov, nv)
		}
	}
	return nil
}
