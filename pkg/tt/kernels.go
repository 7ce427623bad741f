package tt

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// LabelNFDKernel is Node Feature Discovery's label of the running kernel
// release (a default label of its kernel source), which nfd-worker writes
// again after a boot. Unlike status.nodeInfo.kernelVersion it is in the
// metadata-only node list status reads.
const LabelNFDKernel = "feature.node.kubernetes.io/kernel-version.full"

// reportedKernel is the kernel the node runs as the cluster reports it:
// the kubelet's nodeInfo when the node was read in full, else NFD's label,
// else this node's last probe when it is newer than the module's record.
func reportedKernel(rec *nodeRecords) (kernel, source string) {
	n := rec.n
	if k := n.Status.NodeInfo.KernelVersion; k != "" {
		return k, "reported by the kubelet"
	}
	if k := n.Labels[LabelNFDKernel]; k != "" {
		return k, "NFD label " + LabelNFDKernel
	}
	if p := rec.Probe(); p != nil && p.Kernel != "" && !kmdRecordNewer(rec, p) {
		return p.Kernel, "measured by the probe of " + p.At.Format(time.RFC3339)
	}
	return "", ""
}

// kmdKernelGap says why a node whose module rollbook installed runs a
// kernel the module was never built for (a reboot into a kernel installed
// after the roll, or one without headers then): its driver is missing and
// its label is stale. "" when it runs one of them, or it cannot tell.
func kmdKernelGap(recs *nodeRecords) string {
	n := recs.n
	if n.Labels[LabelInstallMode] == InstallModeHost {
		return ""
	}
	rec, ok := recs.KMD()
	if !ok || rec.After == "" {
		return ""
	}
	built := rec.Kernels
	if len(built) == 0 && rec.Kernel != "" { // a record from before every kernel was built for
		built = []string{rec.Kernel}
	}
	running, source := reportedKernel(recs)
	if running == "" || len(built) == 0 || slices.Contains(built, running) {
		return ""
	}
	return fmt.Sprintf("runs kernel %s (%s), which tt-kmd %s was never built for (it boots with it on %s only): the driver is "+
		"likely not loaded and the label is stale; fix: kubectl tt upgrade kmd --version %s --nodes %s", running, source, rec.After,
		strings.Join(built, ", "), rec.After, n.Name)
}
