package roll

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ate/pullpod"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Only a pull tells whether an image has a build for a node's platform
// (containerd resolves the manifest list on the node, with the node's
// mirrors and credentials), so before a node of a platform moves to NEW the
// roll pulls each clone's images there once, in a pod that runs nothing.

// AnnImagePulls records on a node the image sets (imagesKey) a pull probe
// pulled there: every node of its platform counts them as pullable, so the
// probe runs once per image set and platform, not once per node.
const AnnImagePulls = "rollbook.dev/ate-image-pulls"

// maxPullRecords bounds AnnImagePulls: a few rolls' image sets.
const maxPullRecords = 8

// LabelPullProbe marks the probe pods (value: the image set's key).
const LabelPullProbe = pullpod.Label

// DefaultPullTimeout bounds the probe of one image set on one platform.
const DefaultPullTimeout = 5 * time.Minute

// platformOf is a node's "os/arch", what a manifest list is resolved by.
func platformOf(n *corev1.Node) string {
	os, arch := n.Labels[corev1.LabelOSStable], n.Labels[corev1.LabelArchStable]
	if os == "" {
		os = n.Status.NodeInfo.OperatingSystem
	}
	if arch == "" {
		arch = n.Status.NodeInfo.Architecture
	}
	return os + "/" + arch
}

// pullSet is what one pull probe pulls: images of the clones of one
// namespace that pull with the same credentials (the pods' pull Secrets,
// and their ServiceAccount's, which its admission plugin adds to a pod
// naming none), each proven on its own.
type pullSet struct {
	pool           string // the clones, "namespace/name, …"
	namespace      string
	serviceAccount string // "" is the namespace's default, as for the pods
	images         []string
	policy         map[string]corev1.PullPolicy
	secrets        []corev1.LocalObjectReference
}

func pullSetOf(pool, namespace string, specs ...corev1.PodSpec) pullSet {
	s := pullSet{pool: pool, namespace: namespace, policy: map[string]corev1.PullPolicy{}}
	for _, spec := range specs {
		if s.secrets == nil {
			s.secrets = spec.ImagePullSecrets
		}
		if s.serviceAccount == "" {
			s.serviceAccount = cmp.Or(spec.ServiceAccountName, spec.DeprecatedServiceAccount)
		}
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			if _, ok := s.policy[c.Image]; !ok && c.Image != "" {
				s.images = append(s.images, c.Image)
				s.policy[c.Image] = c.ImagePullPolicy
			}
		}
	}
	sort.Strings(s.images)
	return s
}

