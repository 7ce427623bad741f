package substrate

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/sim/monitor"
)

// Config is what Start needs from the sim.
type Config struct {
	Dir        string // the sim's state directory: ate-endpoint and ate-ca.pem go here
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	Logf       func(format string, a ...any)
	// Monitor records the actors the substrate loses (nil discards).
	Monitor *monitor.Monitor
	Options
}

// Options tune the simulated substrate.
type Options struct {
	// Era is the API era served; default fakesubstrate.EraC (resource-style
	// Worker, DrainWorker and RevertActor).
	Era fakesubstrate.Era
	// EvictionWindow is how long after a worker pod's deletion (SIGTERM,
	// deletionTimestamp minus the grace period) its ateom keeps its actors
	// suspendable before it exits and the awake ones are lost (ateom's
	// workloadGracePeriod, 30 min on a real install). Default
	// DefaultEvictionWindow.
	EvictionWindow time.Duration
	// AteomExit, when set, is how soon after SIGTERM the ateom exits
	// whatever its actors do (an ateom or actor that quits on SIGTERM; the
	// 1-minute budget before upstream #1565): its awake actors are lost then.
	AteomExit time.Duration
	// AteletHandoff is how long a deleted atelet pod takes to exit (its
	// drain, at most its 330s grace period): its host ports stay taken
	// meanwhile, so the node's new atelet pod stays Pending.
	AteletHandoff time.Duration
	// PageSize is the List page size for requests that ask for 0; default
	// fakesubstrate's (2, so clients page).
	PageSize int
	// Traffic, when set, runs the traffic simulator.
	Traffic *TrafficOptions
	// TransitionTime is how long SUSPENDING and RESUMING last (0: instant).
	TransitionTime time.Duration
	// SyncSuspend makes a SuspendActor call last the whole SUSPENDING
	// (upstream's call checkpoints and uploads before it answers), so the
	// client's concurrency bounds how many suspends run at once.
	SyncSuspend bool
	// RegisterDelay is how long after its pod is Ready a worker registers
	// (the syncer's lag on a real install).
	RegisterDelay time.Duration
	// SoftLists makes List RPCs page at 5 items whatever the client asks
	// and leave out items that changed while the list ran.
	SoftLists bool
	// WorkerCapacity is how many actors a worker hosts (era D's
	// multi-actor workers); 0: one.
	WorkerCapacity int
	// CapacityDelay is how long after it registers an era D worker reports
	// its capacity (unset until then: upstream the ateom reports it once it
	// is up, and the worker is handed no actor before).
	CapacityDelay time.Duration
	// APIRollDowntime is how long nothing answers while the API server rolls
	// to another era (DeployAPIServer); default DefaultAPIRollDowntime.
	APIRollDowntime time.Duration
	// OldCRD serves the WorkerPool CRD of a release before
	// spec.sandboxClasses (OldWorkerPoolCRD): runbook step 1 not applied
	// yet (`sim ate-setup apply-crds` applies it).
	OldCRD bool
}

// DefaultEvictionWindow keeps the sim quick while leaving a person time to
// suspend an actor by hand.
const DefaultEvictionWindow = 20 * time.Second

func (o Options) withDefaults() Options {
	if o.Era == "" {
		o.Era = fakesubstrate.EraC
	}
	if o.EvictionWindow <= 0 {
		o.EvictionWindow = DefaultEvictionWindow
	}
	if o.APIRollDowntime <= 0 {
		o.APIRollDowntime = DefaultAPIRollDowntime
	}
	return o
}

