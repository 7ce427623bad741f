package substrate

import (
	"math/rand"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kwokv1 "sigs.k8s.io/kwok/pkg/apis/v1alpha1"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/pkg/atestate"
)

func TestNameSuffix(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "unknown",
		"v0.0.0-503-4b3423c0":   "v0-0-0-503-4b3423c0",
		"V1.2.3":                "v1-2-3",
		"--x--":                 "x",
		"...":                   "v" + "(hash)",
		strings.Repeat("a", 31): "v" + "(hash)",
	} {
		got := NameSuffix(in)
		if strings.HasSuffix(want, "(hash)") {
			if len(got) != 11 || got[0] != 'v' {
				t.Errorf("NameSuffix(%q) = %q, want v + 10 hex", in, got)
			}
			continue
		}
		if got != want {
			t.Errorf("NameSuffix(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAteletDaemonSet(t *testing.T) {
	ds := AteletDaemonSet("v0.2.0")
	if ds.Name != "atelet-v0-2-0" || ds.Namespace != Namespace {
		t.Fatalf("name %s/%s", ds.Namespace, ds.Name)
	}
	want := map[string]string{"app": "atelet", "ate.dev/substrate-version": "v0.2.0"}
	for k, v := range want {
		if ds.Labels[k] != v || ds.Spec.Selector.MatchLabels[k] != v || ds.Spec.Template.Labels[k] != v {
			t.Errorf("label %s=%s missing from labels, selector or pod labels", k, v)
		}
	}
	if ds.Spec.Template.Spec.NodeSelector["ate.dev/substrate-version"] != "v0.2.0" {
		t.Errorf("nodeSelector %v", ds.Spec.Template.Spec.NodeSelector)
	}
	if p := ds.Spec.Template.Spec.Containers[0].Ports; len(p) != 2 || p[0].HostPort != 8085 || p[1].HostPort != 9090 {
		t.Errorf("host ports %v", p)
	}
}

func testPool() *WorkerPool {
	p := &WorkerPool{}
	p.Name, p.Namespace, p.UID, p.Generation = "python-small", "ate-workers", types.UID("u1"), 3
	p.Labels = map[string]string{"size": "small"}
	p.Spec = WorkerPoolSpec{Replicas: 2, WorkerImage: "img@sha256:abc", SandboxClass: "microvm",
		Template: PoolTemplate{
			Labels:       map[string]string{"team": "x"},
			NodeSelector: map[string]string{VersionLabel: "v1"},
			Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
		}}
	return p
}

func TestRenderDeployment(t *testing.T) {
	d := RenderDeployment(testPool())
	if d.Name != "python-small" || d.Namespace != "ate-workers" {
		t.Fatalf("name %s/%s", d.Namespace, d.Name)
	}
	if d.Labels[PoolLabel] != "python-small" || d.Labels["team"] != "x" || d.Spec.Template.Labels[PoolLabel] != "python-small" {
		t.Errorf("labels %v / pod %v", d.Labels, d.Spec.Template.Labels)
	}
	if len(d.Spec.Selector.MatchLabels) != 1 || d.Spec.Selector.MatchLabels[PoolLabel] != "python-small" {
		t.Errorf("selector %v", d.Spec.Selector.MatchLabels)
	}
	or := d.OwnerReferences
	if len(or) != 1 || or[0].Kind != "WorkerPool" || or[0].UID != "u1" || !*or[0].Controller {
		t.Errorf("owner %v", or)
	}
	ps := d.Spec.Template.Spec
	if ps.NodeSelector[VersionLabel] != "v1" || *ps.TerminationGracePeriodSeconds != 3600 || *d.Spec.Replicas != 2 {
		t.Errorf("pod spec %+v", ps)
	}
	c := ps.Containers[0]
	if c.Name != "ateom" || c.Image != "img@sha256:abc" || c.Resources.Limits.Cpu().String() != "2" {
		t.Errorf("container %+v", c)
	}
	// The template's label map must not be shared (the pool label is added).
	if _, leaked := testPool().Spec.Template.Labels[PoolLabel]; leaked {
		t.Error("pool label leaked into the template")
	}
}

func TestPoolRoundTripAndClass(t *testing.T) {
	p := testPool()
	u, err := p.ToUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "ate.dev/v1alpha1" || u.GetKind() != "WorkerPool" {
		t.Fatalf("type %s %s", u.GetAPIVersion(), u.GetKind())
	}
	back, err := PoolFromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if back.Spec.Template.NodeSelector[VersionLabel] != "v1" || back.SandboxClassName() != "microvm" {
		t.Errorf("round trip %+v", back.Spec)
	}
	back.Spec.SandboxClasses = []SandboxClass{{Name: "gvisor"}}
	if back.SandboxClassName() != "gvisor" {
		t.Error("sandboxClasses must win over sandboxClass")
	}
	if (&WorkerPool{}).SandboxClassName() != "gvisor" {
		t.Error("default class")
	}
	if st := PoolStatusFrom("p", RenderDeployment(p)); st.Selector != "ate.dev/worker-pool=p" {
		t.Errorf("status %+v", st)
	}
}

func TestWorkerPoolCRD(t *testing.T) {
	crd, err := WorkerPoolCRD()
	if err != nil {
		t.Fatal(err)
	}
	v := crd.Spec.Versions[0]
	if crd.Name != "workerpools.ate.dev" || v.Name != "v1alpha1" || crd.Spec.Scope != "Namespaced" {
		t.Fatalf("%s %s %s", crd.Name, v.Name, crd.Spec.Scope)
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	for _, f := range []string{"replicas", "workerImage", "sandboxClasses", "sandboxClass", "template"} {
		if _, ok := spec.Properties[f]; !ok {
			t.Errorf("spec.%s missing", f)
		}
	}
	if _, ok := spec.Properties["template"].Properties["nodeSelector"]; !ok {
		t.Error("spec.template.nodeSelector missing")
	}
	if v.Subresources == nil || v.Subresources.Status == nil || v.Subresources.Scale == nil {
		t.Error("status and scale subresources")
	}
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		cols = append(cols, c.Name+"="+c.JSONPath)
	}
	if got := strings.Join(cols, " "); !strings.Contains(got, "Desired=.spec.replicas") || !strings.Contains(got,
		"Ready=.status.readyReplicas") {
		t.Errorf("columns %s", got)
	}
}

func TestTrustBundleName(t *testing.T) {
	if got := trustBundleName(TrustBundleSigner, "sim"); got != "servicedns.podcert.ate.dev:identity:sim" {
		t.Errorf("got %s", got)
	}
}

func TestAPIObjects(t *testing.T) {
	items, err := apiObjects("127.0.0.1:4321", fakesubstrate.EraC)
	if err != nil {
		t.Fatal(err)
	}
	var cpf *kwokv1.ClusterPortForward
	for _, it := range items {
		if c, ok := it.obj.(*kwokv1.ClusterPortForward); ok {
			cpf = c
		}
	}
	if cpf == nil {
		t.Fatal("no ClusterPortForward")
	}
	f := cpf.Spec.Forwards[0]
	if f.Ports[0] != APIContainerPort || f.Target.Address != "127.0.0.1" || f.Target.Port != 4321 ||
		cpf.Spec.Selector.MatchNamespaces[0] != Namespace {
		t.Errorf("forward %+v selector %+v", f, cpf.Spec.Selector)
	}
	if _, err := apiObjects("nope", fakesubstrate.EraC); err == nil {
		t.Error("bad address accepted")
	}
}

func TestDecideReview(t *testing.T) {
	ok := authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{Audience},
		User: authnv1.UserInfo{Username: ClientUsername}}
	if p, err := decideReview(ok, Audience, ClientUsername, "tok"); err != nil || p != ClientUsername {
		t.Fatalf("accepted: %q %v", p, err)
	}
	other := ok
	other.User.Username = "system:serviceaccount:default:default"
	wrongAud := ok
	wrongAud.Audiences = []string{"https://kubernetes.default.svc.cluster.local"}
	noAud := ok
	noAud.Audiences = nil
	bad := authnv1.TokenReviewStatus{Error: "invalid bearer token SECRET-TOKEN"}
	for name, st := range map[string]authnv1.TokenReviewStatus{"other SA": other, "wrong audience": wrongAud, "no audience": noAud,
		"unauthenticated": bad} {
		_, err := decideReview(st, Audience, ClientUsername, "SECRET-TOKEN")
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "SECRET-TOKEN") {
			t.Errorf("%s: error leaks the token: %v", name, err)
		}
	}
}

func TestOptionsFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	base := Options{Traffic: &TrafficOptions{Resume: 0.5}}
	o, err := base.fromLookup(env(map[string]string{EnvEra: "d", EnvEvictionWindow: "5s", EnvTraffic: "1s"}))
	if err != nil || o.Era != fakesubstrate.EraD || o.EvictionWindow != 5*time.Second || o.Traffic.Interval != time.Second ||
		o.Traffic.Resume != 0.5 {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err := base.fromLookup(env(map[string]string{EnvAteomExit: "2s", EnvAteletHandoff: "40s"})); err != nil ||
		o.AteomExit != 2*time.Second || o.AteletHandoff != 40*time.Second {
		t.Fatalf("ateom exit and atelet hand-off: %+v %v", o, err)
	}
	if o, err := base.fromLookup(env(map[string]string{EnvSyncSuspend: "on"})); err != nil || !o.SyncSuspend {
		t.Fatalf("sync suspend: %+v %v", o, err)
	}
	if o, err := base.fromLookup(env(map[string]string{EnvCRD: "old"})); err != nil || !o.OldCRD {
		t.Fatalf("old CRD: %+v %v", o, err)
	}
	if o, _ := base.fromLookup(env(map[string]string{EnvTraffic: "off"})); o.Traffic != nil {
		t.Error("off kept traffic")
	}
	if o, _ := (Options{}).fromLookup(env(map[string]string{EnvTraffic: "on"})); o.Traffic == nil {
		t.Error("on left traffic off")
	}
	for k, v := range map[string]string{EnvEra: "z", EnvEvictionWindow: "-1s", EnvTraffic: "sometimes", EnvAteomExit: "soon",
		EnvAteletHandoff: "-3s", EnvSyncSuspend: "maybe", EnvCRD: "v2"} {
		if _, err := base.fromLookup(env(map[string]string{k: v})); err == nil {
			t.Errorf("%s=%s accepted", k, v)
		}
	}
	if d := (Options{}).withDefaults(); d.Era != fakesubstrate.EraC || d.EvictionWindow != DefaultEvictionWindow {
		t.Errorf("defaults %+v", d)
	}
}