// imageKey names an image as the set pulls it (namespace and credentials).
func (s pullSet) imageKey(image string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nimage %s\n%s", s.namespace, image, s.credentials())
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// credentials are what the kubelet pulls the set's images with: the pods'
// pull Secrets, else their ServiceAccount's.
func (s pullSet) credentials() string {
	c := ""
	if s.serviceAccount != "" && s.serviceAccount != "default" {
		c = "serviceaccount " + s.serviceAccount + "\n"
	}
	for _, r := range s.secrets {
		c += "secret " + r.Name + "\n"
	}
	return c
}

// key names the whole set (the probe pod's name and label).
func (s pullSet) key() string {
	h := sha256.New()
	for _, i := range s.images {
		fmt.Fprintf(h, "%s\n", s.imageKey(i))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// pullProbe is one pod to run: the images, the platform, the node.
type pullProbe struct {
	set      pullSet
	platform string
	node     *corev1.Node
}

func (p pullProbe) podName() string {
	h := sha256.Sum256([]byte(p.node.Name))
	return pullpod.NamePrefix + p.set.key() + "-" + hex.EncodeToString(h[:])[:8]
}

// pullProbesNeeded are the probes the clones still need: for every
// platform among the nodes still to move to version, the images of each
// set not yet pulled on a node of that platform. The probe node is the
// first Ready node of the platform by name, preferring one not cordoned.
func pullProbesNeeded(sets []pullSet, nodes []corev1.Node, version string) []pullProbe {
	proven := map[string]bool{} // image key + " " + platform
	candidates := map[string][]*corev1.Node{}
	for i := range nodes {
		n := &nodes[i]
		if _, ok := n.Labels[fleet.VersionLabel]; !ok {
			continue
		}
		plat := platformOf(n)
		for _, k := range strings.Split(n.Annotations[AnnImagePulls], ",") {
			proven[k+" "+plat] = true
		}
		if n.Labels[fleet.VersionLabel] != version && kube.NodeReady(n) {
			candidates[plat] = append(candidates[plat], n)
		}
	}
	plats := make([]string, 0, len(candidates))
	for p, ns := range candidates {
		plats = append(plats, p)
		sort.SliceStable(ns, func(i, j int) bool {
			if ns[i].Spec.Unschedulable != ns[j].Spec.Unschedulable {
				return !ns[i].Spec.Unschedulable
			}
			return ns[i].Name < ns[j].Name
		})
	}
	sort.Strings(plats)
	var out []pullProbe
	for _, plat := range plats {
		byNS := map[string]*pullSet{}
		var order []string
		for _, s := range sets {
			for _, img := range s.images {
				if proven[s.imageKey(img)+" "+plat] {
					continue
				}
				// One probe per namespace and credentials: pools pulling
				// with others' Secrets are proven with their own.
				k := s.namespace + "\n" + s.credentials()
				m := byNS[k]
				if m == nil {
					m = &pullSet{namespace: s.namespace, serviceAccount: s.serviceAccount, policy: map[string]corev1.PullPolicy{},
						secrets: s.secrets}
					byNS[k] = m
					order = append(order, k)
				}
				if !strings.Contains(", "+m.pool+", ", ", "+s.pool+", ") {
					m.pool = strings.TrimPrefix(m.pool+", "+s.pool, ", ")
				}
				if _, ok := m.policy[img]; !ok {
					m.images = append(m.images, img)
					m.policy[img] = s.policy[img]
				}
			}
		}
		for _, k := range order {
			sort.Strings(byNS[k].images)
			out = append(out, pullProbe{set: *byNS[k], platform: plat, node: candidates[plat][0]})
		}
	}
	return out
}

// probePod is the probe pod (pkg/ate/pullpod, which the admission policy
// is rendered from).
func (p pullProbe) probePod(timeout time.Duration) *corev1.Pod {
	return pullpod.Spec{Name: p.podName(), Namespace: p.set.namespace, Node: p.node.Name, SetKey: p.set.key(), Pool: p.set.pool,
		Images: p.set.images, Policy: p.set.policy, Secrets: p.set.secrets, ServiceAccount: p.set.serviceAccount,
		Timeout: timeout}.Pod()
}

// pullVerdict reads a probe pod's container for image: pulled once it got
// past its pull (running, ended, or waiting on anything but the pull);
// wrongPlatform when the image has no build for the node's platform, which
// no wait cures. why is the last pull failure seen, for a budget's end.
func pullVerdict(p *corev1.Pod, image string) (pulled bool, wrongPlatform, why string) {
	for _, s := range p.Status.ContainerStatuses {
		if s.Image != image {
			continue
		}
		if s.State.Running != nil || s.State.Terminated != nil {
			return true, "", ""
		}
		w := s.State.Waiting
		if w == nil {
			break
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff":
			one := *p
			one.Status.InitContainerStatuses, one.Status.ContainerStatuses = nil, []corev1.ContainerStatus{s}
			why, wrong := fleet.PullFailure(&one)
			if wrong {
				return false, why, why
			}
			return false, "", why
		case "", "ContainerCreating", "PodInitializing":
			return false, "", "pulling " + image
		}
		return true, "", "" // created or failing to start: pulled
	}
	if p.Status.Phase == corev1.PodFailed {
		return false, "", fmt.Sprintf("the probe pod failed before its pulls: %s %s", p.Status.Reason, p.Status.Message)
	}
	return false, "", "waiting for the kubelet to start pulling"
}

// probePulls runs the probes the clones need, all at once, and records the
// pulls on their nodes. It returns blocked naming every image set that has
// no build for a platform (or did not pull within timeout), with the fix.
func probePulls(ctx context.Context, cs kubernetes.Interface, probes []pullProbe, timeout time.Duration, firstFlip bool,
	say func(string, ...any)) error {
	if len(probes) == 0 {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultPullTimeout
	}
	pods := map[string]pullProbe{} // namespace/name
	for _, p := range probes {
		pods[p.set.namespace+"/"+p.podName()] = p
	}
	// A run killed mid-probe leaves its pods (they end at their deadline);
	// those of another image set are removed here, ours are reused.
	if l, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: LabelPullProbe}); err == nil {
		stale := map[string]pullProbe{}
		for _, p := range l.Items {
			if _, ours := pods[p.Namespace+"/"+p.Name]; !ours {
				stale[p.Namespace+"/"+p.Name] = pullProbe{}
			}
		}
		removeProbes(cs, stale)
	}
	clear(pods)
	for _, p := range probes {
		say("pulling the images of %s on %s (%s) before its first node there moves: %s", p.set.pool, p.node.Name, p.platform,
			strings.Join(p.set.images, ", "))
		pod := p.probePod(timeout)
		if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil &&
			!apierrors.IsAlreadyExists(err) {
			removeProbes(cs, pods)
			if kube.QuotaRefusal(err) {
				return runbook.Blocked(fmt.Errorf("a ResourceQuota in namespace %s refuses the pull probe of %s: %w (the probe is "+
					"one pod per platform, deleted once the images are pulled; nothing was changed on any node: raise the quota "+
					"it names by one pod, or free one, then re-run; kubectl describe resourcequota -n %s)", pod.Namespace, p.set.pool,
					err, pod.Namespace))
			}
			if apierrors.IsForbidden(err) {
				return runbook.Blocked(fmt.Errorf("cannot start the pull probe of %s in namespace %s: %w (the ate-operator Role "+
					"in each WorkerPool namespace grants create pods: deploy/rbac/ate-operator.yaml)", p.set.pool, pod.Namespace, err))
			}
			return fmt.Errorf("start the pull probe of %s: %w", p.set.pool, err)
		}
		pods[pod.Namespace+"/"+pod.Name] = p
	}
	defer removeProbes(cs, pods)
	seen, err := awaitPulls(ctx, cs, pods, timeout)
	if err != nil {
		return err
	}
	var failed []string
	pulled := map[string][]string{} // node → image keys
	for name, p := range pods {
		for _, img := range p.set.images {
			ok, wrong, why := false, "", "the probe pod was not seen"
			if pod := seen[name]; pod != nil {
				ok, wrong, why = pullVerdict(pod, img)
			}
			switch {
			case ok:
				pulled[p.node.Name] = append(pulled[p.node.Name], p.set.imageKey(img))
			case wrong != "":
				failed = append(failed, fmt.Sprintf("%s: pod %s on %s (%s): %s", p.set.pool, name, p.node.Name, p.platform, wrong))
			default:
				failed = append(failed, fmt.Sprintf("%s: %s not pulled on %s (%s) within %s: %s", p.set.pool, img, p.node.Name,
					p.platform, timeout, why))
			}
		}
	}
	for node, keys := range pulled {
		if err := recordPulls(ctx, cs, node, keys); err != nil {
			return err
		}
	}
	if len(failed) == 0 {
		return nil
	}
	sort.Strings(failed)
	fix := "no node is at the new version yet, so the clones serve nothing: delete them (kubectl delete workerpool -n NS " +
		"NAME; their Pending pods go with them, while editing the image would leave the old template's pods to be " +
		"scheduled) and clone again with an image built for the nodes' platform (a multi-arch image): kubectl ate roll " +
		"clone-pools --image CLASS=REF@sha256:…; then re-run"
	if !firstFlip {
		fix = "give the pool an image built for every node platform (a multi-arch image), or a nodeSelector/affinity " +
			"for the image's (kubectl edit workerpool -n NS NAME), then re-run"
	}
	return runbook.Blocked(fmt.Errorf("a clone's image does not pull on the nodes it must serve; nothing was changed:\n  %s\n"+
		"Fix: %s. A pull that was only slow: re-run (the node keeps what it pulled) or raise --pull-timeout",
		strings.Join(failed, "\n  "), fix))
}

// awaitPulls watches the probe pods until each image of each has a verdict
// or the budget ends; it returns the pods as last seen.
func awaitPulls(ctx context.Context, cs kubernetes.Interface, pods map[string]pullProbe,
	timeout time.Duration) (map[string]*corev1.Pod, error) {
	seen := map[string]*corev1.Pod{}
	note := func(p *corev1.Pod) {
		if _, ok := pods[p.Namespace+"/"+p.Name]; ok {
			seen[p.Namespace+"/"+p.Name] = p
		}
	}
	decided := func() bool {
		for name, pr := range pods {
			for _, img := range pr.set.images {
				p := seen[name]
				if p == nil {
					return false
				}
				if ok, wrong, _ := pullVerdict(p, img); !ok && wrong == "" {
					return false
				}
			}
		}
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		l, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(wctx, metav1.ListOptions{LabelSelector: LabelPullProbe})
		if err == nil {
			for i := range l.Items {
				note(&l.Items[i])
			}
			if decided() {
				return seen, nil
			}
			var w watch.Interface
			w, err = cs.CoreV1().Pods(metav1.NamespaceAll).Watch(wctx, metav1.ListOptions{LabelSelector: LabelPullProbe,
				ResourceVersion: l.ResourceVersion})
			if err == nil {
				for ev := range w.ResultChan() {
					if p, ok := ev.Object.(*corev1.Pod); ok {
						note(p)
					}
					if decided() {
						w.Stop()
						return seen, nil
					}
				}
				w.Stop()
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if wctx.Err() != nil {
			return seen, nil // the budget ended: what was seen is the verdict
		}
		if err != nil {
			return nil, fmt.Errorf("watch the pull probes: %w", err)
		}
	}
}

// removeProbes deletes the probe pods (they ran nothing; none is kept).
func removeProbes(cs kubernetes.Interface, pods map[string]pullProbe) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name := range pods {
		ns, n, _ := strings.Cut(name, "/")
		_ = cs.CoreV1().Pods(ns).Delete(ctx, n, metav1.DeleteOptions{})
	}
}

// recordPulls adds keys to the node's AnnImagePulls.
func recordPulls(ctx context.Context, cs kubernetes.Interface, node string, keys []string) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("record the pulls on %s: %w", node, err)
	}
	have := map[string]bool{}
	var all []string
	for _, k := range append(strings.Split(n.Annotations[AnnImagePulls], ","), keys...) {
		if k != "" && !have[k] {
			have[k] = true
			all = append(all, k)
		}
	}
	if len(all) > maxPullRecords {
		all = all[len(all)-maxPullRecords:] // the newest: older rolls' image sets are not pulled again
	}
	v := strings.Join(all, ",")
	_, err = kube.SetNodeKeys(ctx, cs, node, kube.NodeChange{Annotations: map[string]*string{AnnImagePulls: &v}})
	return err
}

