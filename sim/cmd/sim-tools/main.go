// sim-tools is the fake host tools (rmmod, tt-smi, tt-flash, …) alone. The
// sim binary answers to those names too, but it carries all of Kubernetes,
// whose package initialisation costs ~100 ms per call; a helper makes
// several calls per task, which would bill the sim's start-up to every
// flash and module swap. `sim up` links the hosts' tools to this binary
// when it sits next to the sim's (hack/build-sim.sh builds both).
//
// `sim-tools __helper-launch SPEC` (hidden) is the helper runner's container
// launcher (sim/helperns): it is small and static, so it starts fast and
// its binds work inside the image.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/sim/helperns"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == helperns.Subcommand {
		os.Exit(helperns.Main(os.Args[2:]))
	}
	if name := filepath.Base(os.Args[0]); !fakehost.IsTool(name) {
		fmt.Fprintf(os.Stderr, "sim-tools: invoked as %q; link it under one of the tool names %v\n", name, fakehost.Tools)
		os.Exit(2)
	}
	os.Exit(fakehost.Main(os.Args))
}
