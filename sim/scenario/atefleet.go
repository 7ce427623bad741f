package scenario

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/pkg/atestate"
	"github.com/rollbook/rollbook/sim/substrate"
)

// The ate-fleet scenario: an Agent Substrate install at the OLD version,
// ready for `kubectl ate roll`, as strict as a real one. Everything it
// creates:
//
//   - every node labelled ate.dev/substrate-version=v0.2.0 (ate-setup
//     labels only unlabelled nodes), with allocatable cpu for exactly
//     WorkerSlots worker pods (each requests 1 cpu), so pods of a new pool
//     spread over the flipped nodes instead of piling onto the first;
//   - ate-system: Namespace, ServiceAccount ate-client, Deployment and
//     Service "api" (443 → container port "grpc" 8443), the kwok
//     ClusterPortForward "ate-system-api" sending port 8443 of ate-system
//     pods to the in-process fake ateapi.Control server (era c by default,
//     era d in ate-fleet-d), and DaemonSet atelet-v0-2-0 (labels
//     app=atelet, ate.dev/substrate-version=v0.2.0; nodeSelector on that
//     node label);
//   - ClusterTrustBundle servicedns.podcert.ate.dev:identity:sim (label
//     podcert.ate.dev/canarying=live, signer
//     servicedns.podcert.ate.dev/identity) holding the server's CA;
//     <dir>/ate-endpoint and <dir>/ate-ca.pem for --ate-endpoint/--ate-ca-file;
//   - CRD workerpools.ate.dev and three WorkerPools pinned to v0.2.0, one
//     replica per node each, READY==DESIRED: ate-workers/python-small
//     (gvisor, labels runtime=python,size=small), ate-workers/python-large
//     (gvisor, size=large) and ate-batch/python-small (microvm,
//     size=batch: the same pool name in a second namespace, with a second
//     sandbox class); their Deployments and pods, each pod a Worker named by
//     its UID, registered RegisterDelay after the pod is Ready;
//   - actors: RUNNING demo/chat-1, demo/chat-2, team-a/etl-1 and
//     batch/job-1; PAUSED demo/notebook-1 and team-a/etl-2 whose local
//     snapshot lives on the node of a running actor's worker (a flip of
//     that node while they are still PAUSED loses them); SUSPENDED
//     demo/chat-3, team-a/etl-3 and batch/job-2 (each pool lineage keeps
//     more workers than actors, as a fleet with headroom does);
//   - SUSPENDING and RESUMING last 1s, List RPCs page at 5 items and miss
//     items that change while they run, workers register 2s after their
//     pod is Ready;
//   - traffic: every 3 s a suspended/paused actor wakes with chance 0.15
//     onto a free worker, and a running one suspends itself with chance 0.1.
//
// Every actor the substrate loses (CRASHED, or paused on a node that
// flipped) is recorded as an actor-lost violation. One node is allowed: the
// roll then needs --allow-full-stop.
//
// ROLLBOOK_SIM_ATE_ERA, ROLLBOOK_SIM_ATE_EVICTION_WINDOW (default 20s),
// ROLLBOOK_SIM_ATE_TRAFFIC (off | on | tick), ROLLBOOK_SIM_ATE_TRANSITION,
// ROLLBOOK_SIM_ATE_REGISTER_DELAY and the rest of substrate.FromEnv's
// (ROLLBOOK_SIM_ATE_ATEOM_EXIT, ROLLBOOK_SIM_ATE_ATELET_HANDOFF, …) override
// the defaults.
const (
	ateOldVersion = "v0.2.0"
	ateWorkersNS  = "ate-workers"
	ateBatchNS    = "ate-batch"
	// WorkerSlots is how many worker pods fit on one node.
	WorkerSlots = 4
)

