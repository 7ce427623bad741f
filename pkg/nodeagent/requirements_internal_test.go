package nodeagent

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every exec goes through execution.run, which refuses what the table does
// not declare for the task: the agent cannot run a tool the image check
// did not see.
func TestRunRefusesUndeclaredPrograms(t *testing.T) {
	a := &Agent{Root: t.TempDir()}
	refused := map[Op][][]string{
		OpKMD:   {{"curl", "https://example.com"}, {"tt-flash", "flash"}, {"chroot", a.Root, "gcc", "x.c"}, {"chroot", "/", "make"}, {}},
		OpSMI:   {{"git", "clone"}, {"chroot", a.Root, "/usr/bin/tt-smi", "--version"}},
		OpFlash: {{"ipmitool", "chassis", "power", "cycle"}, {"sudo", "ipmitool"}, {"insmod", "x.ko"}},
		OpProbe: {{"tt-smi", "-s"}},
	}
	for op, argvs := range refused {
		for _, argv := range argvs {
			x := a.begin(op, "1.0.0")
			r := x.run(context.Background(), argv)
			require.ErrorIs(t, r.err, errUndeclared, "%s %v", op, argv)
			err := toolFailure(ReasonFlashFailed, r, "x")
			var oe *opError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, ReasonToolMissing, oe.reason)
		}
	}
	for op, argvs := range map[Op][][]string{
		OpKMD:   {{"git", "clone"}, {"chroot", a.Root, "make", "-j2"}, {"modinfo", "-F", "version", "x.ko"}, {"kill", "-KILL", "1"}},
		OpSMI:   {{"/opt/image/tt-smi", "--version"}, {"chroot", a.Root + "/", "/usr/local/bin/.tt-smi.new", "--version"}},
		OpFlash: {{"tt-flash", "--no-color", "flash"}, {"tt-smi", "-glx_reset"}},
		OpProbe: {{"chroot", a.Root, "/usr/local/bin/tt-smi", "--version"}},
	} {
		for _, argv := range argvs {
			assert.NoError(t, checkExec(op, a.Root, argv), "%s %v", op, argv)
		}
	}
}

// build/packages.txt is what the image installs: every package the table
// names must be in it.
func TestPackagesListHoldsEveryDeclaredPackage(t *testing.T) {
	f, err := os.Open("../../build/packages.txt")
	require.NoError(t, err)
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			listed[line] = true
		}
	}
	require.NoError(t, sc.Err())
	for _, r := range Requirements {
		if r.Where == InImage && r.Package != "" {
			assert.True(t, listed[r.Package], "%s %s needs package %s, not in build/packages.txt", r.Task, r.Name, r.Package)
		}
		if r.Where == InImage && r.Kind == KindExec && r.Package == "" {
			assert.NotEmpty(t, r.Path, "%s %s: a program the release installs itself needs its path", r.Task, r.Name)
		}
	}
}
