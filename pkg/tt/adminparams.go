package tt

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// AdminParamsName is the ConfigMap of the cluster admin's choices every rollbook
// admission policy reads (paramRef): which image, repositories, bundles and nodes
// helpers may use. It lives in the helper namespace, where no operator
// role may write it (the object policy refuses its name).
const AdminParamsName = "rollbook-helper-policy"

// Keys of AdminParamsName's data. Lists are comma-separated.
const (
	KeyImages            = "images"
	KeyAllowControlPlane = "allowControlPlane"
	KeyNodeLabelKey      = "helperNodeLabelKey"
	KeyNodeLabelValue    = "helperNodeLabelValue"
	KeyKMDGitURLs        = ParamKMDGitURLs
	KeyBundleURLs        = ParamBundleURLs
	KeyBundleDigests     = ParamBundleDigests
	KeyAllowUnpinned     = "allowUnpinned"
	KeyPriorityClass     = "priorityClass"
	// KeyGateLabels are the deploy-gate label keys the operator roles may
	// write on nodes (kubectl tt --deploy-gate), besides rollbook's own.
	KeyGateLabels = "gateLabels"
)

// AdminParams are the admin's choices, as AdminParamsName holds them.
type AdminParams struct {
	Images            []string
	AllowControlPlane bool
	// NodeLabel is the label a node must carry for helpers to run there:
	// positive, and one the operator roles cannot write.
	NodeLabel     kube.NodeLabel
	KMDGitURLs    []string
	BundleURLs    []string // prefixes, each ending in "/"
	BundleDigests []string
	// AllowUnpinned admits a kmd helper without --commit and a flash
	// helper without --bundle-sha256.
	AllowUnpinned bool
	PriorityClass string
	GateLabels    []string
}

// DefaultAdminParams are what deploy/ ships: upstream sources only, nodes with
// a Tenstorrent card as Node Feature Discovery labels them.
func DefaultAdminParams() AdminParams {
	return AdminParams{
		AllowControlPlane: false,
		NodeLabel:         DefaultHelperNodeLabel,
		KMDGitURLs:        []string{nodeagent.DefaultKMDGitURL},
		BundleURLs:        []string{nodeagent.DefaultBundleURLPrefix},
		PriorityClass:     deploy.HelperPriorityClass,
		GateLabels:        []string{DefaultDeployGate},
	}
}

// Data is p as AdminParamsName's data.
func (p AdminParams) Data() map[string]string {
	return map[string]string{
		KeyImages:            strings.Join(p.Images, ","),
		KeyAllowControlPlane: fmt.Sprint(p.AllowControlPlane),
		KeyNodeLabelKey:      p.NodeLabel.Key,
		KeyNodeLabelValue:    p.NodeLabel.Value,
		KeyKMDGitURLs:        strings.Join(p.KMDGitURLs, ","),
		KeyBundleURLs:        strings.Join(p.BundleURLs, ","),
		KeyBundleDigests:     strings.Join(p.BundleDigests, ","),
		KeyAllowUnpinned:     fmt.Sprint(p.AllowUnpinned),
		KeyPriorityClass:     p.PriorityClass,
		KeyGateLabels:        strings.Join(p.GateLabels, ","),
	}
}

// AdminParamsFrom reads AdminParamsName's data; a key that is missing keeps
// its default.
func AdminParamsFrom(data map[string]string) (AdminParams, error) {
	p := DefaultAdminParams()
	list := func(k string, into *[]string) {
		if v, ok := data[k]; ok {
			*into = splitList(v)
		}
	}
	list(KeyImages, &p.Images)
	list(KeyKMDGitURLs, &p.KMDGitURLs)
	list(KeyBundleURLs, &p.BundleURLs)
	list(KeyBundleDigests, &p.BundleDigests)
	list(KeyGateLabels, &p.GateLabels)
	p.AllowControlPlane = data[KeyAllowControlPlane] == "true"
	p.AllowUnpinned = data[KeyAllowUnpinned] == "true"
	if v, ok := data[KeyNodeLabelKey]; ok {
		p.NodeLabel = kube.NodeLabel{Key: v, Value: data[KeyNodeLabelValue]}
	}
	if v := data[KeyPriorityClass]; v != "" {
		p.PriorityClass = v
	}
	return p, p.Validate()
}

// Validate refuses choices the policies could not hold to.
func (p AdminParams) Validate() error {
	if errs := validation.IsQualifiedName(p.NodeLabel.Key); len(errs) > 0 {
		return fmt.Errorf("%s %q: %s (helpers run only on nodes carrying a label the admin names)", KeyNodeLabelKey,
			p.NodeLabel.Key, errs[0])
	}
	if errs := validation.IsValidLabelValue(p.NodeLabel.Value); len(errs) > 0 || p.NodeLabel.Value == "" {
		return fmt.Errorf("%s %q: a non-empty label value", KeyNodeLabelValue, p.NodeLabel.Value)
	}
	for _, u := range p.KMDGitURLs {
		if err := nodeagent.ValidateSourceURL(u); err != nil {
			return fmt.Errorf("%s: %v", KeyKMDGitURLs, err)
		}
	}
	for _, u := range p.BundleURLs {
		if err := nodeagent.ValidateSourceURL(u); err != nil {
			return fmt.Errorf("%s: %v", KeyBundleURLs, err)
		}
		if !strings.HasSuffix(u, "/") {
			// A prefix without its slash admits a sibling: …/tenstorrent
			// would admit …/tenstorrent-evil/.
			return fmt.Errorf("%s: %q must end with /", KeyBundleURLs, u)
		}
	}
	for _, g := range p.GateLabels {
		if errs := validation.IsQualifiedName(g); len(errs) > 0 {
			return fmt.Errorf("%s %q: %s", KeyGateLabels, g, errs[0])
		}
	}
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ReadAdminParams reads the admin's choices from the cluster. found is false
// when the ConfigMap is not there (no policy installed): the defaults
// apply, and nothing enforces them.
func ReadAdminParams(ctx context.Context, cs kubernetes.Interface, helperNS string) (p AdminParams, found bool, err error) {
	cm, err := cs.CoreV1().ConfigMaps(helperNS).Get(ctx, AdminParamsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return DefaultAdminParams(), false, nil
	case err != nil:
		return AdminParams{}, false, fmt.Errorf("reading the admin's helper policy (ConfigMap %s/%s): %w", helperNS, AdminParamsName, err)
	}
	p, err = AdminParamsFrom(cm.Data)
	if err != nil {
		return AdminParams{}, true, fmt.Errorf("ConfigMap %s/%s: %w", helperNS, AdminParamsName, err)
	}
	return p, true, nil
}

// AdminParamsConfigMap is p as the ConfigMap the policies read.
func AdminParamsConfigMap(ns string, p AdminParams) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: AdminParamsName, Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/part-of": "rollbook"}},
		Data: p.Data(),
	}
}
