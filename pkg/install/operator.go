package install

import (
	"fmt"
	"reflect"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/admission"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// Agent Substrate's names the policies use, kept here so that kubectl-tt,
// which renders them too, does not link the ate runbooks (held equal to
// pkg/ate's by a test).
const (
	ATEVersionLabel          = "ate.dev/substrate-version"
	ATEBackupConfigMapPrefix = "workerpool-backup-"
	ATELockName              = "rollbook-ate"
)

// The operator roles carry a marker permission that nothing checks but
// rollbook's policies: a request by someone holding it (and not the
// "unlimited" one a cluster admin's wildcard grants) is limited to what
// rollbook itself writes. RBAC cannot say "patch only these labels" or
// "create only ConfigMaps of this name"; these policies can.
const (
	MarkerGroup    = "rollbook.dev"
	MarkerResource = "operator-writes"
	MarkerVerb     = "limited"
	UnlimitedVerb  = "unlimited"

	NodeWritesPolicyName      = "rollbook-node-writes"
	OperatorObjectsPolicyName = "rollbook-operator-objects"
)

// operatorOnly matches requests of the operator roles' holders.
func operatorOnly() []admissionv1.MatchCondition {
	check := func(verb string) string {
		return fmt.Sprintf("authorizer.group(%s).resource(%s).check(%s).allowed()", admission.Quote(MarkerGroup),
			admission.Quote(MarkerResource), admission.Quote(verb))
	}
	return []admissionv1.MatchCondition{{Name: "rollbook-operator", Expression: check(MarkerVerb) + " && !" + check(UnlimitedVerb)}}
}

// WritableNodeLabels are the node labels the operator roles may set or
// remove: rollbook's own, the Tenstorrent operator's version labels that
// kubectl tt keeps, and Agent Substrate's version label that kubectl ate
// flips; the deploy gates come from the parameters. Never the label the
// helper guard reads, nor the control-plane role.
var WritableNodeLabels = []string{tt.LabelKMDVersion, tt.LabelInstallMode, tt.LabelSMIVersion, tt.LabelFirmware, ATEVersionLabel}

// writableLabel is the CEL condition that label key k is the operator's.
func writableLabel(k string) string {
	return fmt.Sprintf("%s.startsWith(%s) || %s in %s || (%s in params.data && params.data.%s.split(',').exists(g, g.trim() == %s))",
		k, admission.Quote(kube.AnnotationPrefix), k, celList(WritableNodeLabels), admission.Quote(tt.KeyGateLabels), tt.KeyGateLabels, k)
}

// changedOnly is the rule that every key of map field (labels or
// annotations) the request adds, changes or removes passes writable.
func changedOnly(field string, writable func(string) string, msg string) admission.Rule {
	nw, old := "object.metadata."+field, "oldObject.metadata."+field
	return admission.Rule{
		Expression: fmt.Sprintf("(!has(%s) || %s.all(k, (has(%s) && k in %s && %s[k] == %s[k]) || %s)) && "+
			"(!has(%s) || %s.all(k, (has(%s) && k in %s) || %s))",
			nw, nw, old, old, old, nw, writable("k"), old, old, nw, nw, writable("k")),
		Message: msg,
	}
}

// unchanged is the rule that fields of at (e.g. "spec") other than except
// are as they were.
func unchanged(t reflect.Type, at string, except ...string) admission.Rule {
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	var conds, names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || skip[name] {
			continue
		}
		nw, old := "object."+at+"."+name, "oldObject."+at+"."+name
		conds = append(conds, fmt.Sprintf("has(%s) == has(%s) && (!has(%s) || %s == %s)", nw, old, nw, nw, old))
		names = append(names, name)
	}
	return admission.Rule{Expression: strings.Join(conds, " && "),
		Message: fmt.Sprintf("%s: %s are not the operator's to change", at, strings.Join(names, ", "))}
}

// NodeWritesPolicy limits the operator roles' node writes to the cordon
// (spec.unschedulable), rollbook's own labels and annotations, the
// version labels the runbooks move, and the admin's deploy gates.
func NodeWritesPolicy() (*admissionv1.ValidatingAdmissionPolicy, error) {
	rs := []admission.Rule{
		changedOnly("labels", writableLabel, "an operator role changes only rollbook's node labels ("+kube.AnnotationPrefix+
			"…, "+strings.Join(WritableNodeLabels, ", ")+") and the parameter "+tt.KeyGateLabels+"'s deploy gates: not the label "+
			"that lets helpers run on a node, nor the control-plane role"),
		changedOnly("annotations", func(k string) string { return k + ".startsWith(" + admission.Quote(kube.AnnotationPrefix) + ")" },
			"an operator role changes only rollbook's node annotations ("+kube.AnnotationPrefix+"…)"),
		unchanged(reflect.TypeFor[corev1.NodeSpec](), "spec", "unschedulable"),
		unchanged(reflect.TypeFor[metav1.ObjectMeta](), "metadata", "labels", "annotations", "resourceVersion", "managedFields",
			"generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "uid", "selfLink", "name",
			"namespace", "generateName"),
	}
	return policy(NodeWritesPolicyName, operatorOnly(), []admissionv1.NamedRuleWithOperations{
		rule("", "nodes", admissionv1.Update),
	}, nil, rs), nil
}

