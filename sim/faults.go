package main

import (
	"context"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/faultproxy"
)

// directKubeconfig is the kubeconfig that bypasses the fault proxy: the
// sim's own tools (ate-setup) and test assertions read through it.
const directKubeconfig = "kubeconfig-direct"

// startFaultProxy puts a faultproxy in front of the apiserver and points
// DIR/kubeconfig at it; the sim's own components keep the direct address.
func startFaultProxy(ctx context.Context, c *cluster.Cluster, dir string, rate float64, seed uint64,
	logf func(string, ...any)) (*faultproxy.Proxy, error) {
	p, err := faultproxy.Start(ctx, faultproxy.Config{Upstream: c.RESTConfig.Host, CACert: c.PKI.CACert,
		ServeCert: c.PKI.ServingCert, ServeKey: c.PKI.ServingKey, ProxyCert: c.PKI.ProxyCert, ProxyKey: c.PKI.ProxyKey,
		Rate: rate, Seed: seed, StatsDir: dir, Logf: logf})
	if err != nil {
		return nil, err
	}
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := clientcmd.WriteToFile(*kc, filepath.Join(dir, directKubeconfig)); err != nil {
		return nil, err
	}
	for _, cl := range kc.Clusters {
		cl.Server = p.URL
	}
	tmp := c.Kubeconfig + ".tmp"
	if err := clientcmd.WriteToFile(*kc, tmp); err != nil {
		return nil, err
	}
	logf("api faults: %.0f%% of requests through %s fail (seed %d); %s bypasses them", rate*100, p.URL, seed, directKubeconfig)
	return p, os.Rename(tmp, c.Kubeconfig)
}
