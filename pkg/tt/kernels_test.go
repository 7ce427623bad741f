package tt

import (
	"strings"
	"testing"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// An installed kernel whose headers name a compiler the node lacks stops
// the node before its cordon; one without headers, or already cached, or
// buildable, does not.
func TestOtherKernelBlockers(t *testing.T) {
	cfg := &KMDConfig{Version: "2.8.0"}
	f := &Facts{Measured: &ProbeRecord{Kernel: "5.15.0-91-generic", KMD: "2.7.0", Headers: true, Toolchain: true, Cached: true,
		Kernels: []nodeagent.KernelFacts{
			{Release: "6.8.0-50-generic", Headers: true, Toolchain: true},
			{Release: "6.8.0-51-generic"},
			{Release: "6.8.0-52-generic", Headers: true, Cached: true},
			{Release: "6.12.0-1-amd64", Headers: true, CC: "gcc-14"},
		}}}
	bl := kmdBlockers(cfg)(f)
	if len(bl) != 1 || !strings.Contains(bl[0], "installed kernel 6.12.0-1-amd64 has headers but tt-kmd 2.8.0 cannot be built for it: "+
		"the node lacks gcc-14") || !strings.Contains(bl[0], "remove linux-headers-6.12.0-1-amd64") {
		t.Fatalf("blockers %q", bl)
	}
}
