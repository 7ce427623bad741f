package substrate

import (
	"context"
	_ "embed"
	"fmt"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"
)

//go:embed workerpool.crd.yaml
var workerPoolCRD []byte

// WorkerPoolCRD returns the WorkerPool CRD the sim installs.
func WorkerPoolCRD() (*apiextv1.CustomResourceDefinition, error) {
	crd := &apiextv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(workerPoolCRD, crd); err != nil {
		return nil, fmt.Errorf("workerpool CRD: %w", err)
	}
	return crd, nil
}

// OldWorkerPoolCRD is the WorkerPool CRD of a release before
// spec.sandboxClasses (reference §5.1: it replaced the sandboxClass enum):
// what the cluster serves until step 1 applies the new release's CRDs. A
// field a structural schema does not declare is pruned on every write.
func OldWorkerPoolCRD() (*apiextv1.CustomResourceDefinition, error) {
	crd, err := WorkerPoolCRD()
	if err != nil {
		return nil, err
	}
	for i := range crd.Spec.Versions {
		if s := crd.Spec.Versions[i].Schema; s != nil && s.OpenAPIV3Schema != nil {
			spec := s.OpenAPIV3Schema.Properties["spec"]
			delete(spec.Properties, "sandboxClasses")
			s.OpenAPIV3Schema.Properties["spec"] = spec
		}
	}
	return crd, nil
}

// InstallCRD creates (or updates) the WorkerPool CRD — the old release's
// when old — and waits, by watch, until it is Established. With old false
// it is runbook step 1 (apply the new release's CRDs).
func InstallCRD(ctx context.Context, cfg *rest.Config, old bool) error {
	get := WorkerPoolCRD
	if old {
		get = OldWorkerPoolCRD
	}
	crd, err := get()
	if err != nil {
		return err
	}
	ac, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := ac.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, gerr := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		crd.ResourceVersion = cur.ResourceVersion
		_, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update CRD %s: %w", crd.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("create CRD %s: %w", crd.Name, err)
	}
	sel := fields.OneTermEqualSelector("metadata.name", crd.Name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return crds.List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return crds.Watch(ctx, o)
		},
	}
	_, err = watchtools.UntilWithSync(ctx, lw, &apiextv1.CustomResourceDefinition{}, nil, func(ev watch.Event) (bool, error) {
		c, ok := ev.Object.(*apiextv1.CustomResourceDefinition)
		if !ok {
			return false, nil
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established: %w", crd.Name, err)
	}
	return nil
}
