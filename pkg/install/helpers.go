package install

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/admission"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// HelperPolicyName is the policy that admits, in the helper namespace,
// exactly the pods kubectl tt renders.
const HelperPolicyName = "rollbook-helpers"

// MaxHelperDeadline bounds a helper's activeDeadlineSeconds (its
// --helper-timeout): a day.
const MaxHelperDeadline = 24 * time.Hour

// Where the rendering puts a value that varies; the holes pin it.
var (
	placeholderAccess = kube.NodeLabel{Key: "placeholder.rollbook.dev/key", Value: "value"}
	placeholderModule = "tt-kmd-0000000000000000"
)

// serverOwned are the paths the API server sets itself (or that the
// binding pins: the namespace), never the creator's to choose. The
// priority and preemption policy come from the PriorityClass (its
// admission plugin refuses any other value).
var serverOwned = []string{
	"apiVersion", "kind", "status",
	"metadata.namespace", "metadata.uid", "metadata.resourceVersion", "metadata.generation",
	"metadata.creationTimestamp", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds",
	"metadata.managedFields", "metadata.selfLink",
	"spec.priority", "spec.preemptionPolicy",
}

// podDefaults are what the API server fills in on a pod before admission
// where the renderer leaves a field unset.
var podDefaults = map[string]any{
	"spec.dnsPolicy":          string(corev1.DNSClusterFirst),
	"spec.schedulerName":      corev1.DefaultSchedulerName,
	"spec.securityContext":    map[string]any{},
	"spec.enableServiceLinks": true,
	// The ServiceAccount admission plugin names the default account (its
	// token is not mounted: automountServiceAccountToken is false).
	"spec.serviceAccountName": "default",
	"spec.serviceAccount":     "default",
}

// argvVar is the helper's command as one string, its words joined by
// tt.ArgvSeparator (which no word may hold).
const argvVar = "variables.argv"

func helperVariables() []admissionv1.Variable {
	return []admissionv1.Variable{
		{Name: "task", Expression: "has(object.metadata.labels) && " + admission.Quote(kube.LabelHelper) +
			" in object.metadata.labels && object.metadata.labels[" + admission.Quote(kube.LabelHelper) + "] in " +
			celList(tt.HelperTasks) + " ? object.metadata.labels[" + admission.Quote(kube.LabelHelper) + "] : ''"},
		{Name: "argv", Expression: "size(object.spec.containers) > 0 && has(object.spec.containers[0].command) ? " +
			"object.spec.containers[0].command.join(" + admission.Quote(tt.ArgvSeparator) + ") : ''"},
	}
}

// helperConfig renders the helpers the way a run does, with placeholders
// where the holes decide.
func helperConfig(ns string) tt.HelperConfig {
	return tt.HelperConfig{Image: "placeholder.example/node-agent", Namespace: ns, Timeout: 10 * time.Minute,
		PriorityClass: deploy.HelperPriorityClass, NodeAccess: placeholderAccess}
}

// HelperRules are the helper policy's rules: every pod in the helper
// namespace is one of the task's shapes, whole.
func HelperRules(ns string) ([]admission.Rule, error) {
	byTask := map[string][]admission.Rule{}
	for _, task := range tt.HelperTasks {
		pod := tt.HelperSpecFor(helperConfig(ns), task, "node-0", "key", tt.HelperGrammars[task].Build()).Pod()
		holes, err := helperHoles(ns, task, pod)
		if err != nil {
			return nil, err
		}
		s := admission.Shape{Object: pod, Holes: holes, Defaults: podDefaults, Ignore: serverOwned}
		rs, err := s.Rules("object")
		if err != nil {
			return nil, fmt.Errorf("the %s helper: %w", task, err)
		}
		byTask[task] = rs
	}
	out := []admission.Rule{{
		Expression: "variables.task != ''",
		Message: fmt.Sprintf("a pod in the helper namespace is one of rollbook's helpers: label %s is one of %s",
			kube.LabelHelper, strings.Join(tt.HelperTasks, ", ")),
	}}
	return append(out, mergeByTask(byTask)...), nil
}

