package tt

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
)

// Selection chooses the nodes a runbook acts on.
type Selection struct {
	// Selector is ANDed with the Tenstorrent PCI label unless AllNodes.
	Selector string
	// Nodes, when set, names the nodes; each must exist and match.
	Nodes []string
	// AnyNode drops the requirement for the NFD Tenstorrent PCI label.
	AnyNode bool
	// Access is the label the cluster admin requires of a node before a
	// helper runs there (AdminParams.NodeLabel); a selected node without
	// it is refused before anything changes. Empty: not checked.
	Access kube.NodeLabel
	// AcknowledgedFailedFlash names nodes whose failed flash
	// (AnnFlashNeedsPerson) a person has dealt with; any other selected
	// node with one is refused before anything changes.
	AcknowledgedFailedFlash []string
	// HelperNamespace is where the flash helpers run: a failed flash that
	// needs a person whose record never reached its node is found by its
	// helper there and recorded again. Empty: not looked for.
	HelperNamespace string
	// BudgetLabels are the label keys a flag budgets by
	// (--max-unavailable-per): a key no selected node carries would limit
	// nothing, silently, so it is refused before anything changes.
	BudgetLabels []string
}

// Skipped is a node the runbook will not touch, and why.
type Skipped struct {
	Node, Why string
}

// selector builds the label selector for the selection.
func (s Selection) selector() (labels.Selector, error) {
	sel, err := labels.Parse(s.Selector)
	if err != nil {
		return nil, fmt.Errorf("--selector %q: %v", s.Selector, err)
	}
	if !s.AnyNode {
		req, err := labels.NewRequirement(LabelPCIPresent, "=", []string{"true"})
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*req)
	}
	return sel, nil
}

// Validate checks the selection before any API call.
func (s Selection) Validate() error {
	if _, err := s.selector(); err != nil {
		return err
	}
	return s.validateAcknowledged()
}

// AccessError names selected nodes the cluster admin does not let helpers
// run on: the kubelet would refuse their helpers after the cordon.
type AccessError struct {
	Nodes  []string
	Access kube.NodeLabel
}

func (e *AccessError) Error() string {
	return fmt.Sprintf("the cluster admin lets rollbook's helpers run only on nodes labelled %s (ConfigMap %s, %s and %s), "+
		"and %d selected node(s) are not: %s; nothing was changed. Ask the admin to label them (kubectl label node NODE %s), "+
		"or leave them out of the selection", e.Access, AdminParamsName, KeyNodeLabelKey, KeyNodeLabelValue, len(e.Nodes),
		strings.Join(e.Nodes, ", "), e.Access)
}

// checkAccess is an *AccessError naming the nodes (but those skip excludes)
// that lack the admin's label.
func (s Selection) checkAccess(nodes []corev1.Node, skip func(*corev1.Node) string) error {
	var denied []string
	for i := range nodes {
		if a := s.Access; a.Key != "" && nodes[i].Labels[a.Key] != a.Value && (skip == nil || skip(&nodes[i]) == "") {
			denied = append(denied, nodes[i].Name)
		}
	}
	if len(denied) > 0 {
		return &AccessError{Nodes: denied, Access: s.Access}
	}
	return nil
}

// BudgetLabelError names the budget label keys no selected node carries.
type BudgetLabelError struct {
	Keys     []string
	Selected int
	// Similar are label keys the selected nodes do carry that end like a
	// missing one (after its last '/' or '.'): the likely intended keys.
	Similar []string
}

func (e *BudgetLabelError) Error() string {
	s := fmt.Sprintf("--max-unavailable-per names label(s) %s that none of the %d selected node(s) carries, so it would limit "+
		"nothing; nothing was changed. Check the key's spelling (kubectl get nodes --show-labels), or drop it",
		strings.Join(e.Keys, ", "), e.Selected)
	if len(e.Similar) > 0 {
		s += "; the selected nodes carry " + strings.Join(e.Similar, ", ")
	}
	return s
}

