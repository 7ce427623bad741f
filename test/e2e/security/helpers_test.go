//go:build e2e

package security

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/mutate"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/tt"
)

const (
	mirrorURL  = "file:///srv/mirror/tt-kmd.git"
	bundleHost = "https://bundles.example/tt/"
	node       = "kwok-node-0"
)

var (
	commit = strings.Repeat("c", 40)
	sha    = strings.Repeat("a", 64)
)

func helperConfig(image string, proxy bool) tt.HelperConfig {
	h := tt.HelperConfig{Image: image, Namespace: helperNS, Timeout: 10 * time.Minute, PriorityClass: deploy.HelperPriorityClass}
	if proxy {
		h.Proxy = map[string]string{"HTTPS_PROXY": "http://proxy.example:3128", "no_proxy": "10.0.0.0/8,.svc"}
	}
	return h
}

// vouched is a module kubectl tt vouched for, signed by the certificate
// whose SHA-256 is signer ("": unsigned).
func vouched(signer string) *tt.VouchedModule {
	return &tt.VouchedModule{ConfigMap: "tt-kmd-0123456789abcdef", SHA256: strings.Repeat("b", 64), Signer: signer}
}

// variant is one helper pod as a runbook renders it.
type variant struct {
	name string
	pod  *corev1.Pod
}

// renderedHelpers are the helpers the runbooks make, each optional part
// (flags, proxy, shared module, presigned bundle, host PID) at least once;
// the first of each task is its minimal shape.
func renderedHelpers(image string) []variant {
	var out []variant
	add := func(name string, p *corev1.Pod) { out = append(out, variant{name, p}) }
	for _, proxy := range []bool{false, true} {
		h := helperConfig(image, proxy)
		sfx := map[bool]string{false: "", true: " +proxy"}[proxy]
		add("probe"+sfx, tt.ProbeSpec(h, node, "run-1").Pod())
		kmd := &tt.KMDConfig{Version: "2.8.0", Commit: commit, Helper: h, RunID: "run-1"}
		add("kmd"+sfx, tt.KMDHelperSpec(kmd, node, commit, nil).Pod())
		add("kmd probe"+sfx, tt.KMDProbeSpec(kmd, node).Pod())
		add("kmd-build"+sfx, tt.KMDBuildHelperSpec(kmd, node, commit).Pod())
		mirrored := *kmd
		mirrored.GitURL, mirrored.ForceUnload = mirrorURL, true
		add("kmd --git-url --force-unload +module"+sfx, tt.KMDHelperSpec(&mirrored, node, commit, vouched("")).Pod())
		add("kmd +signed module"+sfx, tt.KMDHelperSpec(kmd, node, commit, vouched(sha)).Pod())
		add("kmd probe --git-url"+sfx, tt.KMDProbeSpec(&mirrored, node).Pod())
		add("kmd-build --git-url"+sfx, tt.KMDBuildHelperSpec(&mirrored, node, commit).Pod())
		add("smi"+sfx, tt.SMIHelperSpec(&tt.SMIConfig{Version: "3.0.1", Helper: h, RunID: "run-1"}, node).Pod())
		fw := &tt.FirmwareConfig{Version: "19.0.0", Readback: "19.0.0.0", BundleURL: bundleHost + "fw_pack-19.0.0.fwbundle",
			BundleSHA256: sha, FlashTimeout: 15 * time.Minute, Helper: h, RunID: "run-1"}
		fw.Helper.Timeout = fw.FlashTimeout
		add("flash"+sfx, tt.FirmwareHelperSpec(fw, node).Pod())
		add("firmware probe --bundle-url --bundle-sha256"+sfx, tt.FirmwareProbeSpec(fw, node).Pod())
		presigned := *fw
		presigned.BundleURL += "?X-Amz-Signature=0badc0de"
		presigned.ForceUnload, presigned.ForceWrite, presigned.AllowMajorDowngrade = true, true, true
		add("flash presigned --force-unload --force-write"+sfx, tt.FirmwareHelperSpec(&presigned, node).Pod())
		add("clean-cache"+sfx, tt.CleanCacheSpec(h, node).Pod())
	}
	return out
}

func policyParams() tt.AdminParams {
	p := testParams()
	p.KMDGitURLs = append(p.KMDGitURLs, mirrorURL)
	p.BundleURLs = append(p.BundleURLs, bundleHost)
	return p
}

// outcome of creating a pod as the operator (server-side dry run).
type outcome int

const (
	admitted outcome = iota
	refusedByPolicy
	invalid // the API's own validation refused it before admission
)

