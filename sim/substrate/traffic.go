package substrate

import (
	"context"
	"math/rand"
	"time"

	"k8s.io/klog/v2"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/pkg/atestate"
)

// TrafficOptions drive the traffic simulator: requests wake suspended and
// paused actors onto free workers (old pool or new, at random), and idle
// actors suspend themselves. During a roll this wakes actors on old workers
// mid-drain, which the runbook must cope with.
type TrafficOptions struct {
	Interval time.Duration // tick; default 2s
	// Resume is the chance per tick that a resumable actor gets a request;
	// default 0.3.
	Resume float64
	// Idle is the chance per tick that a RUNNING actor suspends itself;
	// default 0 (actors stay up until someone suspends them).
	Idle float64
	Seed int64 // 0 means time-seeded
}

func (o TrafficOptions) withDefaults() TrafficOptions {
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.Resume <= 0 {
		o.Resume = 0.3
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	return o
}

// runTraffic ticks until ctx ends. Its per-actor lines go to the sim log
// (klog), not the progress output: they come every few seconds.
func runTraffic(ctx context.Context, srv *fakesubstrate.Server, o TrafficOptions, changed *changes) {
	o = o.withDefaults()
	rnd := rand.New(rand.NewSource(o.Seed))
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if trafficTick(srv, o, rnd) {
			changed.fire()
		}
	}
}

// trafficTick applies one tick and reports whether anything changed.
func trafficTick(srv *fakesubstrate.Server, o TrafficOptions, rnd *rand.Rand) bool {
	moved := false
	for _, ref := range srv.Resumable() {
		if rnd.Float64() >= o.Resume {
			continue
		}
		if a, ok, err := srv.ResumeActor(ref.Atespace, ref.Name); err == nil && ok {
			klog.Infof("substrate: traffic woke %s/%s onto worker %s (%s)", a.Atespace, a.Name, a.Worker, a.AssignedNode)
			moved = true
		}
	}
	if o.Idle <= 0 {
		return moved
	}
	for _, a := range srv.Actors() {
		if a.State != atestate.ActorRunning || rnd.Float64() >= o.Idle {
			continue
		}
		if _, err := srv.SuspendActor(a.Atespace, a.Name); err == nil {
			klog.Infof("substrate: %s/%s went idle and suspended itself", a.Atespace, a.Name)
			moved = true
		}
	}
	return moved
}