func init() {
	desc := "Agent Substrate at " + ateOldVersion + ": nodes labelled ate.dev/substrate-version with room for " +
		fmt.Sprint(WorkerSlots) + " workers each, svc/api + ClusterTrustBundle + fake ateapi (era %s), atelet-" +
		substrate.NameSuffix(ateOldVersion) + ", WorkerPools ate-workers/python-small, ate-workers/python-large (gvisor) and " +
		"ate-batch/python-small (microvm) pinned to the old version, running, paused and suspended actors, traffic on"
	Register(Scenario{Name: "ate-fleet", Description: fmt.Sprintf(desc, "c"),
		Setup: func(ctx context.Context, env *Env) error { return setupAteFleet(ctx, env, fakesubstrate.EraC) }})
	Register(Scenario{Name: "ate-fleet-d", Description: fmt.Sprintf(desc, "d, multi-actor workers"),
		Setup: func(ctx context.Context, env *Env) error { return setupAteFleet(ctx, env, fakesubstrate.EraD) }})
}

func setupAteFleet(ctx context.Context, env *Env, era fakesubstrate.Era) error {
	if len(env.Nodes) < 1 {
		return fmt.Errorf("ate-fleet needs at least 1 node")
	}
	o := substrate.Options{Era: era, Traffic: &substrate.TrafficOptions{
		Interval: 3 * time.Second, Resume: 0.15, Idle: 0.1,
	}, TransitionTime: time.Second, RegisterDelay: 2 * time.Second, SoftLists: true}
	if era == fakesubstrate.EraD {
		// Multi-actor workers that report their capacity a while after
		// they register, as an ateom does once it is up.
		o.WorkerCapacity, o.CapacityDelay = 3, 2*time.Second
	}
	opts, err := o.FromEnv()
	if err != nil {
		return err
	}
	if _, err := substrate.LabelUnlabelledNodes(ctx, env.Client, ateOldVersion); err != nil {
		return err
	}
	slots := WorkerSlots
	if v, err := strconv.Atoi(os.Getenv(EnvWorkerSlots)); err == nil && v > 0 {
		slots = v
	}
	if err := substrate.SetWorkerSlots(ctx, env.Client, env.Nodes, slots); err != nil {
		return err
	}
	sub, err := substrate.Start(ctx, substrate.Config{Dir: env.Dir, RESTConfig: env.RESTConfig,
		Client: env.Client, Logf: env.Logf, Monitor: env.Monitor, Options: opts})
	if err != nil {
		return err
	}
	env.Go("ate-substrate", sub.Run)
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		return err
	}
	if err := substrate.DeployController(ctx, dyn, ateOldVersion); err != nil {
		return err
	}
	if err := substrate.DeployAtelet(ctx, dyn, ateOldVersion); err != nil {
		return err
	}
	pools := atePools(int32(len(env.Nodes)), opts.OldCRD)
	if err := createPools(ctx, env, dyn, pools); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, p := range pools {
		if err := substrate.WaitPoolsReady(wctx, dyn, p.Namespace, p.Name); err != nil {
			return err
		}
	}
	want := 0
	for _, p := range pools {
		want += int(p.Spec.Replicas)
	}
	if err := sub.WaitFor(wctx, "every worker pod registered, its capacity reported", func(ws []fakesubstrate.Worker,
		_ []fakesubstrate.Actor) bool {
		for _, w := range ws {
			if w.CapacityPending {
				return false
			}
		}
		return len(ws) == want
	}); err != nil {
		return err
	}
	if err := seedActors(sub, opts.WorkerCapacity); err != nil {
		return err
	}
	sub.Changed()
	env.Logf("ate-fleet: %d workers, %d actors at %s", want, len(sub.Server.Actors()), ateOldVersion)
	return nil
}

