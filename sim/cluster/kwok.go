package cluster

// kwok's node/pod simulation run as a library (same wiring as
// sigs.k8s.io/kwok/pkg/kwok/cmd.runE, minus its HTTP server and CRD mode),
// with the default "fast" stages plus our own stages from stages/*.yaml.

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"log"
	"os"
	"sigs.k8s.io/yaml"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	kwokcrd "sigs.k8s.io/kwok/kustomize/crd"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeatwithlease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	configv1alpha1 "sigs.k8s.io/kwok/pkg/apis/config/v1alpha1"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/apis/v1alpha1"
	"sigs.k8s.io/kwok/pkg/client/clientset/versioned"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/controllers"
	"sigs.k8s.io/kwok/pkg/kwok/server"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/client"
)

//go:embed stages/*.yaml
var extraStages embed.FS

// loadStagesRaw returns the Stage documents: kwok's default "fast" node and
// pod stages, our embedded stages/*.yaml, then any extra files.
func loadStagesRaw(extraFiles []string, singleArch map[string]string) ([]string, error) {
	// Pods labelled rollbook.dev/helper belong to the simulator's helper
	// runner: no kwok pod stage may set their status. kwok's pod-delete stage
	// is left out for every pod: it deletes by name, so reapDeletedPods
	// finishes deletions instead, by UID as a kubelet does. Deleting a helper
	// still finishes at once and the runner only has to treat "gone" as
	// cancellation.
	raws := []string{
		skipNotReadyNodes(nodefast.DefaultNodeInit),
		skipNotReadyNodes(nodeheartbeatwithlease.DefaultNodeHeartbeatWithLease),
		awaitPull(excludeHelperPods(podfast.DefaultPodReady), singleArch),
		excludeHelperPods(exclusivePodComplete()),
	}
	_ = fs.WalkDir(extraStages, "stages", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := extraStages.ReadFile(p)
			for _, doc := range splitYAML(string(b)) {
				raws = append(raws, excludeHelperPods(doc))
			}
		}
		return nil
	})
	for _, f := range extraFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		raws = append(raws, splitYAML(string(b))...)
	}
	return raws, nil
}

func loadStages(extraFiles []string, singleArch map[string]string) (map[internalversion.StageResourceRef][]*internalversion.Stage, error) {
	raws, err := loadStagesRaw(extraFiles, singleArch)
	if err != nil {
		return nil, err
	}
	out := map[internalversion.StageResourceRef][]*internalversion.Stage{}
	for _, r := range raws {
		st, err := config.UnmarshalWithType[*internalversion.Stage](r)
		if err != nil {
			return nil, fmt.Errorf("stage: %w", err)
		}
		out[st.Spec.ResourceRef] = append(out[st.Spec.ResourceRef], st)
	}
	return out, nil
}

// exclusivePodComplete is kwok's default "Job pods succeed" stage, restricted to
// pods WITHOUT the sim.rollbook.dev/complete label, so that label alone decides the
// outcome (and a Job pod labelled sim.rollbook.dev/complete=false really fails
// instead of racing with the default stage).
func exclusivePodComplete() string {
	const anchor = "    matchExpressions:\n"
	if !strings.Contains(podfast.DefaultPodComplete, anchor) {
		panic("kwok pod-complete stage layout changed")
	}
	return strings.Replace(podfast.DefaultPodComplete, anchor, anchor+
		"    - key: '.metadata.labels[\"sim.rollbook.dev/complete\"]'\n      operator: 'DoesNotExist'\n", 1)
}

// HelperLabel marks pods whose status is owned by the simulator's helper runner.
const HelperLabel = "rollbook.dev/helper"

