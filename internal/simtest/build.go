package simtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/rollbook/rollbook/internal/ocilayout"
)

// SimBinary returns the path of an up-to-date sim binary.
func SimBinary() (string, error) {
	if short() {
		return "", errShort
	}
	if p := os.Getenv("ROLLBOOK_SIM_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("ROLLBOOK_SIM_BIN=%s: %w", p, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".cache", "bin", "sim")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// go test runs packages in parallel; one builds, the others wait.
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	// go build is a cache lookup when nothing in sim/ changed (~3 s).
	cmd := exec.Command("bash", filepath.Join(root, "hack", "build-sim.sh"))
	cmd.Env = append(os.Environ(), "ROLLBOOK_SIM_BIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the sim: %v\n%s", err, out)
	}
	return bin, nil
}

// RepoRoot finds the main module's root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build-sim.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("simtest: repository root (with hack/build-sim.sh) not found above the working directory")
		}
		dir = parent
	}
}

// AgentBinary returns an up-to-date kubectl-tt, which helper pods run in
// the sim: $ROLLBOOK_TT_AGENT when set, else built into .cache/bin.
func AgentBinary() (string, error) {
	if p := os.Getenv("ROLLBOOK_TT_AGENT"); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".cache", "bin", "kubectl-tt")
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-tt")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building kubectl-tt: %v\n%s", err, out)
	}
	return bin, nil
}

// envHelperImage is the plugins' default --helper-image (ttcmd.HelperImageEnv).
const envHelperImage = "ROLLBOOK_HELPER_IMAGE"

// HelperImage returns the node-agent image the sim runs helpers from, as
// an OCI layout and its reference by digest: $ROLLBOOK_TT_IMAGE when set
// (make test builds it), else built from $ROLLBOOK_TT_IMAGE_ROOTFS (the root
// filesystem hack/image-rootfs.sh printed) with this tree's kubectl-tt into
// .cache/node-agent-image (hack/nodeimage: locked, seconds when only the
// agent changed). Both empty when there is neither, or helpers run outside
// the image.
func HelperImage() (layout, ref string, err error) {
	if os.Getenv("ROLLBOOK_SIM_HELPERS_OUTSIDE_IMAGE") == "1" {
		return "", "", nil
	}
	layout = os.Getenv("ROLLBOOK_TT_IMAGE")
	if layout == "" {
		rootfs := os.Getenv("ROLLBOOK_TT_IMAGE_ROOTFS")
		if rootfs == "" {
			return "", "", nil
		}
		root, err := RepoRoot()
		if err != nil {
			return "", "", err
		}
		layout = filepath.Join(root, ".cache", "node-agent-image")
		cmd := exec.Command("go", "run", "./hack/nodeimage", "build", "--rootfs", rootfs, "--out", layout)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("building the node-agent image: %v\n%s", err, out)
		}
	}
	im, err := ocilayout.Open(layout)
	if err != nil {
		return "", "", fmt.Errorf("ROLLBOOK_TT_IMAGE: %w", err)
	}
	return layout, im.Ref(), nil
}
