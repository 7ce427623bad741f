//go:build e2e

package security

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/tt"
)

// What the operator roles may create beside helper pods carries
// rollbook's names and types only: RBAC cannot pin a create's name.
func TestOperatorObjects(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, 5*time.Minute)
	params := testParams()
	as := setup(t, ctx, c, params)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	cm := func(ns, name string) error {
		_, err := as.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, dry)
		return err
	}
	secret := func(ns, name string, typ corev1.SecretType, data map[string]string) error {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: typ, StringData: data}
		if typ == corev1.SecretTypeServiceAccountToken {
			s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
		}
		_, err := as.CoreV1().Secrets(ns).Create(ctx, s, dry)
		return err
	}
	lease := func(ns, name string) error {
		_, err := as.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, dry)
		return err
	}
	url := params.BundleURLs[0] + "v19.0.0/fw_pack-19.0.0.fwbundle?X-Amz-Signature=0badc0de%2F"
	for what, err := range map[string]error{
		"the run history":            cm("kube-system", journal.Name("tt")),
		"a shared module":            cm(helperNS, tt.SharedModuleName(tt.ModuleKey{Kernel: "6.1.0", Version: "2.8.0"}, "", "")),
		"the Lease":                  lease("kube-system", tt.LockName),
		"the ate roll's own history": cm("kube-system", journal.Name("ate")),
	} {
		if err != nil {
			t.Errorf("the operator could not create %s: %v", what, err)
		}
	}
	// The admin's parameters (admission judges a create before the name
	// clash) are never the operator's to write, there or missing.
	for what, err := range map[string]error{
		"the admin's policy parameters": cm(helperNS, tt.AdminParamsName),
		"a ConfigMap of another name":   cm("kube-system", "kube-proxy"),
		"a module ConfigMap outside":    cm("kube-system", tt.SharedModuleName(tt.ModuleKey{Kernel: "6.1.0", Version: "2.8.0"}, "", "")),
		"another Lease":                 lease("kube-system", "kube-controller-manager"),
	} {
		if !refusedBy(err, install.OperatorObjectsPolicyName) {
			t.Errorf("the operator created %s: %v", what, err)
		}
	}
	// Secrets: every namespace, name, type and key set the operator's RBAC
	// lets it create, against the two the runbooks write.
	allowed := map[[2]string]string{{helperNS, tt.BundleSecretName}: tt.BundleSecretKey,
		{deploy.RunnerNamespace, deploy.RunnerNotifySecret}: deploy.RunnerNotifyKey}
	for _, ns := range []string{helperNS, deploy.RunnerNamespace} {
		for _, name := range []string{tt.BundleSecretName, deploy.RunnerNotifySecret, "token", "other"} {
			for _, typ := range []corev1.SecretType{corev1.SecretTypeOpaque, corev1.SecretTypeServiceAccountToken, "example.com/any"} {
				for _, keys := range [][]string{{"url"}, {"url", "x"}, {"x"}, {}} {
					data := map[string]string{}
					for _, k := range keys {
						data[k] = url
					}
					err := secret(ns, name, typ, data)
					key, ok := allowed[[2]string{ns, name}]
					want := ok && typ == corev1.SecretTypeOpaque && len(keys) == 1 && keys[0] == key
					what := fmt.Sprintf("Secret %s/%s of type %s with keys %v", ns, name, typ, keys)
					switch {
					case want && err != nil:
						t.Errorf("the operator could not create %s: %v", what, err)
					case !want && !refusedBy(err, install.OperatorObjectsPolicyName):
						t.Errorf("the operator created %s: %v", what, err)
					}
				}
			}
		}
	}
}
