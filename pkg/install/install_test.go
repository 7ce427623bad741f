package install_test

import (
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/roll"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Each plugin's install is rendered for the cluster at hand: tt's holds
// nothing of Agent Substrate's namespaces, ate's one operator Role per
// namespace holding a WorkerPool (and none for the example fleet's);
// every object carries the version and its component.
func TestObjectsForTheCluster(t *testing.T) {
	p := tt.DefaultAdminParams()
	p.Images = []string{"ghcr.io/rollbook/node-agent@sha256:" + strings.Repeat("a", 64)}
	for _, tc := range []struct {
		plugin            string
		workers           []string
		want, mustNotHave []string
	}{
		{"tt", nil, []string{"Role/rollbook-system/tt-operator", "Role/kube-system/tt-operator", "ValidatingAdmissionPolicy//rollbook-helpers",
			"ValidatingAdmissionPolicy//rollbook-node-writes", "PriorityClass//rollbook-helper", "ConfigMap/rollbook-system/rollbook-helper-policy"},
			[]string{"ate-system", "ate-workers", "ate-operator"}},
		{"ate", []string{"team-a", "batch"}, []string{"Role/team-a/ate-operator", "Role/batch/ate-operator", "Role/ate-system/ate-operator",
			"ValidatingAdmissionPolicy//rollbook-node-writes", "ConfigMap/rollbook-system/rollbook-helper-policy"},
			[]string{"ate-workers", "ate-batch", "rollbook-helpers", "tt-operator", "kube-system"}},
	} {
		objs, err := install.Objects(install.Options{Plugin: tc.plugin, Version: "v1.2.3", Params: p, WorkerNamespaces: tc.workers})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, o := range objs {
			keys = append(keys, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
			if o.GetLabels()[install.LabelVersion] != "v1.2.3" || o.GetLabels()[install.LabelComponent] == "" {
				t.Errorf("%s %s: labels %v", o.GetKind(), o.GetName(), o.GetLabels())
			}
		}
		all := strings.Join(keys, " ")
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s install lacks %s: %s", tc.plugin, w, all)
			}
		}
		for _, n := range tc.mustNotHave {
			if strings.Contains(all, n) {
				t.Errorf("%s install holds %s: %s", tc.plugin, n, all)
			}
		}
	}
}

func TestATENamesAreATEs(t *testing.T) {
	if install.ATEVersionLabel != fleet.VersionLabel || install.ATEBackupConfigMapPrefix != roll.BackupConfigMapPrefix ||
		install.ATELockName != fleet.LockName {
		t.Error("pkg/install's copies of Agent Substrate's names differ from pkg/ate's")
	}
}
