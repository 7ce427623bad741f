package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/sim/tthost"
)

// TTAgent is the kubectl-tt binary the tt scenarios' helper runner runs;
// `sim up --tt-agent` sets it. Empty: kubectl-tt next to the sim binary,
// else on PATH.
var TTAgent string

// TTImage is the node-agent image's OCI layout the helper runner runs
// helpers from (`sim up --tt-image`, env ROLLBOOK_TT_IMAGE), its layers
// unpacked into TTImageStore.
var TTImage, TTImageStore string

// TTImageMirrors are repositories that serve TTImage too, by digest
// (sim up --tt-image-mirror): where a release pushed it.
var TTImageMirrors []string

// TTRealHostRootfs, when set, is the real-host root filesystem every tt
// node's host root is an overlay of (`sim up --tt-realhost-rootfs`, env
// tthost.EnvRealHostRootfs; tthost/realhost.go).
var TTRealHostRootfs string

// Objects of the tt scenarios.
const (
	ttSystemNS    = "tt-system"
	ttWorkloadsNS = "tt-workloads"
	ttTelemetry   = "tt-telemetry"
	ttInference   = "tt-inference"
	labelUsesDev  = "tenstorrent.com/uses-device"
	csiNode       = "csi-node"
)

// The node mapping (tthost.PlanFleet): plain nodes first, the last plain
// one is a Galaxy; with tt-fleet and >= 5 nodes, or always with
// tt-fleet-awkward, the last three nodes are host-managed (DKMS),
// driver.tenstorrent.com/skip=true and stubborn (a host process holds
// /dev/tenstorrent/0). With 3 nodes tt-fleet keeps all three plain so a
// simple roll works.
func init() {
	Register(Scenario{
		Name: "tt-fleet",
		Description: "Tenstorrent fleet at tt-kmd 2.7.0 / tt-smi 5.0.0 / fw 18.2.0.0 (PCIe boards, the last plain node a Galaxy), " +
			"tt-telemetry DaemonSet (tt-system) and tt-inference Deployment + PDB (tt-workloads) holding /dev/tenstorrent, " +
			"helper pods run for real; with >= 5 nodes the last three are DKMS, skip-labelled and stubborn-holder nodes",
		Setup: func(ctx context.Context, env *Env) error {
			return setupTTFleet(ctx, env, env.Nodes, len(env.Nodes) >= tthost.AwkwardMin)
		},
	})
	Register(Scenario{
		Name: "tt-fleet-awkward",
		Description: "tt-fleet that always has the awkward nodes (needs >= 5 nodes): the last three are a DKMS/host-managed node, " +
			"a driver.tenstorrent.com/skip=true node and a node where a host process (no pod) holds /dev/tenstorrent/0",
		Setup: func(ctx context.Context, env *Env) error { return setupTTFleet(ctx, env, env.Nodes, true) },
	})
}