// Environment variables that override Options in the sim (`sim up` has no
// per-scenario flags; simtest passes its environment to the sim).
const (
	EnvEra            = "ROLLBOOK_SIM_ATE_ERA"               // b2 | c | c-stub | d
	EnvEvictionWindow = "ROLLBOOK_SIM_ATE_EVICTION_WINDOW"   // Go duration
	EnvTraffic        = "ROLLBOOK_SIM_ATE_TRAFFIC"           // "off" disables, a duration sets the tick
	EnvTransition     = "ROLLBOOK_SIM_ATE_TRANSITION"        // Go duration of SUSPENDING/RESUMING
	EnvSyncSuspend    = "ROLLBOOK_SIM_ATE_SYNC_SUSPEND"      // on: SuspendActor answers once SUSPENDED
	EnvRegisterDelay  = "ROLLBOOK_SIM_ATE_REGISTER_DELAY"    // Go duration
	EnvCapacityDelay  = "ROLLBOOK_SIM_ATE_CAPACITY_DELAY"    // Go duration
	EnvWorkerCapacity = "ROLLBOOK_SIM_ATE_WORKER_CAPACITY"   // actors per worker (era D)
	EnvAPIRollDown    = "ROLLBOOK_SIM_ATE_API_ROLL_DOWNTIME" // Go duration without an API server during a roll
	EnvAteomExit      = "ROLLBOOK_SIM_ATE_ATEOM_EXIT"        // Go duration: ateom exits that soon after SIGTERM
	EnvAteletHandoff  = "ROLLBOOK_SIM_ATE_ATELET_HANDOFF"    // Go duration a deleted atelet takes to exit
	EnvCRD            = "ROLLBOOK_SIM_ATE_CRD"               // old: the WorkerPool CRD before sandboxClasses (step 1 not applied)
)

// FromEnv applies the ROLLBOOK_SIM_ATE_* overrides to o.
func (o Options) FromEnv() (Options, error) {
	return o.fromLookup(os.LookupEnv)
}

func (o Options) fromLookup(lookup func(string) (string, bool)) (Options, error) {
	if v, ok := lookup(EnvEra); ok && v != "" {
		era := fakesubstrate.Era(v)
		if !validEra(era) {
			return o, fmt.Errorf("%s=%q: want one of %v", EnvEra, v, fakesubstrate.Eras())
		}
		o.Era = era
	}
	if v, ok := lookup(EnvEvictionWindow); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("%s=%q: want a positive duration", EnvEvictionWindow, v)
		}
		o.EvictionWindow = d
	}
	if v, ok := lookup(EnvWorkerCapacity); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return o, fmt.Errorf("%s=%q: want a positive number of actors", EnvWorkerCapacity, v)
		}
		o.WorkerCapacity = n
	}
	for env, d := range map[string]*time.Duration{EnvTransition: &o.TransitionTime, EnvRegisterDelay: &o.RegisterDelay,
		EnvCapacityDelay: &o.CapacityDelay,
		EnvAPIRollDown:   &o.APIRollDowntime, EnvAteomExit: &o.AteomExit, EnvAteletHandoff: &o.AteletHandoff} {
		if v, ok := lookup(env); ok && v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x < 0 {
				return o, fmt.Errorf("%s=%q: want a duration", env, v)
			}
			*d = x
		}
	}
	if v, ok := lookup(EnvCRD); ok && v != "" {
		switch v {
		case "old":
			o.OldCRD = true
		case "new":
			o.OldCRD = false
		default:
			return o, fmt.Errorf("%s=%q: want old or new", EnvCRD, v)
		}
	}
	if v, ok := lookup(EnvSyncSuspend); ok && v != "" {
		switch v {
		case "on", "true", "1":
			o.SyncSuspend = true
		case "off", "false", "0":
			o.SyncSuspend = false
		default:
			return o, fmt.Errorf("%s=%q: want on or off", EnvSyncSuspend, v)
		}
	}
	if v, ok := lookup(EnvTraffic); ok && v != "" {
		t, err := trafficFromEnv(o.Traffic, v)
		if err != nil {
			return o, err
		}
		o.Traffic = t
	}
	return o, nil
}

func trafficFromEnv(cur *TrafficOptions, v string) (*TrafficOptions, error) {
	t := TrafficOptions{}
	if cur != nil {
		t = *cur
	}
	switch v {
	case "off", "false", "0":
		return nil, nil
	case "on", "true", "1":
		return &t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("%s=%q: want off, on or a tick duration", EnvTraffic, v)
	}
	t.Interval = d
	return &t, nil
}

func validEra(e fakesubstrate.Era) bool {
	for _, x := range fakesubstrate.Eras() {
		if x == e {
			return true
		}
	}
	return false
}