func tryCreate(ctx context.Context, as kubernetes.Interface, p *corev1.Pod) (outcome, error) {
	p = p.DeepCopy()
	p.ResourceVersion = ""
	_, err := as.CoreV1().Pods(helperNS).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return admitted, nil
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+install.HelperPolicyName+"'"):
		return refusedByPolicy, err
	}
	return invalid, err
}

func TestHelperPolicyAdmitsWhatRollbookRenders(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, 5*time.Minute)
	as := setup(t, ctx, c, policyParams())
	for _, v := range renderedHelpers(policyParams().Images[0]) {
		if o, err := tryCreate(ctx, as, v.pod); o != admitted {
			t.Errorf("the %s helper as kubectl tt renders it was refused: %v", v.name, err)
		}
	}
}

// Every field of every task's minimal helper, changed or set alone, and
// every value the policy's holes bound, pushed past its bound.
func TestHelperPolicyRefusesEveryMutation(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, 20*time.Minute)
	as := setup(t, ctx, c, policyParams())
	otherObjects(t, ctx, c)
	seen := map[string]bool{}
	var minimal []variant
	for _, v := range renderedHelpers(policyParams().Images[0]) {
		task := v.pod.Labels["rollbook.dev/helper"]
		if !seen[task] {
			seen[task] = true
			minimal = append(minimal, v)
		}
	}
	var tally mutationTally
	for _, v := range minimal {
		tally.refuseEvery(t, ctx, as, helperNS, install.HelperPolicyName, v, holePaths)
		for _, h := range holeMutations(v) {
			tally.tried++
			if o, err := tryCreate(ctx, as, h.pod); o != refusedByPolicy {
				t.Errorf("the %s helper with %s: want refused by the policy, got %v", v.name, h.name, err)
			} else {
				tally.refused++
			}
		}
	}
	tally.report(t)
}

// mutationTally counts what refuseEvery tried, across pods.
type mutationTally struct {
	tried, refused, noop int
	uncovered            []string
}

// refuseEvery creates, as the operator in ns, v's pod with each field of
// its type changed or set alone (but those skip names): each must be
// refused by policy. A field no generated value gets past the API
// server's own validation is reported, not failed.
func (tl *mutationTally) refuseEvery(t *testing.T, ctx context.Context, as kubernetes.Interface, ns, policy string, v variant,
	skip []string) {
	t.Helper()
	base, err := as.CoreV1().Pods(ns).Create(ctx, v.pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("the %s pod as rendered: %v", v.name, err)
	}
	covered := map[string]bool{} // boundary or path → refused by the policy at least once
	attempts := map[string]int{}
	why := map[string]string{}
	for _, m := range mutate.Of(v.pod, mutate.Options{Skip: skip}) {
		key := m.Boundary
		if key == "" {
			key = m.Path
		}
		for round := 0; round < 2 && !covered[key]; round++ {
			var adapted []any
			for i := range min(len(m.Candidates), maxPerMutation) {
				if covered[key] || attempts[key] >= maxAttempts {
					break
				}
				attempts[key]++
				p := v.pod.DeepCopy()
				if err := m.Apply(p, i); errors.Is(err, mutate.ErrNotApplicable) {
					continue
				} else if err != nil {
					t.Fatalf("%s: %v", m.Path, err)
				}
				tl.tried++
				o, got, err := createAs(ctx, as, ns, policy, p)
				switch {
				case o == admitted && sameAsRendered(base, got):
					tl.noop++ // the server dropped or defaulted it: the pod is the rendered one
					why[key] = m.Describe(i) + ": the server dropped it"
				case o == admitted:
					t.Errorf("the %s pod with %s was ADMITTED", v.name, m.Describe(i))
					covered[key] = true
				case o == refusedByPolicy:
					tl.refused++
					covered[key] = true
				default:
					why[key] = m.Describe(i) + ": " + firstLine(err)
					if adapted == nil {
						adapted = mutate.Adapt(err)
					}
				}
			}
			if len(adapted) == 0 {
				break
			}
			m = m.WithCandidates(adapted)
		}
	}
	for key, w := range why {
		if !covered[key] {
			tl.uncovered = append(tl.uncovered, fmt.Sprintf("%s: %s (%s)", v.name, key, w))
		}
	}
}

// report lists the fields no valid mutation reached and the totals.
func (tl *mutationTally) report(t *testing.T) {
	t.Helper()
	sort.Strings(tl.uncovered)
	// A field no generated value got past the API server's own checks is
	// one no attacker can set on a pod either; each is listed with the
	// server's reason, for a reader to judge.
	for _, u := range tl.uncovered {
		t.Logf("unreachable: %s", u)
	}
	t.Logf("MUTATIONS: %d pods tried, %d refused by the policy, %d the server dropped or defaulted, %d fields no valid "+
		"mutation reached (listed above)", tl.tried, tl.refused, tl.noop, len(tl.uncovered))
}

