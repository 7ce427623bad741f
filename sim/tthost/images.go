package tthost

import (
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/ocilayout"
)

// AgentImageRepo is the node-agent image's repository.
const AgentImageRepo = "ghcr.io/rollbook/node-agent"

// releaseTag is a tag rollbook's release could have pushed.
var releaseTag = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// resolves is the sim's registry: the image the sim was given, by its
// digest or its tag, and nothing else; a pod naming any other image fails
// to pull, as a kubelet reports a wrong digest or tag, a typo'd registry
// or a private image without credentials. Without an image (helpers run
// outside it, EnvOutsideImage) the registry is KnownImage.
func (r *Runner) resolves(ref string) bool {
	if r.Image != nil {
		return r.Image.Resolves(ref)
	}
	return KnownImage(ref)
}

// KnownImage is the registry of a sim with no image (helpers outside it):
// the node-agent repository at "latest" or a release tag.
func KnownImage(ref string) bool {
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok || strings.Contains(tag, "/") {
		return false
	}
	return repo == AgentImageRepo && (tag == "latest" || releaseTag.MatchString(tag))
}

// pullBackoffAfter is how long a pod shows ErrImagePull before the kubelet
// moves it to ImagePullBackOff.
const pullBackoffAfter = 3 * time.Second

// pullFailedStatus is a kubelet's status for a pod whose image cannot be
// pulled: Pending, every container whose image pullErr refuses waiting, in
// the kubelet's words (pkg/kubelet/images: the CRI's error for
// ErrImagePull, wrapped by the back-off's) around containerd's.
func pullFailedStatus(pod *corev1.Pod, pullErr func(string) string, reason string, now time.Time) corev1.PodStatus {
	t := metav1.NewTime(now)
	st := baseStatus(t, corev1.PodPending)
	st.Conditions = conditions(t, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status")
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr(false)}
		if msg := pullErr(c.Image); msg == "" {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		} else {
			if reason == "ImagePullBackOff" {
				msg = `Back-off pulling image "` + c.Image + `": ErrImagePull: ` + msg
			}
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	return st
}

// imagePlatformOS and imagePlatformArch are the one platform the sim's
// registry holds the image for (LoadImage refuses any other).
const imagePlatformOS, imagePlatformArch = "linux", "amd64"

// pullErrorOn is containerd's error for each image a kubelet on node
// cannot pull, "" for one it can: an image the registry lacks, or one it
// has for another platform than the node's labels say. containerd checks a
// single-platform manifest's config against the node's platform
// (core/images: "no match for platform in manifest"), so the release's
// linux/amd64 image does not run on an arm64 node.
func (r *Runner) pullErrorOn(node *corev1.Node) func(string) string {
	goos, arch := "", ""
	if node != nil {
		goos, arch = node.Labels[corev1.LabelOSStable], node.Labels[corev1.LabelArchStable]
	}
	return func(image string) string {
		switch {
		case !r.resolves(image):
			return PullError(image)
		case goos != "" && goos != imagePlatformOS || arch != "" && arch != imagePlatformArch:
			return PlatformError(image)
		}
		return ""
	}
}

// PlatformError is containerd's error, through the CRI, for an image its
// registry has for other platforms only.
func PlatformError(image string) string {
	return `rpc error: code = NotFound desc = failed to pull and unpack image "` + normalizedRef(image) +
		`": no match for platform in manifest: not found`
}

// PullError is containerd's error, through the CRI, for an image its
// registry does not have: what a kubelet shows as ErrImagePull.
func PullError(image string) string {
	ref := normalizedRef(image)
	return `rpc error: code = NotFound desc = failed to pull and unpack image "` + ref + `": failed to resolve reference "` +
		ref + `": ` + ref + `: not found`
}

// normalizedRef is image as containerd names it: a registry, and a tag
// when there is neither tag nor digest (busybox is docker.io/library/busybox:latest).
func normalizedRef(image string) string {
	first, _, hasSlash := strings.Cut(image, "/")
	if !hasSlash || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		if !hasSlash {
			image = "library/" + image
		}
		image = "docker.io/" + image
	}
	if _, tag := ocilayout.SplitTag(image); tag == "" && !strings.Contains(image, "@") {
		image += ":latest"
	}
	return image
}

// unpullable returns the first container image a kubelet on node cannot
// pull.
func (r *Runner) unpullable(pod *corev1.Pod, node *corev1.Node) (string, bool) {
	pullErr := r.pullErrorOn(node)
	for _, c := range pod.Spec.Containers {
		if pullErr(c.Image) != "" {
			return c.Image, true
		}
	}
	return "", false
}