func setupTTFleet(ctx context.Context, env *Env, nodes []string, awkward bool) error {
	plan, err := tthost.PlanFleet(nodes, awkward)
	if err != nil {
		return err
	}
	if err := applyHostFaults(plan, env.Logf); err != nil {
		return err
	}
	situations, err := tthost.ApplySituations(plan, os.Getenv)
	if err != nil {
		return err
	}
	for _, l := range situations {
		env.Logf("%s", l)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	agent, err := tthost.ResolveAgent(TTAgent, exe)
	if err != nil {
		return err
	}
	hosts, err := tthost.NewHosts(env.Dir, toolsExe(exe), tthost.OfferedTTSMI)
	if err != nil {
		return err
	}
	reachable := []string{filepath.Join(env.Dir, "bundles")}
	if TTRealHostRootfs != "" {
		dir, err := realHosts(env, plan, hosts)
		if err != nil {
			return err
		}
		reachable = append(reachable, dir)
	}
	for _, p := range plan {
		add := func() (string, error) { return hosts.Add(p.Node, p.Spec) }
		if TTRealHostRootfs != "" {
			add = func() (string, error) { return hosts.AddReal(p.Node, p.Spec, TTRealHostRootfs) }
		}
		if _, err := add(); err != nil {
			return err
		}
		if err := labelNode(ctx, env, p.Node, p.Labels); err != nil {
			return err
		}
		if err := reportKernel(ctx, env, p.Node, p.Spec.Kernel); err != nil {
			return err
		}
		env.Logf("tt host %s: %s%s, %d devices, kmd %s (root %s/%s)", p.Node, p.Role, map[bool]string{true: " galaxy"}[p.Galaxy],
			len(p.Spec.Devices), p.Spec.LoadedKMD, hosts.Dir, p.Node)
	}
	outside := os.Getenv(tthost.EnvOutsideImage) == "1"
	var image *tthost.Image
	if TTImage != "" && !outside {
		if image, err = tthost.LoadImage(TTImage, TTImageStore); err != nil {
			return fmt.Errorf("the node-agent image (--tt-image): %w", err)
		}
		image.Mirrors = TTImageMirrors
		env.OnStop(image.Close)
	}
	holders := &tthost.HolderSync{Client: env.Client, Hosts: hosts, Logf: env.Logf}
	events := &tthost.HostEvents{Hosts: hosts, Report: env.Monitor}
	runner := &tthost.Runner{Client: env.Client, Hosts: hosts, Agent: agent, Logf: env.Logf, Ran: events.Touch,
		Image: image, OutsideImage: outside,
		// The firmware bundles' and the kmd remote's file:// URLs name
		// these directories: a node fetching a URL reaches them.
		Reachable: reachable}
	env.Go("tt-holders", holders.Run)
	env.Go("tt-helper-runner", runner.Run)
	env.Go("tt-host-events", events.Run)
	env.Logf("tt helper runner: agent %s, %s, runs logged to %s/runner.log", agent, runner.Mode(), hosts.Dir)
	if err := writeBundles(env.Dir); err != nil {
		return err
	}

	replicas := int32(max(1, len(plan)-1))
	for _, o := range []func() error{
		func() error { return applyHelperPrerequisites(ctx, env) },
		func() error { return createNS(ctx, env, ttSystemNS) },
		func() error { return createNS(ctx, env, ttWorkloadsNS) },
		func() error {
			_, err := env.Client.AppsV1().DaemonSets(ttSystemNS).Create(ctx, telemetryDS(), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := env.Client.AppsV1().DaemonSets(ttSystemNS).Create(ctx, csiNodeDS(), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := env.Client.SchedulingV1().PriorityClasses().Create(ctx, inferencePriority(), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := env.Client.AppsV1().Deployments(ttWorkloadsNS).Create(ctx, inferenceDeployment(replicas), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := env.Client.PolicyV1().PodDisruptionBudgets(ttWorkloadsNS).Create(ctx, inferencePDB(max(0, replicas-pdbDisruptions())),
				metav1.CreateOptions{})
			return err
		},
	} {
		if err := o(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if err := waitWorkloads(ctx, env, int32(len(plan)), replicas); err != nil {
		return err
	}
	return waitHolders(ctx, env, hosts, holders)
}

// realHosts readies plan's nodes for real-host roots: each runs the
// rootfs's kernel with nothing cached (a fake module would fail the real
// modinfo), and the stand-in tt-kmd remote is written. It returns the
// remote's directory, which helpers must reach.
func realHosts(env *Env, plan []tthost.NodePlan, hosts *tthost.Hosts) (string, error) {
	if os.Getenv(tthost.EnvOutsideImage) == "1" {
		return "", fmt.Errorf("real-host nodes (%s) run helpers inside the image only; unset %s", tthost.EnvRealHostRootfs, tthost.EnvOutsideImage)
	}
	kver, err := tthost.RealHostKernel(TTRealHostRootfs)
	if err != nil {
		return "", err
	}
	for i := range plan {
		plan[i].Spec.Kernel, plan[i].Spec.CachedKMD = kver, nil
	}
	if env.OnStop != nil {
		env.OnStop(func() {
			if err := hosts.Unmount(); err != nil {
				env.Logf("%v", err)
			}
		})
	}
	url, err := tthost.WriteKMDRemote(env.Dir)
	if err != nil {
		return "", err
	}
	env.Logf("tt hosts: real-host roots (overlays of %s, kernel %s); the stand-in tt-kmd remote is --git-url %s",
		TTRealHostRootfs, kver, url)
	return filepath.Join(env.Dir, tthost.KMDRemoteDir), nil
}

// reportKernel sets the node's status.nodeInfo.kernelVersion to its host's
// kernel, as a kubelet reports uname -r, and NFD's kernel-version.full
// label, as nfd-worker does.
func reportKernel(ctx context.Context, env *Env, node, kernel string) error {
	if kernel == "" {
		kernel = fakehost.DefaultKernel
	}
	if err := labelNode(ctx, env, node, map[string]string{"feature.node.kubernetes.io/kernel-version.full": kernel}); err != nil {
		return err
	}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kernelVersion": kernel}}})
	if err != nil {
		return err
	}
	_, err = env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{}, "status")
	return err
}

func labelNode(ctx context.Context, env *Env, node string, labels map[string]string) error {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	_, err = env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

// applyHelperPrerequisites is what a cluster admin applies before the first
// kubectl tt run: the helper namespace and its PriorityClass (deploy/).
func applyHelperPrerequisites(ctx context.Context, env *Env) error {
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		return err
	}
	for _, f := range []string{deploy.NamespaceFile, deploy.PriorityClassFile} {
		if err := deploy.Apply(ctx, dyn, f, nil); err != nil {
			return err
		}
	}
	return nil
}

func createNS(ctx context.Context, env *Env, name string) error {
	_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}},
		metav1.CreateOptions{})
	return err
}

func deviceVolume() corev1.Volume {
	return corev1.Volume{Name: "dev-tenstorrent", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: "/dev/tenstorrent"}}}
}

// telemetryDS follows the operator's deploy-gate contract (docs/tt.md, the gate labels):
// it runs on Tenstorrent nodes unless the gate label is "false", so
// setting the gate to false removes it and deleting the label (what the
// operator does on uncordon) brings it back.
func telemetryDS() *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": ttTelemetry}
	podLabels := map[string]string{"app.kubernetes.io/name": ttTelemetry, labelUsesDev: "true"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: ttTelemetry, Namespace: ttSystemNS, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchExpressions: []corev1.NodeSelectorRequirement{
								{Key: tthost.LabelPCI, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}},
								{Key: tthost.LabelTelemetryGate, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"false"}},
							},
						}}},
					}},
					Containers: []corev1.Container{{
						Name: "telemetry", Image: "ghcr.io/tenstorrent/tt-telemetry:v0.4.0",
						VolumeMounts: []corev1.VolumeMount{{Name: "dev-tenstorrent", MountPath: "/dev/tenstorrent"}},
					}},
					Volumes: []corev1.Volume{deviceVolume()},
				},
			},
		},
	}
}

