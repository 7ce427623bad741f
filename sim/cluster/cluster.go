// Package cluster runs a loopback-only Kubernetes control plane in this
// process: embedded etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok (fake nodes whose pods go Running/Ready).
package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options configure Up.
type Options struct {
	Dir          string // state directory; wiped and recreated
	Nodes        int    // fake nodes to register
	NodePrefix   string // node names are <prefix><i>
	Verbosity    int    // klog verbosity of the components
	APIServerArg []string
	KCMArg       []string
	SchedulerArg []string
	// NodeLeaseSeconds is the fake nodes' Lease duration (kubelet default 40;
	// renewed every quarter of it). A benchmark of thousands of nodes on two
	// cores raises it, or the renewals alone keep both cores busy; the node
	// lifecycle controller's grace period follows it.
	NodeLeaseSeconds int
	// RestartableAPIServer puts a TCP front before the kube-apiserver so
	// that RestartAPIServer ends every connection at once, as a real
	// restart does (a relay's cost on every request; off by default).
	RestartableAPIServer bool
	Logf                 func(format string, a ...any)
}

// Cluster is a running control plane.
type Cluster struct {
	Kubeconfig string
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	PKI        *PKI

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopEtcd func()
	etcd     *embed.Etcd
	runCtx   context.Context
	apiArgs  []string
	// apiMu guards the running kube-apiserver's stop and exit (restarts).
	apiMu   sync.Mutex
	apiStop context.CancelFunc
	apiDone chan struct{}
	front   *front // nil: clients reach the apiserver directly
	// Failed receives an error when a component stops on its own.
	Failed chan error
	logf   func(format string, a ...any)
}

// Up starts every component, registers the fake nodes and returns once they
// are Ready and the default ServiceAccount exists (pods can be created).
func Up(ctx context.Context, o Options) (*Cluster, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if _, err := loadPullRules(); err != nil {
		return nil, err // bad input: refused before anything starts
	}
	if o.NodePrefix == "" {
		o.NodePrefix = "kwok-node-"
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := PortLock()
	if err != nil {
		return nil, err
	}
	// Held until Up returns: by then every component listens on its port.
	defer unlock()
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	etcdClientPort, etcdPeerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	// The apiserver's own port: the front's backend, or the port itself.
	servePort := apiPort
	if o.RestartableAPIServer {
		servePort = ports[6]
	}

	pki, err := generatePKI(dir, apiPort)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	kc := pki.AdminKubeconfig

	e, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"), etcdClientPort, etcdPeerPort)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	o.Logf("embedded etcd ready at %s", etcdURL)

	runCtx, cancel := context.WithCancel(context.Background())
	c := &Cluster{Kubeconfig: kc, PKI: pki, cancel: cancel, stopEtcd: func() { e.Close() }, etcd: e, runCtx: runCtx,
		Failed: make(chan error, 8), logf: o.Logf}

	v := fmt.Sprintf("--v=%d", o.Verbosity)
	apiArgs := append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", servePort),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + pki.ServingCert,
		"--tls-private-key-file=" + pki.ServingKey,
		"--client-ca-file=" + pki.CACert,
		"--requestheader-client-ca-file=" + pki.CACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki.ProxyCert,
		"--proxy-client-key-file=" + pki.ProxyKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.SAPub,
		"--service-account-signing-key-file=" + pki.SAKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// The kubernetes Service has no endpoints then; nothing here needs them.
		"--endpoint-reconciler-type=none",
		// Dial fake kubelets (kwok's server) at InternalIP 127.0.0.1; the
		// default order tries Hostname first, i.e. DNS lookups of node names.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + pki.CACert,
		"--profiling=false",
		v,
	}, o.APIServerArg...)
	kcmArgs := append([]string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", kcmPort),
		"--cert-dir=" + filepath.Join(dir, "kcm-certs"),
		"--leader-elect=false",
		"--service-account-private-key-file=" + pki.SAKey,
		"--root-ca-file=" + pki.CACert,
		"--cluster-signing-cert-file=" + pki.CACert,
		"--cluster-signing-key-file=" + pki.CAKey,
		"--use-service-account-credentials=false",
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--profiling=false",
		v,
	}, o.KCMArg...)
	if o.NodeLeaseSeconds > 40 {
		kcmArgs = append(kcmArgs, fmt.Sprintf("--node-monitor-grace-period=%ds", 2*o.NodeLeaseSeconds))
	}
	schedArgs := append([]string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", schedPort),
		"--cert-dir=" + filepath.Join(dir, "scheduler-certs"),
		"--leader-elect=false",
		"--profiling=false",
		v,
	}, o.SchedulerArg...)

	c.apiArgs = apiArgs
	if o.RestartableAPIServer {
		if c.front, err = startFront(fmt.Sprintf("127.0.0.1:%d", apiPort), fmt.Sprintf("127.0.0.1:%d", servePort)); err != nil {
			c.Stop()
			return nil, err
		}
	}
	c.startAPIServer(false)

	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		c.Stop()
		return nil, err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c.RESTConfig = cfg
	c.Client = kubernetes.NewForConfigOrDie(cfg)

	fail := func(err error) (*Cluster, error) {
		c.Stop()
		return nil, err
	}
	if err := c.waitFor(ctx, "kube-apiserver /readyz", 120*time.Second, func() (bool, error) {
		b, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(b) == "ok", err
	}); err != nil {
		return fail(err)
	}
	o.Logf("kube-apiserver ready at https://127.0.0.1:%d", apiPort)
	if err := installKwokCRDs(ctx, cfg); err != nil {
		return fail(fmt.Errorf("kwok CRDs: %w", err))
	}
	c.goRun(runCtx, "kube-controller-manager", func(ctx context.Context) error { return runControllerManager(ctx, kcmArgs) })
	c.goRun(runCtx, "kube-scheduler", func(ctx context.Context) error { return runScheduler(ctx, schedArgs) })
	srv := &kwokServer{Port: kwokPort, CertFile: pki.ServingCert, KeyFile: pki.ServingKey}
	c.goRun(runCtx, "kwok", func(ctx context.Context) error {
		return runKwok(ctx, kc, nil, o.Verbosity > 0, o.NodeLeaseSeconds, srv)
	})

	t := time.Now()
	if err := CreateNodes(ctx, c.Client, o.NodePrefix, 0, o.Nodes, 32, nil, nil); err != nil {
		return fail(fmt.Errorf("create nodes: %w", err))
	}
	if err := c.waitFor(ctx, "nodes Ready and the default ServiceAccount", 600*time.Second, func() (bool, error) {
		if _, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, err
		}
		ready, err := countReadyNodes(ctx, c.Client)
		if err != nil {
			return false, err
		}
		return ready >= o.Nodes, fmt.Errorf("%d/%d nodes Ready", ready, o.Nodes)
	}); err != nil {
		return fail(err)
	}
	o.Logf("%d nodes Ready %.2fs after creation", o.Nodes, time.Since(t).Seconds())
	// Every component must own its port before the port lock is released.
	for _, p := range []int{kcmPort, schedPort, kwokPort} {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		if err := c.waitFor(ctx, "a listener on "+addr, 60*time.Second, func() (bool, error) {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
			}
			return err == nil, err
		}); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// startAPIServer runs the kube-apiserver until the cluster stops or a
