package fakehost

import (
	"fmt"
	"path/filepath"
)

// Operations the fake tools record every time they change the host, so a
// test can count what really happened (a module loaded twice, a chip
// flashed twice) from the host's side rather than from what a client said.
const (
	OpRmmod  = "rmmod"  // Version: the module unloaded
	OpInsmod = "insmod" // Version: the module loaded; SHA256: the file's bytes
	OpFlash  = "flash"  // Chip, From → Version: one chip's firmware written
)

// Op is one change a fake tool made to the host.
type Op struct {
	Op      string `json:"op"`
	Version string `json:"version"`
	From    string `json:"from,omitempty"`
	Chip    int    `json:"chip,omitempty"`
	// SHA256 is, for an insmod, the hex SHA-256 of the file the kernel was
	// given (signature included): which bytes a node really loaded.
	SHA256 string `json:"sha256,omitempty"`
}

func opsPath(root string) string { return filepath.Join(root, stateDir, "ops.log") }

// recordOp appends op; a host that cannot record it says so on stderr.
func (t *tool) recordOp(op Op) {
	if err := appendLine(opsPath(t.root), op); err != nil {
		fmt.Fprintf(t.stderr, "fakehost: cannot record %s: %v\n", op.Op, err)
	}
}

// Ops returns every change the fake tools made on root, oldest first.
func Ops(root string) ([]Op, error) { return readLines[Op](opsPath(root), 0) }