// csiNodeDS is a CSI node plugin as storage drivers ship it: privileged,
// host /dev mounted to find block devices, on every node. It never opens
// /dev/tenstorrent, so it must never count as a device holder.
func csiNodeDS() *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": csiNode}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: csiNode, Namespace: ttSystemNS, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "node-driver", Image: "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.37.0",
						SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)},
						VolumeMounts:    []corev1.VolumeMount{{Name: "dev", MountPath: "/dev"}},
					}},
					Volumes: []corev1.Volume{{Name: "dev", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/dev"}}}},
				},
			},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// inferencePriority is the inference replicas' PriorityClass: priority 0,
// as without one, and no preemption. A replica evicted by a drain waits
// Pending for a node (one per node, one spare), and on every node change the
// real scheduler retries it and, with preemption, dry-runs it on every node,
// cloning each node's scheduling state: O(nodes²) per attempt (measured
// with the required anti-affinity the replicas had then). At priority 0
// nothing can be preempted anyway, so that work finds nothing; at 1,000
// nodes it tripled the sim's CPU per node and slowed every drain
// (docs/performance.md).
func inferencePriority() *schedulingv1.PriorityClass {
	never := corev1.PreemptNever
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ttInference}, Value: 0, PreemptionPolicy: &never,
		Description: "tt-fleet inference replicas: priority 0, never preempting"}
}