// clonePullSets are the images of the serving pools' clones: their
// Deployments' pod templates (what the nodes will pull) and, once one of
// those is still to be pulled somewhere, the clones' existing pods too (a
// rollout left half-way keeps Pending pods of an earlier template; they are
// scheduled onto the first node that moves as well).
func clonePullSets(ctx context.Context, cs kubernetes.Interface, c *fleet.Cluster, deps fleet.PoolDeployments) ([]pullSet, error) {
	var out []pullSet
	var names []string
	for _, p := range c.ServingPools() {
		if p.CloneName == "" {
			continue
		}
		key := p.Namespace + "/" + p.CloneName
		if spec, ok := deps.Template[key]; ok {
			out = append(out, pullSetOf(key, p.Namespace, spec))
			names = append(names, p.CloneName)
		}
	}
	if len(pullProbesNeeded(out, deps.Nodes, c.New)) == 0 {
		return out, nil
	}
	sel := labels.NewSelector()
	if len(names) > 0 {
		r, err := labels.NewRequirement(fleet.PoolLabel, selection.In, names)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*r)
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list the clones' pods: %w", err)
	}
	for i, s := range out {
		specs := []corev1.PodSpec{deps.Template[s.pool]}
		for _, p := range pods.Items {
			if p.Namespace+"/"+p.Labels[fleet.PoolLabel] == s.pool && p.DeletionTimestamp == nil {
				specs = append(specs, p.Spec)
			}
		}
		out[i] = pullSetOf(s.pool, s.namespace, specs...)
	}
	return out, nil
}

// PullCheck is preflight's view of the pull probe (it changes nothing, so
// it only says which pulls roll next-node will make first).
func PullCheck(ctx context.Context, cs kubernetes.Interface, c *fleet.Cluster, deps fleet.PoolDeployments) fleet.Check {
	ck := fleet.Check{Group: "roll", Name: "every clone's images pulled on each node platform still to move", OK: true}
	sets, err := clonePullSets(ctx, cs, c, deps)
	if err != nil {
		ck.OK, ck.Detail = false, err.Error()
		return ck
	}
	var todo []string
	for _, p := range pullProbesNeeded(sets, deps.Nodes, c.New) {
		todo = append(todo, fmt.Sprintf("%s on %s (%s)", p.set.pool, p.node.Name, p.platform))
	}
	if len(todo) > 0 {
		ck.Warning, ck.OK = true, false
		ck.Detail = "not pulled yet: " + strings.Join(todo, "; ") + "; roll next-node pulls them there before the " +
			"first node of the platform moves and stops if one has no build for it"
	}
	return ck
}
