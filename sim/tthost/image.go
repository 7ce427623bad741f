package tthost

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/sim/helperns"
)

// Environment of the sim's helper runner.
const (
	// EnvImage is the node-agent image's OCI layout (`make image` writes
	// it); `sim up --tt-image`.
	EnvImage = "ROLLBOOK_TT_IMAGE"
	// EnvImageMirror names repositories that serve it too (sim up
	// --tt-image-mirror).
	EnvImageMirror = "ROLLBOOK_TT_IMAGE_MIRROR"
	// EnvImageStore is where its layers are unpacked; `sim up
	// --tt-image-store`, default DefaultImageStore().
	EnvImageStore = "ROLLBOOK_TT_IMAGE_STORE"
	// EnvOutsideImage=1 is the developer's opt-out on a machine without
	// root: helpers run as plain processes with the fake tools on PATH,
	// logged loudly. make test as root never sets it.
	EnvOutsideImage = "ROLLBOOK_SIM_HELPERS_OUTSIDE_IMAGE"
	// envFakeTTSMI is where, inside a helper, the fake tt-smi the image's
	// tt-smi file hands everything but --version to lives.
	envFakeTTSMI = fakehost.TTSMIEnv
)

// fakeTTSMIPath is a sim-private path inside helpers (not on PATH, not in
// the image): the card tool behind the image's tt-smi.
const fakeTTSMIPath = "/.rollbook-sim/bin/tt-smi"

// Only what needs a kernel or a card is simulated inside the image: the
// runner binds the fake tools over these of the image's own files, and only
// where the image has them. kernelAndCard are the module load and unload
// syscalls, signals to simulated /proc holders, and the card's tools.
var kernelAndCard = []string{"insmod", "rmmod", "kill"}

// remainingFakes are image tools that cannot work against a fake host root
// (docs/development.md, "The fakes and the real tools"): chroot would run the fake
// host's make and tt-smi, which are not executables; git needs a real
// repository of the module; modinfo, depmod and modprobe need a real .ko.
// On a real-host node (Hosts.AddReal) all of them are the image's own.
var remainingFakes = []string{"chroot", "git", "modinfo", "depmod", "modprobe"}

// Mode describes how helpers run, for the sim's log.
func (r *Runner) Mode() string {
	switch {
	case r.OutsideImage:
		return "helpers OUTSIDE the image (" + EnvOutsideImage + "=1: a developer opt-out; tools of the image are not checked)"
	case r.imageProblem() != "":
		return "helpers REFUSED: " + r.imageProblem()
	}
	return "helpers inside the node-agent image " + r.Image.Ref() + " (" + strings.Join(r.Image.Layers, ", ") + ")"
}

// DefaultImageStore is the user's cache: unpacked layers are shared by
// every sim on the machine, by digest.
func DefaultImageStore() string {
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "rollbook", "node-agent-layers")
}

// imageProblem says why helpers cannot run inside the image, "" when they can.
func (r *Runner) imageProblem() string {
	switch {
	case r.Image == nil:
		return "sim: no node-agent image to run helpers from (sim up --tt-image DIR or $" + EnvImage +
			": the OCI layout `make image` writes, as root); the helper runner never runs helpers outside the image"
	case os.Geteuid() != 0:
		return "sim: running helpers inside the node-agent image needs root (a mount namespace, an overlay, chroot); " +
			"the helper runner never runs helpers outside the image"
	}
	if _, fi, err := r.Image.lookup("usr/bin"); err != nil || !fi.IsDir() {
		return fmt.Sprintf("sim: the image %s has no root filesystem (no usr/bin)", r.Image.Ref())
	}
	return ""
}

// inImage finds name on the image's PATH as the container's lookup would,
// returning its path inside the image, "" when the image lacks it.
func (r *Runner) inImage(name string) string {
	if strings.HasPrefix(name, "/") {
		if r.isFile(name) {
			return name
		}
		return ""
	}
	for _, d := range filepath.SplitList(r.Image.PATH) {
		if p := path.Join(d, name); r.isFile(p) {
			return p
		}
	}
	return ""
}

// isFile reports whether p, inside the image, is a file once symlinks are
// resolved inside the image (Debian links /usr/sbin/insmod to /bin/kmod,
// which must be the image's kmod, not this machine's).
func (r *Runner) isFile(p string) bool {
	for hops := 0; hops < 40; hops++ {
		outside, fi, err := r.Image.lookup(p)
		if err != nil {
			// A directory on the way may be a symlink (/bin -> usr/bin).
			dir, err := r.resolveDir(path.Dir(p))
			if err != nil || dir == path.Dir(p) {
				return false
			}
			p = path.Join(dir, path.Base(p))
			continue
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return fi.Mode().IsRegular()
		}
		t, err := os.Readlink(outside)
		if err != nil {
			return false
		}
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(p), t)
		}
		p = path.Clean(t)
	}
	return false
}

// resolveDir resolves the symlinks of directory d inside the image.
func (r *Runner) resolveDir(d string) (string, error) {
	cur := "/"
	for _, c := range strings.Split(strings.Trim(d, "/"), "/") {
		if c == "" {
			continue
		}
		next := path.Join(cur, c)
		for hops := 0; ; hops++ {
			outside, _, err := r.Image.lookup(next)
			if err != nil || hops > 40 {
				break
			}
			t, err := os.Readlink(outside)
			if err != nil {
				break
			}
			if !path.IsAbs(t) {
				t = path.Join(path.Dir(next), t)
			}
			next = path.Clean(t)
		}
		cur = next
	}
	return cur, nil
}