// mergeByTask keeps one rule per expression: unconditional where every
// task has it, else guarded by the tasks that do.
func mergeByTask(byTask map[string][]admission.Rule) []admission.Rule {
	type entry struct {
		rule  admission.Rule
		tasks []string
	}
	var order []string
	seen := map[string]*entry{}
	for _, task := range tt.HelperTasks {
		for _, r := range byTask[task] {
			e, ok := seen[r.Expression]
			if !ok {
				e = &entry{rule: r}
				seen[r.Expression] = e
				order = append(order, r.Expression)
			}
			e.tasks = append(e.tasks, task)
		}
	}
	var out []admission.Rule
	for _, expr := range order {
		e := seen[expr]
		if len(e.tasks) == len(tt.HelperTasks) {
			out = append(out, e.rule)
			continue
		}
		sort.Strings(e.tasks)
		guard := "variables.task != " + admission.Quote(e.tasks[0])
		if len(e.tasks) > 1 {
			guard = "!(variables.task in " + celList(e.tasks) + ")"
		}
		out = append(out, admission.Rule{Expression: guard + " || (" + expr + ")",
			Message: "the " + strings.Join(e.tasks, ", ") + " helper: " + e.rule.Message})
	}
	return out
}

// helperHoles pin what varies between the task's helpers: each from the
// runbooks' own rendering (the grammar of its command, its env entries,
// volumes and node affinity), bounded by the admin's parameters.
func helperHoles(ns, task string, pod *corev1.Pod) (map[string]admission.Hole, error) {
	g := tt.HelperGrammars[task]
	affinity, err := affinityHole(ns, task)
	if err != nil {
		return nil, err
	}
	env, err := envHole(task, pod)
	if err != nil {
		return nil, err
	}
	volumes, err := volumesHole(ns, task, pod)
	if err != nil {
		return nil, err
	}
	namePattern := "^" + regexp.QuoteMeta(kube.HelperNamePrefix(task)) + `([a-z0-9]([-a-z0-9.]*[a-z0-9])?-)?[0-9a-f]{10}$`
	return map[string]admission.Hole{
		"metadata.name": func(at string) []admission.Rule {
			return rules(at+".matches("+admission.Quote(namePattern)+")", "the name is "+namePattern+" (kube.HelperName)")
		},
		"metadata.labels": func(at string) []admission.Rule {
			keys := []string{kube.LabelHelper, kube.LabelNode, kube.LabelRun}
			return rules(fmt.Sprintf("has(%s) && size(%s) == %d && %s && %s[%s] == %s", at, at, len(keys), allIn(keys, at),
				at, admission.Quote(kube.LabelHelper), admission.Quote(task)),
				fmt.Sprintf("the labels are exactly %s (=%s), %s and %s", kube.LabelHelper, task, kube.LabelNode, kube.LabelRun))
		},
		"metadata.annotations": func(at string) []admission.Rule {
			keys := []string{kube.AnnHelperKey, kube.AnnSpecHash}
			return rules(fmt.Sprintf("has(%s) && size(%s) == %d && %s", at, at, len(keys), allIn(keys, at)),
				"the annotations are exactly "+strings.Join(keys, " and "))
		},
		"spec.nodeName": func(at string) []admission.Rule {
			return rules("has("+at+") && size("+at+") > 0", "a helper is pinned to its node with spec.nodeName")
		},
		"spec.activeDeadlineSeconds": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("has(%s) && %s >= 1 && %s <= %d", at, at, at, int64(MaxHelperDeadline.Seconds())),
				fmt.Sprintf("activeDeadlineSeconds is between 1 and %d", int64(MaxHelperDeadline.Seconds())))
		},
		"spec.hostPID": func(at string) []admission.Rule {
			return rules("(has("+at+") && "+at+") == "+argvVar+".contains("+admission.Quote(tt.ArgvSeparator+"--force-unload")+")",
				"the host's PID namespace is shared exactly when the helper stops the device's holders (--force-unload)")
		},
		"spec.priorityClassName": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("has(%s) && %s == (%s in params.data ? params.data.%s : %s)", at, at,
				admission.Quote(tt.KeyPriorityClass), tt.KeyPriorityClass, admission.Quote(deploy.HelperPriorityClass)),
				"the PriorityClass is the parameter "+tt.KeyPriorityClass+"'s (default "+deploy.HelperPriorityClass+")")
		},
		"spec.affinity":                   affinity,
		"spec.volumes":                    volumes,
		"spec.containers[0].volumeMounts": func(at string) []admission.Rule { return rules("has("+at+")", "the mounts are set") },
		"spec.containers[0].env":          env,
		"spec.containers[0].image": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("has(%s) && %s in params.data && params.data.%s.split(',').exists(i, i.trim() == %s)",
				at, admission.Quote(tt.KeyImages), tt.KeyImages, at),
				"the image is one of the parameter "+tt.KeyImages+"'s (the released node-agent image, by digest)")
		},
		"spec.containers[0].command": commandHole(g),
	}, nil
}

