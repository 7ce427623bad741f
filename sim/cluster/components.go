package cluster

// In-process runners for the three upstream control-plane components. They
// use the exported option/Run APIs instead of the cobra commands, because the
// commands call genericapiserver.SetupSignalContext()/SetupSignalHandler(),
// which may only be called once per process.

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/cache"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"

	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

func parseNamed(name string, nfs cliflag.NamedFlagSets, args []string) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	return fs.Parse(args)
}

// restarts counts the kube-apiserver's restarts (RestartAPIServer).
var restarts atomic.Int64

// runAPIServer blocks until ctx is cancelled or the server fails. A
// restart leaves the process-global logging as the first start set it.
func runAPIServer(ctx context.Context, args []string, restart bool) error {
	s := apiserveroptions.NewServerRunOptions()
	if err := parseNamed("kube-apiserver", s.Flags(), args); err != nil {
		return err
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	fg := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(compatibility.DefaultKubeComponent)
	// Logging is process-global: apply it once, here (apiserver starts first).
	if !restart {
		if err := logsapi.ValidateAndApply(s.Logs, fg); err != nil {
			return err
		}
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	if restart {
		// Informer names are unique per process, and the stopped server
		// may not have released its own yet.
		name, err := cache.NewInformerName(fmt.Sprintf("kube-apiserver-%d", restarts.Add(1)))
		if err != nil {
			return err
		}
		defer name.Release()
		completed.InformerName = name
	}
	return apiserverapp.Run(ctx, completed)
}

func runControllerManager(ctx context.Context, args []string) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	nfs := s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	s.ParsedFlags = &nfs
	if err := parseNamed("kube-controller-manager", nfs, args); err != nil {
		return err
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	c, err := s.Config(ctx, kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return err
	}
	return kcmapp.Run(ctx, c.Complete())
}

func runScheduler(ctx context.Context, args []string) error {
	opts := schedoptions.NewOptions()
	if err := parseNamed("kube-scheduler", *opts.Flags, args); err != nil {
		return err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	cc, sched, err := schedapp.Setup(ctx, opts)
	if err != nil {
		return fmt.Errorf("scheduler setup: %w", err)
	}
	return schedapp.Run(ctx, cc, sched)
}