// inferenceDeployment runs one replica per node at most and leaves one node
// free, so an evicted replica has somewhere to go. One per node comes from
// the server's host port, as inference servers are often exposed, not from
// required pod anti-affinity: the scheduler's NodePorts filter is a map
// lookup per node, while the anti-affinity filter counts matching pods per
// topology domain for every Pending replica on every retry — at 1,000 nodes
// 16 % of the sim's CPU, on the cores the fleet bench measures the roll on.
func inferenceDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": ttInference}
	podLabels := map[string]string{"app": ttInference, labelUsesDev: "true"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: ttInference, Namespace: ttWorkloadsNS, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					NodeSelector:      map[string]string{tthost.LabelPCI: "true"},
					PriorityClassName: ttInference,
					Containers: []corev1.Container{{
						Name: "inference", Image: "ghcr.io/tenstorrent/tt-inference-server:v0.9.0",
						Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, HostPort: 8000, Protocol: corev1.ProtocolTCP}},
						VolumeMounts: []corev1.VolumeMount{{Name: "dev-tenstorrent", MountPath: "/dev/tenstorrent"}},
					}},
					Volumes: []corev1.Volume{deviceVolume()},
				},
			},
		},
	}
}

// inferencePDB lets at most one replica be disrupted at a time.
// EnvPDBDisruptions is how many inference replicas the PDB lets go at once
// (default 1): a fleet sized for --max-parallel K drains allows K.
const EnvPDBDisruptions = "ROLLBOOK_SIM_TT_PDB_DISRUPTIONS"

func pdbDisruptions() int32 {
	if n, err := strconv.Atoi(os.Getenv(EnvPDBDisruptions)); err == nil && n > 0 {
		return int32(n)
	}
	return 1
}

func inferencePDB(minAvailable int32) *policyv1.PodDisruptionBudget {
	m := intstr.FromInt32(minAvailable)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: ttInference, Namespace: ttWorkloadsNS},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &m,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": ttInference}},
		},
	}
}

// waitWorkloads watches until telemetry runs on every tt node and every
// inference replica is available, so READY means the devices are held.
func waitWorkloads(ctx context.Context, env *Env, ttNodes, replicas int32) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	dsLW := listWatch(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return env.Client.AppsV1().DaemonSets(ttSystemNS).List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return env.Client.AppsV1().DaemonSets(ttSystemNS).Watch(ctx, o)
	}, ttTelemetry)
	if _, err := watchtools.UntilWithSync(ctx, dsLW, &appsv1.DaemonSet{}, nil, func(e watch.Event) (bool, error) {
		ds, ok := e.Object.(*appsv1.DaemonSet)
		return ok && ds.Status.DesiredNumberScheduled == ttNodes && ds.Status.NumberReady == ttNodes, nil
	}); err != nil {
		return fmt.Errorf("waiting for %s/%s on %d nodes: %w", ttSystemNS, ttTelemetry, ttNodes, err)
	}
	depLW := listWatch(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return env.Client.AppsV1().Deployments(ttWorkloadsNS).List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return env.Client.AppsV1().Deployments(ttWorkloadsNS).Watch(ctx, o)
	}, ttInference)
	if _, err := watchtools.UntilWithSync(ctx, depLW, &appsv1.Deployment{}, nil, func(e watch.Event) (bool, error) {
		d, ok := e.Object.(*appsv1.Deployment)
		return ok && d.Status.AvailableReplicas == replicas, nil
	}); err != nil {
		return fmt.Errorf("waiting for %s/%s (%d replicas): %w", ttWorkloadsNS, ttInference, replicas, err)
	}
	return nil
}

func listWatch(list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchF func(context.Context, metav1.ListOptions) (watch.Interface, error), name string) *cache.ListWatch {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return watchF(ctx, o)
		},
	}
}