// excludeHelperPods adds "label rollbook.dev/helper does not exist" to the
// selector of a Pod stage (any value of the label excludes the pod).
func excludeHelperPods(stage string) string {
	const anchor = "    matchExpressions:\n"
	if !strings.Contains(stage, "kind: Pod\n") {
		return stage
	}
	if !strings.Contains(stage, anchor) {
		panic("pod stage without selector.matchExpressions")
	}
	return strings.Replace(stage, anchor, anchor+
		"    - key: '.metadata.labels[\""+HelperLabel+"\"]'\n      operator: 'DoesNotExist'\n", 1)
}

// NotReadyLabel set to "true" on a node holds its Ready condition False
// (stages/node-not-ready.yaml): the node's kubelet is down.
const NotReadyLabel = "sim.rollbook.dev/not-ready"

// skipNotReadyNodes adds "label sim.rollbook.dev/not-ready is not true" to
// the selector of a Node stage, so that stage cannot set Ready=True again.
func skipNotReadyNodes(stage string) string {
	const anchor = "    matchExpressions:\n"
	if !strings.Contains(stage, "kind: Node\n") || !strings.Contains(stage, anchor) {
		panic("node stage without selector.matchExpressions")
	}
	return strings.Replace(stage, anchor, anchor+
		"    - key: '.metadata.labels[\""+NotReadyLabel+"\"]'\n      operator: 'NotIn'\n      values:\n      - 'true'\n", 1)
}

func splitYAML(s string) []string {
	var out []string
	for _, doc := range strings.Split(s, "\n---") {
		if strings.TrimSpace(doc) != "" {
			out = append(out, doc)
		}
	}
	return out
}

// kwokServer, when set, makes runKwok also serve the kubelet API (logs, exec,
// attach, port-forward) on 127.0.0.1:Port over TLS, driven by kwok's Logs /
// ClusterLogs / Exec ... custom resources. The fake nodes must then report
// InternalIP 127.0.0.1 so that the apiserver dials this server.
type kwokServer struct {
	Port              int
	CertFile, KeyFile string
}

// kwokServerCRDs are installed by "up" when the kwok server is enabled.
var kwokServerCRDs = map[string][]byte{
	v1alpha1.LogsKind:        kwokcrd.Logs,
	v1alpha1.ClusterLogsKind: kwokcrd.ClusterLogs,
	v1alpha1.ExecKind:        kwokcrd.Exec,
	v1alpha1.ClusterExecKind: kwokcrd.ClusterExec,
	// kubectl port-forward pod/X or svc/X: bytes go to a local address.
	v1alpha1.PortForwardKind:        kwokcrd.PortForward,
	v1alpha1.ClusterPortForwardKind: kwokcrd.ClusterPortForward,
}

