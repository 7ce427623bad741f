package tthost

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/rollbook/rollbook/internal/fakehost"
)

// Hosts is the set of simulated Tenstorrent host roots of one sim.
type Hosts struct {
	Dir       string // <simdir>/hosts
	ToolsDir  string // PATH of every helper: the fake node tools
	SMISource string // the tt-smi binary helpers deliver (ROLLBOOK_TT_SMI_SOURCE)
	// ToolExe is the multi-call binary of the fake tools, and the helper
	// launcher (sim-tools __helper-launch).
	ToolExe string

	mu     sync.RWMutex
	roots  map[string]string
	real   map[string]bool // nodes whose root is a real OS (realhost.go)
	mounts []string        // their overlays
}

// NewHosts prepares <simDir>/hosts: the tools dir, whose entries link to
// toolExe (a binary that runs fakehost.Main when invoked under a tool name),
// and a tt-smi binary reporting smiVersion.
func NewHosts(simDir, toolExe, smiVersion string) (*Hosts, error) {
	dir, err := filepath.Abs(filepath.Join(simDir, "hosts"))
	if err != nil {
		return nil, err
	}
	h := &Hosts{
		Dir:       dir,
		ToolsDir:  filepath.Join(dir, ".tools"),
		SMISource: filepath.Join(dir, ".image", "tt-smi"),
		ToolExe:   toolExe,
		roots:     map[string]string{},
	}
	if err := fakehost.InstallTools(h.ToolsDir, toolExe); err != nil {
		return nil, fmt.Errorf("tt hosts: install fake tools: %w", err)
	}
	if err := fakehost.WriteTTSMIBinary(h.SMISource, smiVersion); err != nil {
		return nil, fmt.Errorf("tt hosts: tt-smi source: %w", err)
	}
	return h, nil
}

// Add creates node's host root from spec and returns it.
func (h *Hosts) Add(node string, spec fakehost.Spec) (string, error) {
	return h.add(node, spec, nil)
}

// add creates node's host root; prepare, when set, runs on the empty
// directory before the fake host is laid out.
func (h *Hosts) add(node string, spec fakehost.Spec, prepare func(root string) error) (string, error) {
	if node == "" || strings.ContainsAny(node, `/\`) || strings.HasPrefix(node, ".") {
		return "", fmt.Errorf("tt hosts: invalid node name %q", node)
	}
	root := filepath.Join(h.Dir, node)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	if prepare != nil {
		if err := prepare(root); err != nil {
			return "", err
		}
	}
	if err := fakehost.Create(root, spec); err != nil {
		return "", err
	}
	h.mu.Lock()
	h.roots[node] = root
	if spec.RealOS {
		if h.real == nil {
			h.real = map[string]bool{}
		}
		h.real[node] = true
	}
	h.mu.Unlock()
	return root, nil
}

// Root returns node's host root; ok is false for nodes that are not
// simulated Tenstorrent hosts.
func (h *Hosts) Root(node string) (root string, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	root, ok = h.roots[node]
	return root, ok
}

// Nodes returns the nodes with a host root, sorted.
func (h *Hosts) Nodes() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.roots))
	for n := range h.roots {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// DevicesOpen reports whether node's devices can be opened now: a host
// rebooted into a kernel without tt-kmd has no /dev/tenstorrent.
func (h *Hosts) DevicesOpen(node string) bool {
	root, ok := h.Root(node)
	return ok && moduleLoaded(root)
}