// atePools are the fleet's serving pools; under the old CRD they name
// their class in the older spec.sandboxClass.
func atePools(replicas int32, oldCRD bool) []*substrate.WorkerPool {
	pool := func(ns, name, size, class string, cpu, mem string) *substrate.WorkerPool {
		p := &substrate.WorkerPool{}
		p.Name, p.Namespace = name, ns
		p.Labels = map[string]string{"runtime": "python", "size": size}
		p.Spec = substrate.WorkerPoolSpec{
			Replicas:       replicas,
			WorkerImage:    "ghcr.io/agent-substrate/substrate/ateom-" + class + "@sha256:" + fakeDigest("ateom-"+class+":"+ateOldVersion),
			SandboxClasses: []substrate.SandboxClass{{Name: class}},
			Template: substrate.PoolTemplate{
				Labels:       map[string]string{"team": "platform"},
				NodeSelector: map[string]string{substrate.VersionLabel: ateOldVersion},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
					Limits: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}},
			},
		}
		if oldCRD {
			p.Spec.SandboxClasses, p.Spec.SandboxClass = nil, class
		}
		return p
	}
	return []*substrate.WorkerPool{
		pool(ateWorkersNS, "python-small", "small", "gvisor", "1", "2Gi"),
		pool(ateWorkersNS, "python-large", "large", "gvisor", "4", "16Gi"),
		pool(ateBatchNS, "python-small", "batch", "microvm", "2", "4Gi"),
	}
}

