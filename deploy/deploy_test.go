package deploy

import "testing"

// The flags' defaults name what the manifests create, and every file parses
// into kinds Apply knows.
func TestManifestsMatchDefaults(t *testing.T) {
	want := map[string]string{NamespaceFile: "Namespace/" + HelperNamespace, PriorityClassFile: "PriorityClass/" + HelperPriorityClass}
	for file, obj := range want {
		objs, err := Objects(file)
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %d objects, %v", file, len(objs), err)
		}
		if got := objs[0].GetKind() + "/" + objs[0].GetName(); got != obj {
			t.Errorf("%s creates %s, the flag default is %s", file, got, obj)
		}
	}
	ns, _ := Objects(NamespaceFile)
	if l := ns[0].GetLabels()["pod-security.kubernetes.io/enforce"]; l != "privileged" {
		t.Errorf("helper namespace enforces Pod Security %q, want privileged", l)
	}
	for _, f := range []string{HelperPolicyFile, RunnerFile, "rbac/tt-operator.yaml", "rbac/ate-operator.yaml", "rbac/rollbook-viewer.yaml"} {
		objs, err := Objects(f)
		if err != nil || len(objs) == 0 {
			t.Fatalf("%s: %d objects, %v", f, len(objs), err)
		}
		for _, o := range objs {
			if _, ok := resources[o.GroupVersionKind().GroupKind()]; !ok {
				t.Errorf("%s: kind %s unknown to Apply", f, o.GetKind())
			}
			if o.GetNamespace() != "" && o.GetKind() == "ConfigMap" && o.GetNamespace() != HelperNamespace {
				t.Errorf("%s: the policy's parameter lives in %s, want %s", f, o.GetNamespace(), HelperNamespace)
			}
		}
	}
}
