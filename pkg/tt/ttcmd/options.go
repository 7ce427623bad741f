package ttcmd

import (
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/version"
)

// selectionFlags choose nodes, as kubectl drain and friends do.
type selectionFlags struct {
	selector string
	nodes    []string
	anyNode  bool
	ack      []string
}

func (s *selectionFlags) add(cmd *cobra.Command, g *cli.Globals) {
	fs := cmd.Flags()
	fs.StringVarP(&s.selector, "selector", "l", "", "only nodes matching this label selector (ANDed with the Tenstorrent PCI label)")
	fs.StringSliceVar(&s.nodes, "nodes", nil, "only these nodes (comma-separated); each must exist and match")
	fs.BoolVar(&s.anyNode, "any-node", false, "do not require the NFD label "+tt.LabelPCIPresent+"=true")
	_ = cmd.RegisterFlagCompletionFunc("nodes", cli.NodeCompletion(g))
}

// addAcknowledge adds --acknowledge-failed-flash, for the commands that
// change nodes.
func (s *selectionFlags) addAcknowledge(cmd *cobra.Command, g *cli.Globals) {
	cmd.Flags().StringSliceVar(&s.ack, tt.AcknowledgeFlag, nil, "let this run touch these nodes (comma-separated) although "+
		"a flash on them failed in a way tt-flash says needs a person (a failed SPI write); only once the board is fixed")
	_ = cmd.RegisterFlagCompletionFunc(tt.AcknowledgeFlag, cli.NodeCompletion(g))
}

func (s *selectionFlags) selection(args []string) tt.Selection {
	return tt.Selection{Selector: s.selector, Nodes: append(append([]string{}, s.nodes...), args...), AnyNode: s.anyNode,
		AcknowledgedFailedFlash: s.ack}
}

// helperFlags say how helper pods run.
type helperFlags struct {
	image          string
	namespace      string
	priorityClass  string
	onControlPlane bool
	timeout        time.Duration
}

// HelperImageEnv names the variable that, when set, is the default
// --helper-image (a mirror, or a development image).
const HelperImageEnv = "ROLLBOOK_HELPER_IMAGE"

// defaultHelperImage is the node-agent image this build was released with,
// by digest (version.HelperImage: the release stamps the image it built and
// pushed). A build that carries none (make build, go install, a snapshot)
// has no default, so it refuses to start a helper until told which image
// to run (tt.HelperConfig's validation says how).
func defaultHelperImage() string {
	if img := os.Getenv(HelperImageEnv); img != "" {
		return img
	}
	return version.HelperImage()
}

func (h *helperFlags) add(fs *pflag.FlagSet, defaultTimeout time.Duration) {
	fs.StringVar(&h.image, "helper-image", defaultHelperImage(), "image of the helper pods (it runs kubectl-tt node-agent); "+
		"default: $"+HelperImageEnv+", else the node-agent image this release was built with, by digest")
	fs.StringVar(&h.namespace, "helper-namespace", deploy.HelperNamespace,
		"namespace of the helper pods (create it with deploy/"+deploy.NamespaceFile+")")
	fs.StringVar(&h.priorityClass, "helper-priority-class", deploy.HelperPriorityClass,
		"PriorityClass of the helper pods (deploy/"+deploy.PriorityClassFile+"); empty for none")
	fs.BoolVar(&h.onControlPlane, "helper-on-control-plane", false,
		"let helpers run on control-plane nodes (the admission policy must allow it: allowControlPlane)")
	fs.DurationVar(&h.timeout, "helper-timeout", defaultTimeout, "deadline of one helper pod on a node")
}

func (h *helperFlags) config() tt.HelperConfig {
	return tt.HelperConfig{Image: h.image, Namespace: h.namespace, Timeout: h.timeout, PriorityClass: h.priorityClass,
		OnControlPlane: h.onControlPlane, Proxy: tt.ProxyFromEnv()}
}

// perLabelFlag is --max-unavailable-per LABEL=N, shared by the commands
// that take nodes out of service in parallel.
func addPerLabelFlag(fs *pflag.FlagSet, m *map[string]int) {
	fs.StringToIntVar(m, "max-unavailable-per", nil, "at most N nodes sharing a value of label LABEL out of service at once, "+
		"e.g. topology.kubernetes.io/zone=1 (LABEL=N, comma-separated or repeated); nodes without the label are not limited by it")
}