// paramIs says the admin's parameter key is set and equals the CEL value.
func paramIs(key, value string) string {
	return fmt.Sprintf("%s in params.data && params.data.%s == %s", admission.Quote(key), key, value)
}

func rules(expr, msg string) []admission.Rule {
	return []admission.Rule{{Expression: expr, Message: msg}}
}

func celList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = admission.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// allIn says every key is in the map at.
func allIn(keys []string, at string) string {
	conds := make([]string, len(keys))
	for i, k := range keys {
		conds[i] = admission.Quote(k) + " in " + at
	}
	return strings.Join(conds, " && ")
}

// commandHole admits exactly the commands of g: the words, joined, match
// its pattern; each value the admin bounds is in the admin's list.
func commandHole(g tt.ArgvGrammar) admission.Hole {
	return func(at string) []admission.Rule {
		sep := admission.Quote(tt.ArgvSeparator)
		out := rules(fmt.Sprintf("has(%s) && %s.all(w, !w.contains(%s)) && %s.matches(%s)", at, at, sep, argvVar,
			admission.Quote(g.Pattern())),
			fmt.Sprintf("the command is `%s node-agent %s` with only its own flags, in order (tt.HelperGrammars)", tt.AgentPath, g.Task))
		for _, f := range g.Flags() {
			if f.Param != "" {
				out = append(out, paramFlagRule(g, f))
			}
		}
		if pin := pinFlag(g.Task); pin != "" {
			out = append(out, admission.Rule{
				Expression: fmt.Sprintf("(%s) || %s.contains(%s)", paramIs(tt.KeyAllowUnpinned, "'true'"), argvVar,
					admission.Quote(tt.ArgvSeparator+pin+tt.ArgvSeparator)),
				Message: fmt.Sprintf("the %s helper pins what it installs with %s (the parameter %s lifts this)", g.Task, pin,
					tt.KeyAllowUnpinned),
			})
		}
		return out
	}
}

// pinFlag is the flag that pins what a task installs to exact bytes.
func pinFlag(task string) string {
	switch task {
	case "kmd", "kmd-build":
		return "--commit"
	case "flash":
		return "--bundle-sha256"
	}
	return ""
}

// flagValue is the CEL string "\n<flag>\n<value>" of the command (empty
// when the flag is not there).
func flagValue(flag string) string {
	return argvVar + ".find(" + admission.Quote(tt.ArgvSeparator+flag+tt.ArgvSeparator+"[^"+tt.ArgvSeparator+"]*") + ")"
}

func paramFlagRule(g tt.ArgvGrammar, f tt.ArgvFlag) admission.Rule {
	prefix := admission.Quote(tt.ArgvSeparator + f.Name + tt.ArgvSeparator)
	has := argvVar + ".contains(" + prefix + ")"
	var ok, msg string
	if f.Prefix {
		// A prefix ends in "/" (Params.Validate), and the rest of the URL
		// may not climb out of it.
		ok = fmt.Sprintf("params.data.%s.split(',').exists(u, u.trim().endsWith('/') && %s.startsWith(%s + u.trim())) && "+
			"!%s.contains('..') && !%s.contains('%%')", f.Param, flagValue(f.Name), prefix, flagValue(f.Name), flagValue(f.Name))
		msg = fmt.Sprintf("the %s helper's %s starts with one of the parameter %s's prefixes", g.Task, f.Name, f.Param)
		if g.Task == "flash" || g.Task == "probe" {
			// Or the bundle's exact bytes are the admin's choice (the
			// firmware probe reads the bundle the flash will use).
			ok = "(" + ok + ") || " + fmt.Sprintf("(%s in params.data && "+
				"params.data.%s.split(',').exists(d, d.trim() != '' && %s == %s + d.trim()))",
				admission.Quote(tt.KeyBundleDigests), tt.KeyBundleDigests, flagValue("--bundle-sha256"),
				admission.Quote(tt.ArgvSeparator+"--bundle-sha256"+tt.ArgvSeparator))
			msg += ", or its --bundle-sha256 is one of the parameter " + tt.KeyBundleDigests + "'s"
		}
	} else {
		ok = fmt.Sprintf("params.data.%s.split(',').exists(u, u.trim() != '' && %s == %s + u.trim())", f.Param, flagValue(f.Name), prefix)
		msg = fmt.Sprintf("the %s helper's %s is one of the parameter %s's", g.Task, f.Name, f.Param)
	}
	return admission.Rule{
		Expression: fmt.Sprintf("!%s || (%s in params.data && (%s))", has, admission.Quote(f.Param), ok),
		Message:    msg,
	}
}