func createPools(ctx context.Context, env *Env, dyn dynamic.Interface, pools []*substrate.WorkerPool) error {
	for _, name := range []string{ateWorkersNS, ateBatchNS} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil &&
			!apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for _, p := range pools {
		u, err := p.ToUnstructured()
		if err != nil {
			return err
		}
		if _, err := dyn.Resource(substrate.GVRWorkerPool).Namespace(p.Namespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("WorkerPool %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// seedActors binds the running actors to workers and pins the paused ones
// to the nodes of running actors, so a roll's first node has both kinds.
func seedActors(sub *substrate.Substrate, capacity int) error {
	byPool := map[string][]fakesubstrate.Worker{}
	for _, w := range sub.Server.Workers() {
		byPool[w.Namespace+"/"+w.Pool] = append(byPool[w.Namespace+"/"+w.Pool], w)
	}
	for _, ws := range byPool {
		slices.SortFunc(ws, func(a, b fakesubstrate.Worker) int {
			return cmp.Compare(a.Node+"/"+a.Pod, b.Node+"/"+b.Pod)
		})
	}
	small, large, batch := byPool[ateWorkersNS+"/python-small"], byPool[ateWorkersNS+"/python-large"], byPool[ateBatchNS+"/python-small"]
	if len(small) < 1 || len(large) < 1 || len(batch) < 1 {
		return fmt.Errorf("ate-fleet: too few workers (small %d, large %d, batch %d)", len(small), len(large), len(batch))
	}
	chat2, chat2State := "", atestate.ActorSuspended // one node: chat-2 waits suspended
	switch {
	case capacity > 1: // multi-actor workers: chat-2 shares chat-1's worker
		chat2, chat2State = small[0].Name, atestate.ActorRunning
	case len(small) > 1:
		chat2, chat2State = small[1].Name, atestate.ActorRunning
	}
	sel := func(size string) map[string]string { return map[string]string{"size": size} }
	snap := func(ref string) string { return "gs://ate-snapshots/" + ref + "/v1" }
	actors := []fakesubstrate.Actor{
		{Atespace: "demo", Name: "chat-1", State: atestate.ActorRunning, Worker: small[0].Name,
			WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/chat-1")},
		{Atespace: "demo", Name: "chat-2", State: chat2State, Worker: chat2,
			WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/chat-2")},
		{Atespace: "batch", Name: "job-1", State: atestate.ActorRunning, Worker: batch[0].Name,
			WorkerSelector: sel("batch"), ExternalSnapshotURI: snap("batch/job-1")},
		{Atespace: "batch", Name: "job-2", WorkerSelector: sel("batch"), ExternalSnapshotURI: snap("batch/job-2")},
		{Atespace: "team-a", Name: "etl-1", State: atestate.ActorRunning, Worker: large[0].Name,
			WorkerSelector: sel("large"), ExternalSnapshotURI: snap("team-a/etl-1")},
		{Atespace: "demo", Name: "notebook-1", State: atestate.ActorPaused,
			AssignedNode: small[0].Node, SnapshotNodes: []string{small[0].Node},
			WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/notebook-1")},
		{Atespace: "team-a", Name: "etl-2", State: atestate.ActorPaused, AssignedNode: large[0].Node,
			SnapshotNodes:  []string{large[0].Node},
			WorkerSelector: sel("large"), ExternalSnapshotURI: snap("team-a/etl-2")},
		{Atespace: "demo", Name: "chat-3", WorkerSelector: sel("small"), ExternalSnapshotURI: snap("demo/chat-3")},
		{Atespace: "team-a", Name: "etl-3", WorkerSelector: sel("large"), ExternalSnapshotURI: snap("team-a/etl-3")},
	}
	// A big inventory for fleet benchmarks: suspended actors whose selector
	// no worker of this fleet matches (traffic never wakes them), so every
	// list pages through them while no node carries them.
	extra, _ := strconv.Atoi(os.Getenv(EnvExtraActors))
	for i := range extra {
		actors = append(actors, fakesubstrate.Actor{Atespace: "bench", Name: fmt.Sprintf("idle-%05d", i),
			WorkerSelector: sel("elsewhere"), ExternalSnapshotURI: snap(fmt.Sprintf("bench/idle-%05d", i))})
	}
	busy, _ := strconv.Atoi(os.Getenv(EnvBusyActors))
	actors = append(actors, busyActors(busy, max(1, capacity), actors, [][]fakesubstrate.Worker{small, large, batch},
		[]string{"small", "large", "batch"})...)
	for _, a := range actors {
		if err := sub.Server.AddActor(a); err != nil {
			return err
		}
	}
	return nil
}

// EnvWorkerSlots sets how many worker pods fit on one node (WorkerSlots
// when unset). On a fleet of two, the first node flipped holds every
// clone's pods: with fewer slots than they need, the scheduler's order
// decides which lineage gets none, and the second node cannot move.
const EnvWorkerSlots = "ROLLBOOK_SIM_ATE_WORKER_SLOTS"

// EnvExtraActors adds this many idle actors to ate-fleet's inventory.
const EnvExtraActors = "ROLLBOOK_SIM_ATE_EXTRA_ACTORS"

// EnvBusyActors adds up to this many RUNNING actors per node, bound to the
// node's workers as their free slots allow (many residents on one node: in
// era D a worker hosts ROLLBOOK_SIM_ATE_WORKER_CAPACITY actors).
const EnvBusyActors = "ROLLBOOK_SIM_ATE_BUSY_ACTORS"

// busyActors binds up to n RUNNING actors to each node's workers (pools,
// with the size each one's actors select), into the slots seeded leaves free.
func busyActors(n, capacity int, seeded []fakesubstrate.Actor, pools [][]fakesubstrate.Worker, sizes []string) []fakesubstrate.Actor {
	used := map[string]int{}
	for _, a := range seeded {
		used[a.Worker]++
	}
	perNode := map[string]int{}
	var out []fakesubstrate.Actor
	for free := true; free; {
		free = false // one actor per worker per pass, so a node's actors spread over its pools
		for i, ws := range pools {
			for _, w := range ws {
				if perNode[w.Node] >= n || used[w.Name] >= capacity {
					continue
				}
				free = true
				used[w.Name]++
				perNode[w.Node]++
				name := fmt.Sprintf("%s-%02d", w.Node, perNode[w.Node])
				out = append(out, fakesubstrate.Actor{Atespace: "busy", Name: name, State: atestate.ActorRunning, Worker: w.Name,
					WorkerSelector: map[string]string{"size": sizes[i]}, ExternalSnapshotURI: "gs://ate-snapshots/busy/" + name + "/v1"})
			}
		}
	}
	return out
}

// fakeDigest stands in for the image digest `crane digest` would print.
func fakeDigest(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return hex.EncodeToString(sum[:])
}
