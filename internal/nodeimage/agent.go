package nodeimage

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"

	"github.com/rollbook/rollbook/pkg/version"
)

// versionRe and revisionRe bound what reaches the linker's -X flags.
var (
	versionRe  = regexp.MustCompile(`^(v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)?$`)
	revisionRe = regexp.MustCompile(`^([0-9a-f]{7,40})?$`)
)

// BuildAgent builds the kubectl-tt the image holds from the module at
// repo into out: static, for the helper platform (version.HelperOS and
// HelperArch), as the release builds its archives (-trimpath,
// grpcnotrace, -s -w), with no VCS stamp (the
// revision travels in ldflags) so the same source gives the same bytes.
// It carries no helper image digest: it is inside the image it would name.
func BuildAgent(repo, release, revision, out string) error {
	if !versionRe.MatchString(release) {
		return fmt.Errorf("version %q is not vX.Y.Z[-pre]", release)
	}
	if !revisionRe.MatchString(revision) {
		return fmt.Errorf("revision %q is not a git commit", revision)
	}
	ldflags := "-s -w"
	if release != "" {
		ldflags += " -X github.com/rollbook/rollbook/pkg/version.version=" + release
	}
	if revision != "" {
		ldflags += " -X github.com/rollbook/rollbook/pkg/version.commit=" + revision
	}
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-tags", "grpcnotrace", "-ldflags", ldflags,
		"-o", out, "./cmd/kubectl-tt")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+version.HelperOS, "GOARCH="+version.HelperArch, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building kubectl-tt: %v\n%s", err, b)
	}
	return nil
}

// LockFor takes the lock hack/image-rootfs.sh holds while it writes the
// root filesystem (shared: several builds may read it at once), and the
// output's own (exclusive). The returned func releases both.
func LockFor(rootfs, out string) (func(), error) {
	var held []*os.File
	release := func() {
		for _, f := range held {
			f.Close()
		}
	}
	take := func(file string, how int, create bool) error {
		flag := os.O_RDWR
		if create {
			flag |= os.O_CREATE
		}
		f, err := os.OpenFile(file, flag, 0o644)
		if os.IsNotExist(err) && !create {
			return nil // a root filesystem not made by hack/image-rootfs.sh
		}
		if err != nil {
			return err
		}
		if err := syscall.Flock(int(f.Fd()), how); err != nil {
			f.Close()
			return err
		}
		held = append(held, f)
		return nil
	}
	if err := take(out+".lock", syscall.LOCK_EX, true); err != nil {
		return nil, err
	}
	if err := take(filepath.Clean(filepath.Dir(filepath.Clean(rootfs)))+".lock", syscall.LOCK_SH, false); err != nil {
		release()
		return nil, err
	}
	return release, nil
}
