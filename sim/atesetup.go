package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/sim/substrate"
)

const ateSetupUsage = "usage: sim ate-setup deploy-atelet --dir D --version V [--controller=false]\n" +
	"       sim ate-setup deploy-controller --dir D --version V\n       sim ate-setup deploy-apiserver --dir D --era E\n" +
	"       sim ate-setup apply-crds --dir D"

// cmdAteSetup plays the parts of Agent Substrate's ate-setup that the
// rolling upgrade runs outside rollbook (step 1: apply the new CRDs; step
// 2: deploy ate-controller; step 3: deploy the new atelet, after step 2
// unless --controller=false; step 6: deploy the API server of another
// release).
func cmdAteSetup(args []string) int {
	if len(args) < 1 || (args[0] != "deploy-atelet" && args[0] != "deploy-controller" && args[0] != "deploy-apiserver" &&
		args[0] != "apply-crds") {
		fmt.Fprintln(os.Stderr, ateSetupUsage)
		return 2
	}
	fs := flag.NewFlagSet("ate-setup "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory of the running sim (required)")
	version := fs.String("version", "", "substrate version of the new atelet DaemonSet or controller (deploy-atelet, deploy-controller)")
	controller := fs.Bool("controller", true, "deploy-atelet: play step 2 (ate-controller at --version) first, as the runbook orders")
	era := fs.String("era", "", "API era the new ate-api-server serves: "+fmt.Sprint(fakesubstrate.Eras())+" (deploy-apiserver)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	apiserver, crds := args[0] == "deploy-apiserver", args[0] == "apply-crds"
	needsVersion := args[0] == "deploy-atelet" || args[0] == "deploy-controller"
	if *dir == "" || (needsVersion && *version == "") || (apiserver && *era == "") {
		fmt.Fprintln(os.Stderr, ateSetupUsage)
		return 2
	}
	kubeconfig := filepath.Join(*dir, "kubeconfig")
	if _, err := os.Stat(filepath.Join(*dir, directKubeconfig)); err == nil {
		kubeconfig = filepath.Join(*dir, directKubeconfig) // the sim's own tool does not go through --api-faults
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim ate-setup:", err)
		return 1
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim ate-setup:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if crds {
		if err := substrate.InstallCRD(ctx, cfg, false); err != nil {
			fmt.Fprintln(os.Stderr, "sim ate-setup:", err)
			return 1
		}
		fmt.Println("customresourcedefinition workerpools.ate.dev applied (the new release's schema)")
		return 0
	}
	if apiserver {
		cs, err := kubernetes.NewForConfig(cfg)
		if err == nil {
			err = substrate.DeployAPIServer(ctx, cs, fakesubstrate.Era(*era))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim ate-setup:", err)
			return 1
		}
		fmt.Printf("deployment %s/%s rolls to an API server of era %s\n", substrate.Namespace, substrate.APIDeployment, *era)
		return 0
	}
	if args[0] == "deploy-controller" || *controller {
		if err := substrate.DeployController(ctx, dyn, *version); err != nil {
			fmt.Fprintln(os.Stderr, "sim ate-setup:", err)
			return 1
		}
		fmt.Printf("deployment %s/%s at %s\n", substrate.Namespace, substrate.ControllerName, *version)
		if args[0] == "deploy-controller" {
			return 0
		}
	}
	if err := substrate.DeployAtelet(ctx, dyn, *version); err != nil {
		fmt.Fprintln(os.Stderr, "sim ate-setup:", err)
		return 1
	}
	fmt.Printf("daemonset %s/%s deployed (0 pods until a node is labelled %s=%s)\n", substrate.Namespace, substrate.AteletName(*version), substrate.VersionLabel, *version)
	return 0
}