// runKwok blocks until ctx is done.
func runKwok(ctx context.Context, kubeconfig string, extraStageFiles []string, verbose bool, leaseSeconds int, srv *kwokServer) error {
	lvl := kwoklog.LevelWarn
	if verbose {
		lvl = kwoklog.LevelInfo
	}
	ctx = kwoklog.NewContext(ctx, kwoklog.NewLogger(os.Stderr, lvl))

	vconf := &configv1alpha1.KwokConfiguration{}
	configv1alpha1.SetObjectDefaults_KwokConfiguration(vconf)
	opts, err := internalversion.ConvertToInternalKwokConfiguration(vconf)
	if err != nil {
		return err
	}
	pulls, err := loadPullRules()
	if err != nil {
		return err
	}
	stages, err := loadStages(extraStageFiles, pulls.gated())
	if err != nil {
		return err
	}
	cs, err := client.NewClientset("", kubeconfig)
	if err != nil {
		return err
	}
	restConfig, err := cs.ToRESTConfig()
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = 500, 1000
	dyn, err := cs.ToDynamicClient()
	if err != nil {
		return err
	}
	mapper, err := cs.ToRESTMapper()
	if err != nil {
		return err
	}
	restClient, err := rest.RESTClientFor(restConfig)
	if err != nil {
		return err
	}
	typed, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	kwokClient, err := versioned.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	id, err := controllers.Identity()
	if err != nil {
		return err
	}
	o := opts.Options
	// KwokConfiguration's defaults leave NodeLeaseDurationSeconds at 0 (only
	// kwokctl defaults it to 40): then kwok creates no Leases in
	// kube-node-lease and Node liveness rests on status heartbeats alone.
	if o.NodeLeaseDurationSeconds == 0 {
		o.NodeLeaseDurationSeconds = 40
	}
	if leaseSeconds > 0 {
		o.NodeLeaseDurationSeconds = uint(leaseSeconds)
	}
	if srv != nil {
		o.NodeIP, o.NodePort = "127.0.0.1", srv.Port
	}
	ctr, err := controllers.NewController(controllers.Config{
		Clock:                           clock.RealClock{},
		DynamicClient:                   dyn,
		RESTClient:                      restClient,
		RESTMapper:                      mapper,
		ImpersonatingDynamicClient:      cs.ToImpersonatingDynamicClient(),
		ImpersonatingTypedClient:        cs.ToImpersonatingTypedClient(),
		TypedClient:                     typed,
		TypedKwokClient:                 kwokClient,
		ManageAllNodes:                  true,
		CIDR:                            o.CIDR,
		NodeIP:                          o.NodeIP,
		NodeName:                        o.NodeName,
		NodePort:                        o.NodePort,
		LocalStages:                     stages,
		PodPlayStageParallelism:         o.PodPlayStageParallelism,
		NodePlayStageParallelism:        o.NodePlayStageParallelism,
		NodeLeaseParallelism:            o.NodeLeaseParallelism,
		NodeLeaseDurationSeconds:        o.NodeLeaseDurationSeconds,
		PodsOnNodeSyncParallelism:       o.PodsOnNodeSyncParallelism,
		EnablePodsOnNodeSyncListPager:   o.EnablePodsOnNodeSyncListPager,
		EnablePodsOnNodeSyncStreamWatch: o.EnablePodsOnNodeSyncStreamWatch,
		ID:                              id,
	})
	if err != nil {
		return err
	}
	if err := ctr.Start(ctx); err != nil {
		return err
	}
	go func() {
		if err := reapDeletedPods(ctx, typed); err != nil {
			log.Printf("sim-pod-reaper: %v", err)
		}
	}()
	if len(pulls.gated()) > 0 {
		go func() {
			if err := pullImages(ctx, typed, pulls); err != nil {
				log.Printf("sim-image-pull: %v", err)
			}
		}()
	}
	go func() {
		if err := resyncPodReadiness(ctx, typed); err != nil {
			log.Printf("sim-pod-readiness: %v", err)
		}
	}()
	if srv != nil {
		var enable []string
		for k := range kwokServerCRDs {
			enable = append(enable, k)
		}
		svc, err := server.NewServer(server.Config{
			TypedKwokClient: kwokClient,
			EnableCRDs:      enable,
			DataSource:      ctr,
			NodeCacheGetter: ctr.GetNodeCache(),
			PodCacheGetter:  ctr.GetPodCache(),
		})
		if err != nil {
			return err
		}
		svc.InstallHealthz()
		svc.InstallDebuggingHandlers()
		if err := svc.InstallCRD(ctx); err != nil {
			return err
		}
		// A kubelet-API server that cannot bind (its port taken) would send
		// the apiserver's logs/exec/port-forward to whoever has the port:
		// that must stop the sim, not just log.
		failed := make(chan error, 1)
		go func() {
			addr := fmt.Sprintf("127.0.0.1:%d", srv.Port)
			if err := svc.Run(ctx, addr, srv.CertFile, srv.KeyFile); err != nil && ctx.Err() == nil {
				failed <- fmt.Errorf("kubelet-API server on %s: %w", addr, err)
			}
		}()
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func installKwokCRDs(ctx context.Context, cfg *rest.Config) error {
	ac, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for kind, raw := range kwokServerCRDs {
		crd := &apiextv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		if _, err := ac.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	return nil
}