// affinityHole: the helper requires the admin's node label, and the
// control-plane label absent unless the admin allows control-plane nodes.
func affinityHole(ns, task string) (admission.Hole, error) {
	render := func(onCP bool) *corev1.Affinity {
		h := helperConfig(ns)
		h.OnControlPlane = onCP
		return tt.HelperSpecFor(h, task, "node-0", "key", tt.HelperGrammars[task].Build()).Pod().Spec.Affinity
	}
	const term = "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
	holes := map[string]admission.Hole{
		term + ".key": func(at string) []admission.Rule {
			return rules(paramIs(tt.KeyNodeLabelKey, at), "")
		},
		term + ".values": func(at string) []admission.Rule {
			return rules(fmt.Sprintf("%s in params.data && %s == [params.data.%s]", admission.Quote(tt.KeyNodeLabelValue), at,
				tt.KeyNodeLabelValue), "")
		},
	}
	offCP, err := admission.Shape{Object: render(false), Holes: holes}.Condition("a")
	if err != nil {
		return nil, err
	}
	anyNode, err := admission.Shape{Object: render(true), Holes: holes}.Condition("a")
	if err != nil {
		return nil, err
	}
	return func(at string) []admission.Rule {
		return rules(fmt.Sprintf("has(%s) && [%s].all(a, (%s) || (%s in params.data && params.data.%s == 'true' && (%s)))",
			at, at, offCP, admission.Quote(tt.KeyAllowControlPlane), tt.KeyAllowControlPlane, anyNode),
			fmt.Sprintf("a helper requires its node to carry the parameters' %s=%s, and %s absent unless %s is \"true\"",
				tt.KeyNodeLabelKey, tt.KeyNodeLabelValue, kube.LabelControlPlane, tt.KeyAllowControlPlane))
	}, nil
}

// envHole: NODE_NAME first, then only the proxy variables (network tasks;
// no credentials in a value) and a presigned bundle URL's Secret (flash).
func envHole(task string, pod *corev1.Pod) (admission.Hole, error) {
	first, err := admission.Shape{Object: pod.Spec.Containers[0].Env[0]}.Condition("e")
	if err != nil {
		return nil, err
	}
	alts := []string{first}
	max := 1
	if tt.ReachesNetwork(task) {
		proxy, err := admission.Shape{Object: corev1.EnvVar{Name: "HTTPS_PROXY", Value: "x"}, Holes: map[string]admission.Hole{
			"name": func(at string) []admission.Rule { return rules(at+" in "+celList(tt.ProxyEnvNames), "") },
			"value": func(at string) []admission.Rule {
				// A proxy's credentials would be readable by every viewer of the pod.
				return rules(fmt.Sprintf("has(%s) && !%s.contains('@') && !%s.contains('\\n')", at, at, at), "")
			},
		}}.Condition("e")
		if err != nil {
			return nil, err
		}
		alts = append(alts, proxy)
		max += len(tt.ProxyEnvNames)
	}
	if task == "flash" {
		bundle, err := admission.Shape{Object: tt.BundleURLEnvVar()}.Condition("e")
		if err != nil {
			return nil, err
		}
		alts = append(alts, bundle)
		max++
	}
	return func(at string) []admission.Rule {
		return rules(fmt.Sprintf("has(%s) && size(%s) >= 1 && size(%s) <= %d && [%s[0]].all(e, %s) && %s.all(e, (%s)) && "+
			"%s.all(e, %s.exists_one(f, f.name == e.name))",
			at, at, at, max, at, first, at, strings.Join(alts, ") || ("), at, at),
			"the env is NODE_NAME from spec.nodeName, then only the proxy variables (literal, without credentials) for helpers that "+
				"reach the network, and for flash the presigned bundle URL from Secret "+tt.BundleSecretName)
	}, nil
}