// checkBudgetLabels is a *BudgetLabelError for the budget keys no node
// (but those skip excludes) carries.
func (s Selection) checkBudgetLabels(nodes []corev1.Node, skip func(*corev1.Node) string) error {
	if len(s.BudgetLabels) == 0 {
		return nil
	}
	carried := map[string]bool{}
	selected := 0
	for i := range nodes {
		if skip != nil && skip(&nodes[i]) != "" {
			continue
		}
		selected++
		for k := range nodes[i].Labels {
			carried[k] = true
		}
	}
	if selected == 0 {
		return nil // nothing to roll: the run says so
	}
	e := &BudgetLabelError{Selected: selected}
	for _, k := range s.BudgetLabels {
		if carried[k] {
			continue
		}
		e.Keys = append(e.Keys, k)
		tail := k[strings.LastIndexAny(k, "/.")+1:]
		for c := range carried {
			if c != k && tail != "" && (strings.HasSuffix(c, "/"+tail) || strings.HasSuffix(c, "."+tail) || c == tail) {
				e.Similar = append(e.Similar, c)
			}
		}
	}
	if len(e.Keys) == 0 {
		return nil
	}
	sort.Strings(e.Keys)
	sort.Strings(e.Similar)
	return e
}

// SelectionError says the nodes asked for do not exist or do not match:
// bad input, found before anything changed.
type SelectionError struct{ msg string }

func (e *SelectionError) Error() string { return e.msg }

// ListNodes returns the selected nodes sorted by name. Explicitly named
// nodes that do not exist or do not match are an error, so a typo never
// silently upgrades nothing.
func ListNodes(ctx context.Context, cs kubernetes.Interface, s Selection) ([]corev1.Node, error) {
	sel, err := s.selector()
	if err != nil {
		return nil, err
	}
	var nodes []corev1.Node
	if len(s.Nodes) > 0 {
		for _, name := range s.Nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, &SelectionError{fmt.Sprintf("node %q does not exist (kubectl get nodes lists them)", name)}
			}
			if err != nil {
				return nil, err
			}
			if !sel.Matches(labels.Set(n.Labels)) {
				return nil, &SelectionError{fmt.Sprintf("node %q does not match %s; is it a Tenstorrent node? "+
					"(--any-node drops the %s requirement)", name, sel, LabelPCIPresent)}
			}
			nodes = append(nodes, *n)
		}
	} else {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		nodes = l.Items
		if len(nodes) == 0 {
			return nil, &SelectionError{fmt.Sprintf("no node matches %s", sel)}
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes, nil
}

// DriverSkipReason says why kmd/tt-smi work must not touch n ("" = eligible).
func DriverSkipReason(n *corev1.Node) string {
	switch {
	case n.Labels[LabelDriverSkip] == "true":
		return LabelDriverSkip + "=true"
	case n.Labels[LabelInstallMode] == InstallModeHost:
		return "tt-kmd is host-managed (DKMS): " + LabelInstallMode + "=host"
	}
	return ""
}

// CheckNoOperator refuses when tt-k8s-driver-manager manages the same
// nodes: its DaemonSet would re-insmod its own version behind our back.
func CheckNoOperator(ctx context.Context, cs kubernetes.Interface) error {
	l, err := cs.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=tt-kmd-installer",
	})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("cannot check for the tt-k8s-driver-manager operator (listing DaemonSets is forbidden): %w", err)
		}
		return err
	}
	if len(l.Items) == 0 {
		return nil
	}
	var names []string
	for _, ds := range l.Items {
		names = append(names, ds.Namespace+"/"+ds.Name)
	}
	return &OperatorError{DaemonSets: names}
}

// OperatorError is CheckNoOperator's refusal: a blocker that needs a person
// (preflight's driver-operator), not a failure.
type OperatorError struct{ DaemonSets []string }

func (e *OperatorError) Error() string {
	return fmt.Sprintf("the tt-k8s-driver-manager operator manages tt-kmd here (DaemonSet %s); running both would fight over the "+
		"module. Upgrade through the operator (kubectl patch ttdp …), or uninstall it first", strings.Join(e.DaemonSets, ", "))
}