func createAs(ctx context.Context, as kubernetes.Interface, ns, policy string, p *corev1.Pod) (outcome, *corev1.Pod, error) {
	p = p.DeepCopy()
	got, err := as.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return admitted, got, nil
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'"):
		return refusedByPolicy, nil, err
	}
	return invalid, nil, err
}

// sameAsRendered: the server stored exactly the rendered pod (a field
// the mutation set was dropped, or set to its default).
func sameAsRendered(base, got *corev1.Pod) bool {
	a, b := base.DeepCopy(), got.DeepCopy()
	for _, p := range []*corev1.Pod{a, b} {
		p.UID, p.CreationTimestamp, p.ManagedFields, p.ResourceVersion, p.Generation = "", metav1.Time{}, nil, "", 0
		p.Status = corev1.PodStatus{}
	}
	return equality.Semantic.DeepEqual(a, b)
}

// maxAttempts bounds the values tried under one unset field before it is
// reported as one no valid mutation reaches; maxPerMutation, those of one
// field (the server names the supported values of an enumeration, which
// are tried next).
const (
	maxAttempts    = 40
	maxPerMutation = 8
)

// holePaths are what the policy lets vary (or the server owns): the
// generic walk leaves them to holeMutations.
var holePaths = []string{
	"apiVersion", "kind", "status.*",
	"metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion", "metadata.generation",
	"metadata.creationTimestamp", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds", "metadata.managedFields.*",
	"metadata.managedFields", "metadata.selfLink",
	`metadata.labels["rollbook.dev/node"]`, `metadata.labels["rollbook.dev/run"]`,
	`metadata.annotations["rollbook.dev/helper-key"]`, `metadata.annotations["rollbook.dev/helper-spec-hash"]`,
	"spec.nodeName", "spec.activeDeadlineSeconds", "spec.priority", "spec.preemptionPolicy",
	"spec.containers[*].image", "spec.containers[*].command[*]",
}