// waitHolders waits until the holder sync has opened the devices for every
// Running device pod. The holders are files, not API objects, so this
// polls briefly.
func waitHolders(ctx context.Context, env *Env, hosts *tthost.Hosts, hs *tthost.HolderSync) error {
	var want []string
	for _, ns := range []string{ttSystemNS, ttWorkloadsNS} {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labelUsesDev + "=true"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if hosts.DevicesOpen(p.Spec.NodeName) && p.Status.Phase == corev1.PodRunning {
				want = append(want, p.Namespace+"/"+p.Name)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var missing []string
		for _, k := range want {
			if !hs.Holding(k) {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			env.Logf("tt workloads ready: %d pods hold /dev/tenstorrent", len(want))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("device holders not opened for: %s", strings.Join(missing, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// BundleVersions are the firmware bundles the sim offers: flash with
// --bundle-url file://<sim dir>/bundles/fw_pack-<version>.fwbundle.
var BundleVersions = []string{"18.2.0", "19.0.0", "19.9.0"}

// writeBundles lays out the firmware bundles a flash can fetch (the sim has
// no network; helpers read them as file:// URLs).
func writeBundles(dir string) error {
	bdir := filepath.Join(dir, "bundles")
	if err := os.MkdirAll(bdir, 0o755); err != nil {
		return err
	}
	for _, v := range BundleVersions {
		if err := fakehost.WriteBundle(filepath.Join(bdir, "fw_pack-"+v+".fwbundle"), v); err != nil {
			return err
		}
	}
	return nil
}

// Environment knobs for the hosts' awkward firmware cases (`sim up` has no
// per-scenario flags; simtest passes its environment through):
const (
	EnvFlashDelay = "ROLLBOOK_SIM_TT_FLASH_DELAY" // every tt-flash takes this long (Go duration)
	EnvFailFlash  = "ROLLBOOK_SIM_TT_FAIL_FLASH"  // comma-separated nodes whose first chip fails to flash
	EnvWedged     = "ROLLBOOK_SIM_TT_WEDGED"      // comma-separated nodes whose readback fails until one reset
	// The fleet benchmark's knobs: how long a module build (make) and a
	// module load (insmod, all a cache hit costs) take, and the kernels the
	// nodes run (node i runs kernel i mod N: N kernel groups).
	EnvBuildDelay = "ROLLBOOK_SIM_TT_BUILD_DELAY"
	EnvLoadDelay  = "ROLLBOOK_SIM_TT_LOAD_DELAY"
	EnvKernels    = "ROLLBOOK_SIM_TT_KERNELS"
)

func envDuration(env string) (time.Duration, error) {
	v := os.Getenv(env)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration", env, v)
	}
	return d, nil
}

func applyHostFaults(plan []tthost.NodePlan, logf func(string, ...any)) error {
	var delay time.Duration
	if v := os.Getenv(EnvFlashDelay); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("%s=%q: want a duration", EnvFlashDelay, v)
		}
		delay = d
	}
	in := func(env, node string) bool {
		for _, n := range strings.Split(os.Getenv(env), ",") {
			if strings.TrimSpace(n) == node {
				return true
			}
		}
		return false
	}
	build, err := envDuration(EnvBuildDelay)
	if err != nil {
		return err
	}
	load, err := envDuration(EnvLoadDelay)
	if err != nil {
		return err
	}
	var kernels []string
	for _, k := range strings.Split(os.Getenv(EnvKernels), ",") {
		if k = strings.TrimSpace(k); k != "" {
			kernels = append(kernels, k)
		}
	}
	for i := range plan {
		p := &plan[i]
		p.Spec.FlashDelay = delay
		p.Spec.BuildDelay, p.Spec.LoadDelay = build, load
		if len(kernels) > 0 && len(p.Spec.CachedKMD) > 0 {
			// Another kernel: its cache and headers follow it.
			p.Spec.Kernel = kernels[i%len(kernels)]
		}
		if in(EnvFailFlash, p.Node) && len(p.Spec.Devices) > 0 {
			p.Spec.Devices[0].FailFlash = true
			logf("tt host %s: chip 0 will fail to flash", p.Node)
		}
		if in(EnvWedged, p.Node) {
			p.Spec.Wedged = true
			logf("tt host %s: readback fails until one reset", p.Node)
		}
	}
	return nil
}

// toolsExe is the binary the hosts' fake tools link to: the lean sim-tools
// built next to the sim (see sim/cmd/sim-tools), else the sim itself.
func toolsExe(sim string) string {
	if t := sim + "-tools"; fileExists(t) {
		return t
	}
	return sim
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