// The old release's schema is the new one without spec.sandboxClasses:
// the older spec.sandboxClass stays, and nothing else differs.
func TestOldWorkerPoolCRD(t *testing.T) {
	cur, err := WorkerPoolCRD()
	if err != nil {
		t.Fatal(err)
	}
	old, err := OldWorkerPoolCRD()
	if err != nil {
		t.Fatal(err)
	}
	spec := func(c *apiextv1.CustomResourceDefinition) map[string]apiextv1.JSONSchemaProps {
		return c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	}
	if _, ok := spec(cur)["sandboxClasses"]; !ok {
		t.Fatal("the current schema has no sandboxClasses")
	}
	if _, ok := spec(old)["sandboxClasses"]; ok {
		t.Fatal("the old schema declares sandboxClasses")
	}
	if _, ok := spec(old)["sandboxClass"]; !ok || len(spec(old)) != len(spec(cur))-1 {
		t.Fatalf("the old schema differs in more than sandboxClasses: %d fields, %d", len(spec(old)), len(spec(cur)))
	}
}

func TestWorkerFor(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-1", Namespace: "ate-workers", UID: "uid-1"},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{PodIP: "10.0.0.5"}}
	w := WorkerFor(pod, testPool())
	if w.Name != "uid-1" || w.Pod != "p-1" || w.Node != "n1" || w.Pool != "python-small" ||
		w.SandboxClass != "microvm" || w.Labels["size"] != "small" || len(w.IPs) != 1 {
		t.Errorf("%+v", w)
	}
}

func TestTrafficTick(t *testing.T) {
	pki, err := fakesubstrate.NewPKI()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fakesubstrate.Start(fakesubstrate.Options{Certificate: &pki.Certificate})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.AddWorker(fakesubstrate.Worker{Name: "w1", Node: "n1", Labels: map[string]string{"size": "small"}}))
	must(srv.AddActor(fakesubstrate.Actor{Atespace: "a", Name: "x", WorkerSelector: map[string]string{"size": "small"}}))
	must(srv.AddActor(fakesubstrate.Actor{Atespace: "a", Name: "y", WorkerSelector: map[string]string{"size": "large"}}))
	o := TrafficOptions{Resume: 1, Idle: 0}.withDefaults()
	if !trafficTick(srv, o, rand.New(rand.NewSource(1))) {
		t.Fatal("nothing resumed")
	}
	x, _ := srv.GetActor("a", "x")
	y, _ := srv.GetActor("a", "y")
	if x.State != atestate.ActorRunning || x.Worker != "w1" || y.State != atestate.ActorSuspended {
		t.Fatalf("x %+v y %+v", x, y)
	}
	o.Idle, o.Resume = 1, 1e-9 // nobody wakes; every running actor idles
	if !trafficTick(srv, o, rand.New(rand.NewSource(1))) {
		t.Fatal("nothing went idle")
	}
	if x, _ = srv.GetActor("a", "x"); x.State != atestate.ActorSuspended {
		t.Fatalf("x %+v", x)
	}
}
