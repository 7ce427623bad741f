// Package scenario holds the named fleets `sim up --scenario NAME` lays out on
// a fresh cluster: nodes, labels, workloads and the awkward cases a runbook
// must cope with. Each simulated peer registers its own scenarios.
package scenario

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/sim/monitor"
)

// Env is what a scenario may use to set itself up and to run its simulated
// peers for as long as the cluster runs.
type Env struct {
	Dir        string // the sim's state directory
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	Nodes      []string // names of the fake nodes the sim created
	Logf       func(format string, a ...any)
	// Go runs f in the background until the sim stops; an error ends the sim.
	Go func(name string, f func(ctx context.Context) error)
	// Monitor records safety violations to Dir/violations.
	Monitor *monitor.Monitor
	// OnStop registers f to run when the sim stops (mounts to undo).
	OnStop func(f func())
}

// Scenario is a named setup.
type Scenario struct {
	Name        string
	Description string
	Setup       func(ctx context.Context, env *Env) error
}

var registry = map[string]Scenario{}

// Register adds s; names are unique.
func Register(s Scenario) {
	if _, dup := registry[s.Name]; dup {
		panic("scenario registered twice: " + s.Name)
	}
	registry[s.Name] = s
}

// Get returns the named scenario or an error listing the known ones.
func Get(name string) (Scenario, error) {
	s, ok := registry[name]
	if !ok {
		return Scenario{}, fmt.Errorf("unknown scenario %q; known: %v (see `sim scenarios`)", name, Names())
	}
	return s, nil
}

// All returns every scenario sorted by name.
func All() []Scenario {
	out := make([]Scenario, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the sorted scenario names.
func Names() []string {
	var n []string
	for _, s := range All() {
		n = append(n, s.Name)
	}
	return n
}

func init() {
	Register(Scenario{
		Name:        "empty",
		Description: "bare cluster: fake nodes only, no workloads",
		Setup:       func(context.Context, *Env) error { return nil },
	})
}