// restart stops it.
func (c *Cluster) startAPIServer(restart bool) {
	ctx, stop := context.WithCancel(c.runCtx)
	done := make(chan struct{})
	c.apiMu.Lock()
	c.apiStop, c.apiDone = stop, done
	c.apiMu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(done)
		if err := runAPIServer(ctx, c.apiArgs, restart); err != nil && ctx.Err() == nil {
			c.Failed <- fmt.Errorf("kube-apiserver: %w", err)
		}
	}()
}

// RestartAPIServer stops the kube-apiserver in place, as an upgrade or a
// crash of a real control plane does: every connection to it ends (open
// watches too), requests are refused while it is down (down, at least),
// and it starts again on the same port with the same flags and etcd, so
// no object is lost; its watch cache starts afresh, so a watch resumed
// from a resourceVersion of before may be answered 410 Gone. It returns
// once the new one is ready, and how long the API was unavailable.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) (time.Duration, error) {
	if c.front == nil {
		return 0, fmt.Errorf("the sim was started without a restartable kube-apiserver (sim up --api-proxy)")
	}
	c.apiMu.Lock()
	stop, done := c.apiStop, c.apiDone
	c.apiMu.Unlock()
	start := time.Now()
	c.front.down()
	stop()
	// Its listener closes at once; its own shutdown (watches, in-flight
	// requests) may take its request timeout, on connections the front
	// already ended.
	if err := c.waitFor(ctx, "the old kube-apiserver's listener to close", 60*time.Second, func() (bool, error) {
		conn, err := net.DialTimeout("tcp", c.front.backend, time.Second)
		if err == nil {
			conn.Close()
			return false, fmt.Errorf("%s still accepts connections", c.front.backend)
		}
		return true, nil
	}); err != nil {
		return 0, err
	}
	c.logf("kube-apiserver stopped (restart) after %s", time.Since(start).Round(time.Millisecond))
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	go func() {
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			c.logf("the old kube-apiserver has not finished shutting down after 90s")
		}
	}()
	c.startAPIServer(true)
	direct := rest.CopyConfig(c.RESTConfig)
	direct.Host = "https://" + c.front.backend
	dc, err := kubernetes.NewForConfig(direct)
	if err != nil {
		return 0, err
	}
	if err := c.waitFor(ctx, "kube-apiserver /readyz after a restart", 120*time.Second, func() (bool, error) {
		b, err := dc.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(b) == "ok", err
	}); err != nil {
		return 0, err
	}
	if err := c.front.up(); err != nil {
		return 0, err
	}
	took := time.Since(start)
	c.logf("kube-apiserver ready again after a restart: unavailable for %s", took.Round(time.Millisecond))
	return took, nil
}

// CompactEtcd compacts etcd's history up to its current revision (what
// the apiserver's compactor does every 5 minutes): every resourceVersion
// before it is gone from storage. It returns that revision.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	rev := c.etcd.Server.KV().Rev()
	_, err := c.etcd.Server.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: rev, Physical: true})
	return rev, err
}

func (c *Cluster) goRun(ctx context.Context, name string, f func(context.Context) error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			c.Failed <- fmt.Errorf("%s: %w", name, err)
		}
	}()
}

// waitFor polls cond; the control plane has no API to watch until it is up.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-c.Failed:
			return err
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("timed out waiting for %s: %v", what, last)
}

func countReadyNodes(ctx context.Context, cs kubernetes.Interface) (int, error) {
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	ready := 0
	for _, n := range nl.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready, nil
}

// Stop shuts the components down in reverse start order. etcd goes last:
// stopping it together with the apiserver makes the apiserver hang ~10 s.
func (c *Cluster) Stop() {
	if c.front != nil {
		c.front.down()
	}
	c.cancel()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.logf("components did not stop within 10s")
	}
	c.stopEtcd()
}
