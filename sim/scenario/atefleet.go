package scenario

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/sim/substrate"
)

// The ate-fleet scenario: an Agent Substrate install at the OLD version,
// ready for `kubectl ate roll`. Everything it creates:
//
//   - every node labelled ate.dev/substrate-version=v0.2.0 (ate-setup
//     labels only unlabelled nodes);
//   - ate-system: Namespace, ServiceAccount ate-client, Deployment and
//     Service "api" (443 → container port "grpc" 8443), the kwok
//     ClusterPortForward "ate-system-api" sending port 8443 of ate-system
//     pods to the in-process fake ateapi.Control server (era c by default),
//     and DaemonSet atelet-v0-2-0 (labels app=atelet,
//     ate.dev/substrate-version=v0.2.0; nodeSelector on that node label);
//   - ClusterTrustBundle servicedns.podcert.ate.dev:identity:sim (label
//     podcert.ate.dev/canarying=live, signer
//     servicedns.podcert.ate.dev/identity) holding the server's CA;
//     <dir>/ate-endpoint and <dir>/ate-ca.pem for --ate-endpoint/--ate-ca-file;
//   - CRD workerpools.ate.dev and, in namespace ate-workers, WorkerPools
//     python-small (4 replicas, gvisor, limits 1 CPU/2Gi, labels
//     runtime=python,size=small) and python-large (2 replicas, limits
//     4 CPU/16Gi, size=large), both pinned to v0.2.0 through
//     spec.template.nodeSelector and READY==DESIRED; their Deployments
//     (label ate.dev/worker-pool=<pool>) and pods, each pod a Worker named
//     by its UID;
//   - actors: RUNNING demo/chat-1, demo/chat-2 (python-small workers) and
//     team-a/etl-1 (python-large); PAUSED demo/notebook-1 and team-a/etl-2
//     whose local snapshot lives on the node of a running actor's worker;
//     SUSPENDED demo/chat-3, demo/chat-4 and team-a/etl-3;
//   - traffic: every 3 s a suspended/paused actor wakes with chance 0.2 onto
//     a free worker, and a running one suspends itself with chance 0.05.
//
// ROLLBOOK_SIM_ATE_ERA, ROLLBOOK_SIM_ATE_EVICTION_WINDOW (default 20s) and
// ROLLBOOK_SIM_ATE_TRAFFIC (off | on | tick) override the defaults.
const (
	ateOldVersion = "v0.2.0"
	ateWorkersNS  = "ate-workers"
)

func init() {
	Register(Scenario{
		Name: "ate-fleet",
		Description: "Agent Substrate at " + ateOldVersion + ": nodes labelled ate.dev/substrate-version, " +
			"svc/api + ClusterTrustBundle + fake ateapi (era c), atelet-" + substrate.NameSuffix(ateOldVersion) +
			", WorkerPools python-small/python-large in " + ateWorkersNS + " pinned to the old version, " +
			"running, paused and suspended actors, traffic on",
		Setup: setupAteFleet,
	})
}

func setupAteFleet(ctx context.Context, env *Env) error {
	if len(env.Nodes) < 2 {
		return fmt.Errorf("ate-fleet needs at least 2 nodes (a roll moves one at a time), got %d", len(env.Nodes))
	}
	opts, err := substrate.Options{Traffic: &substrate.TrafficOptions{
		Interval: 3 * time.Second, Resume: 0.2, Idle: 0.05,
	}}.FromEnv()
	if err != nil {
		return err
	}
	if _, err := substrate.LabelUnlabelledNodes(ctx, env.Client, ateOldVersion); err != nil {
		return err
	}
	sub, err := substrate.Start(ctx, substrate.Config{Dir: env.Dir, RESTConfig: env.RESTConfig,
		Client: env.Client, Logf: env.Logf, Options: opts})
	if err != nil {
		return err
	}
	env.Go("ate-substrate", sub.Run)
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		return err
	}
	if err := substrate.DeployAtelet(ctx, dyn, ateOldVersion); err != nil {
		return err
	}
	pools := atePools()
	if err := createPools(ctx, env, dyn, pools); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := substrate.WaitPoolsReady(wctx, dyn, ateWorkersNS, "python-small", "python-large"); err != nil {
		return err
	}
	want := 0
	for _, p := range pools {
		want += int(p.Spec.Replicas)
	}
	if err := sub.WaitFor(wctx, "every worker pod registered", func(ws []fakesubstrate.Worker, _ []fakesubstrate.Actor) bool {
		return len(ws) == want
	}); err != nil {
		return err
	}
	if err := seedActors(sub); err != nil {
		return err
	}
	sub.Changed()
	env.Logf("ate-fleet: %d workers, %d actors at %s", want, len(sub.Server.Actors()), ateOldVersion)
	return nil
}