func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// holeMutations push each varying value past what the policy allows.
func holeMutations(v variant) []variant {
	var out []variant
	mut := func(name string, f func(p *corev1.Pod)) {
		p := v.pod.DeepCopy()
		f(p)
		out = append(out, variant{name, p})
	}
	c0 := func(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }
	task := v.pod.Labels["rollbook.dev/helper"]
	mut("another name", func(p *corev1.Pod) { p.Name = "evil" })
	mut("no node", func(p *corev1.Pod) { p.Spec.NodeName = "" })
	mut("a deadline past a day", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](86401) })
	mut("no deadline", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil })
	mut("another image", func(p *corev1.Pod) { c0(p).Image = "evil.example/node-agent:1" })
	mut("another image by suffix", func(p *corev1.Pod) { c0(p).Image += "x" })
	mut("a relative agent", func(p *corev1.Pod) { c0(p).Command[0] = "kubectl-tt" })
	mut("a shell", func(p *corev1.Pod) { c0(p).Command = []string{"/bin/sh", "-c", "chroot /host"} })
	mut("args after the command", func(p *corev1.Pod) { c0(p).Args = []string{"--host-root", "/tmp"} })
	mut("an agent flag of its own", func(p *corev1.Pod) { c0(p).Command = append(c0(p).Command, "--host-root", "/tmp") })
	mut("a word with a newline", func(p *corev1.Pod) {
		c0(p).Command = append(c0(p).Command[:2], c0(p).Command[2]+"\n--host-root\n/tmp")
	})
	for i := range v.pod.Spec.Containers[0].Command {
		mut(fmt.Sprintf("command word %d changed", i), func(p *corev1.Pod) { c0(p).Command[i] = "x" + c0(p).Command[i] })
		if i > 0 {
			mut(fmt.Sprintf("command word %d doubled", i), func(p *corev1.Pod) {
				cmd := c0(p).Command
				c0(p).Command = append(append(append([]string(nil), cmd[:i+1]...), cmd[i]), cmd[i+1:]...)
			})
		}
	}
	mut("the host's PID namespace without --force-unload", func(p *corev1.Pod) { p.Spec.HostPID = true })
	mut("a proxy with credentials", func(p *corev1.Pod) {
		c0(p).Env = append(c0(p).Env, corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://user:secret@proxy.example:3128"})
	})
	mut("a variable of its own", func(p *corev1.Pod) { c0(p).Env = append(c0(p).Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/x.so"}) })
	mut("a proxy from another Secret", func(p *corev1.Pod) {
		c0(p).Env = append(c0(p).Env, corev1.EnvVar{Name: "HTTPS_PROXY", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: "k"}}})
	})
	mut("NODE_NAME from another field", func(p *corev1.Pod) { c0(p).Env[0].ValueFrom.FieldRef.FieldPath = "metadata.name" })
	switch task {
	case "kmd":
		kmdCmd := func(gitURL, pin string) func(p *corev1.Pod) {
			return func(p *corev1.Pod) {
				cfg := &tt.KMDConfig{Version: "2.8.0", Commit: pin, GitURL: gitURL, Helper: helperConfig(c0(p).Image, false), RunID: "run-1"}
				c0(p).Command = tt.KMDHelperSpec(cfg, node, pin, nil).Command
			}
		}
		mut("a repository the admin did not allow", kmdCmd("https://github.com/evil/tt-kmd.git", commit))
		mut("an allowed repository as a prefix", kmdCmd(nodeagent.DefaultKMDGitURL+".evil", commit))
		mut("no --commit", kmdCmd(mirrorURL, ""))
		mut("another module ConfigMap", func(p *corev1.Pod) {
			m := vouched("")
			m.ConfigMap = "kube-root-ca.crt"
			*p = *tt.KMDHelperSpec(&tt.KMDConfig{Version: "2.8.0", Commit: commit, Helper: helperConfig(c0(p).Image, false),
				RunID: "run-1"}, node, commit, m).Pod()
		})
		mut("the module-signing key's Secret, as kmd helpers once mounted it", func(p *corev1.Pod) {
			s := tt.KMDHelperSpec(&tt.KMDConfig{Version: "2.8.0", Commit: commit, Helper: helperConfig(c0(p).Image, false),
				RunID: "run-1"}, node, commit, nil)
			s.Secrets = []kube.SecretMount{{Name: "signing", Secret: "rollbook-tt-signing", MountPath: "/rollbook/signing",
				Keys: []string{"signing_key.pem", "signing_key.x509"}}}
			*p = *s.Pod()
		})
		mut("a module SHA-256 that is not one", func(p *corev1.Pod) {
			m := vouched("")
			m.SHA256 = "$(cat /host/etc/shadow)"
			*p = *tt.KMDHelperSpec(&tt.KMDConfig{Version: "2.8.0", Commit: commit, Helper: helperConfig(c0(p).Image, false),
				RunID: "run-1"}, node, commit, m).Pod()
		})
	case "flash":
		url := func(u string, pinned bool) func(p *corev1.Pod) {
			return func(p *corev1.Pod) {
				cfg := &tt.FirmwareConfig{Version: "19.0.0", Readback: "19.0.0.0", BundleURL: u, FlashTimeout: 15 * time.Minute,
					Helper: helperConfig(c0(p).Image, false), RunID: "run-1"}
				if pinned {
					cfg.BundleSHA256 = sha
				}
				c0(p).Command = tt.FirmwareHelperSpec(cfg, node).Command
			}
		}
		mut("a bundle host the admin did not allow", url("https://evil.example/fw.fwbundle", true))
		mut("a bundle climbing out of its prefix", url(bundleHost+"../../evil/fw.fwbundle", true))
		mut("a bundle climbing out, encoded", url(bundleHost+"%2e%2e/evil/fw.fwbundle", true))
		mut("an allowed prefix without its slash", url(strings.TrimSuffix(bundleHost, "/")+"-evil/fw.fwbundle", true))
		mut("no --bundle-sha256", url(bundleHost+"fw.fwbundle", false))
		mut("a presigned bundle from a host the admin did not allow", url("https://evil.example/fw.fwbundle?sig=1", true))
		mut("a presigned bundle climbing out of its prefix", url(bundleHost+"../evil/fw.fwbundle?sig=1", true))
	}
	return out
}

// otherObjects are what a cluster may hold beside rollbook's: a
// ServiceAccount in the helper namespace, a RuntimeClass and a
// PriorityClass, each named "other", so a mutation naming them passes the
// API's lookups and reaches the policy.
func otherObjects(t *testing.T, ctx context.Context, c *simtest.Cluster) {
	t.Helper()
	create := func(err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := c.Client.CoreV1().ServiceAccounts(helperNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		metav1.CreateOptions{})
	create(err)
	_, err = c.Client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Handler: "other", Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}},
		metav1.CreateOptions{})
	create(err)
	_, err = c.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Value: 10}, metav1.CreateOptions{})
	create(err)
}