// volumesHole: the host's / (as the task mounts it) first, then for kmd
// the shared module's ConfigMap; each volume with its one mount, in the
// same order. No Secret: the module-signing key stays with kubectl tt.
func volumesHole(ns, task string, pod *corev1.Pod) (admission.Hole, error) {
	type pair struct{ vol, mount string }
	cond := func(o any, holes map[string]admission.Hole, root string) (string, error) {
		return admission.Shape{Object: o, Holes: holes}.Condition(root)
	}
	var host pair
	var err error
	if host.vol, err = cond(pod.Spec.Volumes[0], nil, "v"); err != nil {
		return nil, err
	}
	if host.mount, err = cond(pod.Spec.Containers[0].VolumeMounts[0], nil, "m"); err != nil {
		return nil, err
	}
	var extras []pair
	if task == "kmd" {
		mod := tt.KMDHelperSpec(&tt.KMDConfig{Version: "0.0.0", Helper: helperConfig(ns)}, "node-0", "",
			&tt.VouchedModule{ConfigMap: placeholderModule, SHA256: strings.Repeat("0", 64)}).Pod()
		var p pair
		if p.vol, err = cond(mod.Spec.Volumes[1], map[string]admission.Hole{"configMap.name": func(at string) []admission.Rule {
			return rules(at+".matches("+admission.Quote(tt.SharedModuleNamePattern)+")", "")
		}}, "v"); err != nil {
			return nil, err
		}
		if p.mount, err = cond(mod.Spec.Containers[0].VolumeMounts[1], nil, "m"); err != nil {
			return nil, err
		}
		extras = append(extras, p)
	}
	return func(at string) []admission.Rule {
		mounts := strings.TrimSuffix(at, ".spec.volumes") + ".spec.containers[0].volumeMounts"
		at0 := func(c, root, x string) string { return fmt.Sprintf("[%s].all(%s, %s)", x, root, c) }
		conds := []string{
			fmt.Sprintf("has(%s) && has(%s) && size(%s) == size(%s) && size(%s) >= 1 && size(%s) <= %d", at, mounts, at, mounts, at, at,
				1+len(extras)),
			at0(host.vol, "v", at+"[0]"), at0(host.mount, "m", mounts+"[0]"),
		}
		for i := 1; i <= len(extras); i++ {
			var alts []string
			for _, p := range extras {
				vol := at0(p.vol, "v", fmt.Sprintf("%s[%d]", at, i))
				alts = append(alts, "("+vol+" && "+at0(p.mount, "m", fmt.Sprintf("%s[%d]", mounts, i))+")")
			}
			conds = append(conds, fmt.Sprintf("(size(%s) <= %d || %s)", at, i, strings.Join(alts, " || ")))
		}
		return rules(strings.Join(conds, " && "),
			"a helper mounts the host's / at /host as its task does (read-only for the probe); a kmd helper also at most the shared "+
				"module (ConfigMap tt-kmd-…, read-only at "+tt.SharedModuleMount+"); no Secret")
	}, nil
}

// HelperPolicy is the ValidatingAdmissionPolicy of the helper namespace.
func HelperPolicy(ns string) (*admissionv1.ValidatingAdmissionPolicy, error) {
	rs, err := HelperRules(ns)
	if err != nil {
		return nil, err
	}
	fail := admissionv1.Fail
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: HelperPolicyName, Labels: partOf()},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			ParamKind:     &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
						Resources: []string{"pods", "pods/ephemeralcontainers"}},
				}}}},
			Variables:   helperVariables(),
			Validations: validations(rs),
		},
	}, nil
}

func validations(rs []admission.Rule) []admissionv1.Validation {
	out := make([]admissionv1.Validation, len(rs))
	forbidden := metav1.StatusReasonForbidden
	for i, r := range rs {
		out[i] = admissionv1.Validation{Expression: r.Expression, Message: r.Message, Reason: &forbidden}
	}
	return out
}

// HelperPolicyBinding binds the helper policy to the helper namespace
// with the admin's parameters; without them every pod there is refused.
func HelperPolicyBinding(ns string) *admissionv1.ValidatingAdmissionPolicyBinding {
	deny := admissionv1.DenyAction
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: HelperPolicyName, Labels: partOf()},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        HelperPolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			ParamRef:          &admissionv1.ParamRef{Name: tt.AdminParamsName, Namespace: ns, ParameterNotFoundAction: &deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
}