func atePools() []*substrate.WorkerPool {
	pool := func(name, size string, replicas int32, cpu, mem string) *substrate.WorkerPool {
		p := &substrate.WorkerPool{}
		p.Name, p.Namespace = name, ateWorkersNS
		p.Labels = map[string]string{"runtime": "python", "size": size}
		p.Spec = substrate.WorkerPoolSpec{
			Replicas:       replicas,
			WorkerImage:    "ghcr.io/agent-substrate/substrate/ateom-gvisor@sha256:" + fakeDigest("ateom-gvisor:"+ateOldVersion),
			SandboxClasses: []substrate.SandboxClass{{Name: "gvisor"}},
			Template: substrate.PoolTemplate{
				Labels:       map[string]string{"team": "platform"},
				NodeSelector: map[string]string{substrate.VersionLabel: ateOldVersion},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}},
			},
		}
		return p
	}
	return []*substrate.WorkerPool{
		pool("python-small", "small", 4, "1", "2Gi"),
		pool("python-large", "large", 2, "4", "16Gi"),
	}
}

func createPools(ctx context.Context, env *Env, dyn dynamic.Interface, pools []*substrate.WorkerPool) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ateWorkersNS}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, p := range pools {
		u, err := p.ToUnstructured()
		if err != nil {
			return err
		}
		if _, err := dyn.Resource(substrate.GVRWorkerPool).Namespace(p.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("WorkerPool %s: %w", p.Name, err)
		}
	}
	return nil
}

// seedActors binds the running actors to workers and pins the paused ones
// to the nodes of running actors, so a roll's first node has both kinds.
func seedActors(sub *substrate.Substrate) error {
	byPool := map[string][]fakesubstrate.Worker{}
	for _, w := range sub.Server.Workers() {
		byPool[w.Pool] = append(byPool[w.Pool], w)
	}
	for _, ws := range byPool {
		slices.SortFunc(ws, func(a, b fakesubstrate.Worker) int {
			return cmp.Compare(a.Node+"/"+a.Pod, b.Node+"/"+b.Pod)
		})
	}
	small, large := byPool["python-small"], byPool["python-large"]
	if len(small) < 2 || len(large) < 1 {
		return fmt.Errorf("ate-fleet: too few workers (small %d, large %d)", len(small), len(large))
	}
	sel := func(size string) map[string]string { return map[string]string{"size": size} }
	snap := func(ref string) string { return "gs://ate-snapshots/" + ref + "/v1" }
	actors := []fakesubstrate.Actor{
		{Atespace: "demo", Name: "chat-1", State: fakesubstrate.ActorRunning, Worker: small[0].Name, WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/chat-1")},
		{Atespace: "demo", Name: "chat-2", State: fakesubstrate.ActorRunning, Worker: small[1].Name, WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/chat-2")},
		{Atespace: "team-a", Name: "etl-1", State: fakesubstrate.ActorRunning, Worker: large[0].Name, WorkerSelector: sel("large"), ExternalSnapshotURI: snap("team-a/etl-1")},
		{Atespace: "demo", Name: "notebook-1", State: fakesubstrate.ActorPaused, AssignedNode: small[0].Node, SnapshotNodes: []string{small[0].Node}, WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/notebook-1")},
		{Atespace: "team-a", Name: "etl-2", State: fakesubstrate.ActorPaused, AssignedNode: large[0].Node, SnapshotNodes: []string{large[0].Node}, WorkerSelector: sel("large"), ExternalSnapshotURI: snap("team-a/etl-2")},
		{Atespace: "demo", Name: "chat-3", WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/chat-3")},
		{Atespace: "demo", Name: "chat-4", WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/chat-4")},
		{Atespace: "team-a", Name: "etl-3", WorkerSelector: sel("large"), ExternalSnapshotURI: snap("team-a/etl-3")},
	}
	for _, a := range actors {
		if err := sub.Server.AddActor(a); err != nil {
			return err
		}
	}
	return nil
}

// fakeDigest stands in for the image digest `crane digest` would print.
func fakeDigest(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return hex.EncodeToString(sum[:])
}