// NodeWritesPolicyBinding applies the node policy with the admin's
// parameters (the gate labels).
func NodeWritesPolicyBinding(ns string) *admissionv1.ValidatingAdmissionPolicyBinding {
	return binding(NodeWritesPolicyName, ns, nil)
}

// OperatorObjectsPolicy pins what the operator roles create beside the
// helper pods to rollbook's own names and types: RBAC can limit get and
// update by name, not create.
func OperatorObjectsPolicy(helperNS string) (*admissionv1.ValidatingAdmissionPolicy, error) {
	name := "object.metadata.name"
	histories := celList([]string{journal.Name("tt"), journal.Name("ate")})
	rs := []admission.Rule{
		{Expression: fmt.Sprintf("request.resource.resource != 'configmaps' || %s in %s || %s.startsWith(%s) || "+
			"(request.namespace == %s && %s.matches(%s))", name, histories, name, admission.Quote(ATEBackupConfigMapPrefix),
			admission.Quote(helperNS), name, admission.Quote(tt.SharedModuleNamePattern)),
			Message: "an operator role writes only rollbook's ConfigMaps: the run histories " + histories + ", pool backups " +
				ATEBackupConfigMapPrefix + "…, and in the helper namespace the shared modules tt-kmd-…"},
		{Expression: fmt.Sprintf("request.resource.resource != 'leases' || %s in %s", name,
			celList([]string{tt.LockName, ATELockName})),
			Message: "an operator role writes only rollbook's Leases, " + tt.LockName + " and " + ATELockName},
		// Its URL is checked where it is used: the flash helper's
		// --bundle-url-base (the policy) and the agent (the URL is that base
		// plus a query); CEL cannot decode a Secret's base64 data.
		{Expression: fmt.Sprintf("request.resource.resource != 'secrets' || (has(object.type) && object.type == 'Opaque' && "+
			"has(object.data) && size(object.data) == 1 && ((request.namespace == %s && %s == %s && %s in object.data) || "+
			"(request.namespace == %s && %s == %s && %s in object.data)))",
			admission.Quote(helperNS), name, admission.Quote(tt.BundleSecretName), admission.Quote(tt.BundleSecretKey),
			admission.Quote(deploy.RunnerNamespace), name, admission.Quote(deploy.RunnerNotifySecret),
			admission.Quote(deploy.RunnerNotifyKey)),
			Message: "an operator role writes only the Secrets " + tt.BundleSecretName + " in the helper namespace and " +
				deploy.RunnerNotifySecret + " in " + deploy.RunnerNamespace + ": type Opaque, its one key " + tt.BundleSecretKey},
	}
	return policy(OperatorObjectsPolicyName, operatorOnly(), []admissionv1.NamedRuleWithOperations{
		rule("", "configmaps", admissionv1.Create, admissionv1.Update),
		rule("", "secrets", admissionv1.Create, admissionv1.Update),
		rule("coordination.k8s.io", "leases", admissionv1.Create, admissionv1.Update),
	}, nil, rs), nil
}

// OperatorObjectsPolicyBinding applies the object policy everywhere, with
// the admin's parameters (the bundle prefixes).
func OperatorObjectsPolicyBinding(ns string) *admissionv1.ValidatingAdmissionPolicyBinding {
	return binding(OperatorObjectsPolicyName, ns, nil)
}

func rule(group, resource string, ops ...admissionv1.OperationType) admissionv1.NamedRuleWithOperations {
	return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}},
	}}
}

func policy(name string, match []admissionv1.MatchCondition, rules []admissionv1.NamedRuleWithOperations,
	vars []admissionv1.Variable, rs []admission.Rule) *admissionv1.ValidatingAdmissionPolicy {
	fail := admissionv1.Fail
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: partOf()},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fail,
			ParamKind:        &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: rules},
			MatchConditions:  match,
			Variables:        vars,
			Validations:      validations(rs),
		},
	}
}

func binding(name, ns string, match *admissionv1.MatchResources) *admissionv1.ValidatingAdmissionPolicyBinding {
	deny := admissionv1.DenyAction
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: partOf()},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			ParamRef:          &admissionv1.ParamRef{Name: tt.AdminParamsName, Namespace: ns, ParameterNotFoundAction: &deny},
			MatchResources:    match,
		},
	}
}