// overrides are the fakes bound over the image's files (the image's own
// kubectl-tt runs, unless a test of the runner overrides it); realHost
// leaves the image's chroot, git and kmod tools real.
func (r *Runner) overrides(realHost bool) []helperns.Override {
	var out []helperns.Override
	add := func(src, name string) {
		if p := r.inImage(name); p != "" {
			out = append(out, helperns.Override{Source: src, Target: p})
		}
	}
	fakes := append([]string(nil), kernelAndCard...)
	if !realHost {
		fakes = append(fakes, remainingFakes...)
	}
	for _, t := range fakes {
		add(r.Hosts.ToolExe, t)
	}
	add(r.Hosts.SMISource, nodeagent.DefaultSMISource)
	add(r.Hosts.ToolExe, nodeagent.TTFlashPath)
	if r.AgentOverride != "" {
		add(r.AgentOverride, AgentName)
	}
	return out
}

// containerFS is a container's mounts; fakeRoot is where it sees the node's
// host root ("" when it does not mount it); why says why the runner cannot
// provide a volume.
func (r *Runner) containerFS(pod *corev1.Pod, c corev1.Container, root, dir, cdir, termLog string) (ms []helperns.Mount, fakeRoot, why string) {
	tp := c.TerminationMessagePath
	if tp == "" {
		tp = corev1.TerminationMessagePathDefault
	}
	ms = []helperns.Mount{
		{Kind: helperns.KindProc, Target: "/proc"},
		{Kind: helperns.KindDev, Target: "/dev"},
		{Kind: helperns.KindBind, Source: termLog, Target: tp},
	}
	for _, d := range r.Reachable {
		ms = append(ms, helperns.Mount{Kind: helperns.KindBind, Source: d, Target: d, ReadOnly: true})
	}
	for _, vm := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vm.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, "", fmt.Sprintf("sim: container %s mounts volume %s, which the pod does not have", c.Name, vm.Name)
		}
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return nil, "", fmt.Sprintf("sim: the helper runner does not provide subPath mounts (volume %s)", vm.Name)
		}
		src, ok := r.volumeSource(pod, vol, root, dir)
		if vol.ConfigMap != nil || vol.Secret != nil { // written by mountConfigMaps, as the kubelet's atomic writer would
			src = filepath.Join(cdir, "volumes", filepath.Clean("/"+vm.MountPath))
			_, err := os.Stat(src)
			ok = cdir == "" || err == nil // cdir "": the check before the start, nothing written yet
		}
		if !ok {
			return nil, "", fmt.Sprintf("sim: the helper runner cannot provide volume %s (it provides hostPath, emptyDir, configMap and secret)", vm.Name)
		}
		if vol.HostPath != nil && path.Clean(vol.HostPath.Path) == "/" {
			fakeRoot = path.Clean(vm.MountPath)
		}
		ms = append(ms, helperns.Mount{Kind: helperns.KindBind, Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	return ms, fakeRoot, ""
}

// volumeSource is the directory outside that backs vol: the node's host root
// for hostPath (the fake host is the node), a directory of the run for
// emptyDir.
func (r *Runner) volumeSource(pod *corev1.Pod, vol *corev1.Volume, root, dir string) (string, bool) {
	switch {
	case vol.HostPath != nil:
		p := filepath.Join(root, filepath.Clean("/"+vol.HostPath.Path))
		_, err := os.Stat(p)
		return p, err == nil
	case vol.EmptyDir != nil:
		p := filepath.Join(dir, "volumes", vol.Name)
		return p, os.MkdirAll(p, 0o755) == nil
	}
	_ = pod
	return "", false
}

// imageEnv is a container's environment inside the image: the image's
// (its config's PATH), then the pod's, then what only the fakes read.
func imageEnv(pod *corev1.Pod, c corev1.Container, imagePATH, fakeRoot string, secrets map[string]string) []string {
	env := []string{"PATH=" + imagePATH, "HOME=/root", "HOSTNAME=" + pod.Name}
	for _, e := range c.Env {
		if v, ok := envValue(pod, e, secrets); ok {
			env = append(env, e.Name+"="+v)
		}
	}
	if fakeRoot != "" {
		env = append(env, envFakeRoot+"="+fakeRoot)
	}
	return append(env, envFakeTTSMI+"="+fakeTTSMIPath)
}

// launchSpec writes the launcher's spec for container c into cdir.
func (r *Runner) launchSpec(pod *corev1.Pod, c corev1.Container, root, dir, cdir, termLog string, secrets map[string]string) (string, string) {
	ms, fakeRoot, why := r.containerFS(pod, c, root, dir, cdir, termLog)
	if why != "" {
		return "", why
	}
	layers := make([]string, len(r.Image.Layers))
	for i, l := range r.Image.Layers {
		layers[len(layers)-1-i] = l
	}
	s := helperns.Spec{
		Layers:         layers,
		Scratch:        filepath.Join(cdir, "fs"),
		Mounts:         ms,
		Overrides:      r.overrides(r.Hosts.Real(pod.Spec.NodeName)),
		Private:        []helperns.Override{{Source: r.Hosts.ToolExe, Target: fakeTTSMIPath}},
		Env:            imageEnv(pod, c, r.Image.PATH, fakeRoot, secrets),
		Argv:           append(append([]string(nil), c.Command...), c.Args...),
		Dir:            c.WorkingDir,
		TerminationLog: termLog,
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", err.Error()
	}
	p := filepath.Join(cdir, "launch.json")
	if err := os.MkdirAll(s.Scratch, 0o755); err != nil {
		return "", err.Error()
	}
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		return "", err.Error()
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", err.Error()
	}
	return p, ""
}
