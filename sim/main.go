// sim runs a loopback-only simulated Kubernetes cluster for rollbook's demo and
// tests: embedded etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok fake nodes in one process, plus the simulated peers
// (scenarios) that rollbook's runbooks act on.
//
//	sim up --dir D [--nodes N] [--scenario NAME] [--tt-image LAYOUT]   run until signalled
//	sim down --dir D                                stop the sim running in D
//	sim add-nodes --dir D --count N [--start S]     register more fake nodes
//	sim scenarios                                   list the scenarios
//	sim violations --dir D                          print the safety violations; exit 1 if any
package main

import (
	"fmt"
	"os"
	"path/filepath"

	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	_ "time/tzdata"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/sim/helperns"
)

const usage = `usage:
  sim up --dir D [--nodes N] [--scenario NAME] [--tt-image LAYOUT] [--tt-agent PATH] [--log-stderr] [--api-faults RATE] [--api-proxy]
  sim down --dir D
  sim add-nodes --dir D --count N [--start S] [--prefix P]
  sim ate-setup deploy-atelet --dir D --version V
  sim ate-setup deploy-apiserver --dir D --era E
  sim scenarios
  sim violations --dir D`

func main() {
	// The tt hosts' tool dir links rmmod, tt-smi, … to this binary, so the
	// helper runner's agent reaches the fake tools under their real names.
	if len(os.Args) > 1 && os.Args[1] == helperns.Subcommand {
		os.Exit(helperns.Main(os.Args[2:]))
	}
	if fakehost.IsTool(filepath.Base(os.Args[0])) {
		os.Exit(fakehost.Main(os.Args))
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "up":
		os.Exit(cmdUp(args))
	case "down":
		os.Exit(cmdDown(args))
	case "add-nodes":
		os.Exit(cmdAddNodes(args))
	case "ate-setup":
		os.Exit(cmdAteSetup(args))
	case "scenarios":
		os.Exit(cmdScenarios())
	case "violations":
		os.Exit(cmdViolations(args))
	case "-h", "--help", "help":
		fmt.Println(usage)
	default:
		fmt.Fprintf(os.Stderr, "sim: unknown command %q\n%s\n", os.Args[1], usage)
		os.Exit(2)
	}
}
