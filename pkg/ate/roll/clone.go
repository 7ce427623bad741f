package roll

import (
	"context"
	"fmt"
	"regexp"
	"sort"
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
}

// PlanClones builds the clone of every OLD-pinned pool that has none:
// same namespace and labels, the whole spec copied, the new image and the
// NEW pin; never status, uid, resourceVersion or managedFields. imageFor
// picks the image per sandbox class.
func PlanClones(c *fleet.Cluster, images Images) ([]ClonePlan, error) {
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
		obj.SetAnnotations(map[string]string{fleet.AnnClonedFrom: p.Key()})
		_ = unstructured.SetNestedField(obj.Object, img, "spec", "workerImage")
		unstructured.RemoveNestedField(obj.Object, "spec", "ateomImage")
		_ = unstructured.SetNestedField(obj.Object, c.New, "spec", "template", "nodeSelector", fleet.VersionLabel)
		if _, has, _ := unstructured.NestedSlice(obj.Object, "spec", "sandboxClasses"); !has && p.SandboxClass != "" {
			_ = unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"name": p.SandboxClass}}, "spec", "sandboxClasses")
			unstructured.RemoveNestedField(obj.Object, "spec", "sandboxClass")
		}
		plans = append(plans, ClonePlan{From: p, Name: obj.GetName(), Image: img, Object: obj})
	}
	return plans, nil
}

// CreateClone creates the clone, or verifies one that exists: a clone must
// never be edited or overwritten, so a mismatch is reported, not fixed.
func CreateClone(ctx context.Context, dyn dynamic.Interface, rec kube.Recorder, p ClonePlan) error {
	res := dyn.Resource(fleet.WorkerPoolGVR).Namespace(p.From.Namespace)
	_, err := res.Create(ctx, p.Object, metav1.CreateOptions{})
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
		return nil
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
	return nil
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
