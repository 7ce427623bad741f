package tt

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rollbook/rollbook/pkg/kube"
)

// HelperConfig says how helper pods are run.
type HelperConfig struct {
	Image     string
	Namespace string
	Timeout   time.Duration
	// PriorityClass of the helper pods (deploy/priorityclass.yaml).
	PriorityClass string
	// OnControlPlane lets helpers run on control-plane nodes; the admission
	// policy must allow it too (deploy/admission/helper-policy.yaml).
	OnControlPlane bool
	// NodeAccess is the label the admin requires of a helper's node
	// (the policy's parameters); empty: DefaultHelperNodeLabel.
	NodeAccess kube.NodeLabel
	// Proxy is the proxy environment (ProxyEnvNames) the helpers that
	// reach the network get: kubectl-tt's own, as git and curl read it.
	Proxy map[string]string
}

// Validate rejects a helper configuration before any API call.
func (h HelperConfig) Validate() error { return h.validate() }

func (h HelperConfig) validate() error {
	if h.Image == "" {
		return errors.New(NoHelperImage())
	}
	if strings.ContainsAny(h.Image, " \t\n") {
		return fmt.Errorf("--helper-image %q is not an image reference", h.Image)
	}
	if h.Namespace == "" {
		return errors.New("--helper-namespace must not be empty")
	}
	for _, k := range ProxyEnvNames {
		if v := h.Proxy[k]; strings.Contains(v, "@") || strings.ContainsAny(v, "\n\r") {
			// The helpers' env is in their pod spec, which every viewer of
			// the helper namespace reads (and the admission policy refuses).
			return fmt.Errorf("$%s carries credentials (user:password@): the helpers that reach the network would carry them "+
				"in their pod spec, readable by anyone who may read pods in the helper namespace. Use a proxy the nodes reach "+
				"without credentials (e.g. one that authenticates by source address), or unset $%s for this run", k, k)
		}
	}
	return nil
}

// HelperSpecFor is the helper pod the runbooks create for task (probe,
// kmd, smi, flash) on node, for the admission policy and the tests that
// must see its exact shape. Like the runbooks', it shares the host's PID
// namespace only to stop the device's holders (--force-unload).
func HelperSpecFor(h HelperConfig, task, node, key string, cmd []string) kube.HelperSpec {
	return helperSpec(h, task, node, key, cmd, slices.Contains(cmd, "--force-unload"), "")
}

// ReachesNetwork says whether task's helpers go to the network, and so get
// the proxy environment.
func ReachesNetwork(task string) bool { return networkTasks[task] }

// BundleURLEnvVar is a flash helper's env var for a presigned bundle URL,
// read from BundleSecretName.
func BundleURLEnvVar() corev1.EnvVar {
	return (&FirmwareConfig{BundleURL: "https://x/?presigned"}).bundleEnv()[0]
}

func helperSpec(h HelperConfig, task, node, key string, cmd []string, hostPID bool, run string) kube.HelperSpec {
	s := kube.HelperSpec{
		Task: task, Node: node, Key: key, Namespace: h.Namespace, Image: h.Image, Command: cmd,
		Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
		Deadline: h.Timeout, Privileged: true, HostPID: hostPID, RunID: run,
		HostPaths:     []kube.HostPathMount{{Name: "host", HostPath: "/", MountPath: "/host"}},
		PriorityClass: h.PriorityClass, AllowControlPlane: h.OnControlPlane, NodeAccess: h.nodeAccess(),
		Resources:   helperResources[task],
		GracePeriod: helperGrace[task], Protect: helperGrace[task] > 0,
	}
	if networkTasks[task] {
		for _, k := range ProxyEnvNames {
			if v, ok := h.Proxy[k]; ok {
				s.Env = append(s.Env, corev1.EnvVar{Name: k, Value: v})
			}
		}
	}
	if task == kmdBuildTask {
		// The build loads nothing: root in a chroot of the host (its tree
		// and compiler), no other privilege.
		s.Privileged = false
		s.Capabilities = []corev1.Capability{"SYS_CHROOT"}
	}
	if task == "probe" {
		// The probe only reads: the host read-only, no privileges but what
		// reading it takes (other processes' /proc/<pid>/fd, a chroot to run
		// the host's tt-smi --version, root-only directories).
		s.Privileged = false
		s.HostPaths[0].ReadOnly = true
		s.Capabilities = []corev1.Capability{"SYS_PTRACE", "SYS_CHROOT", "DAC_READ_SEARCH"}
	}
	return s
}

// ProxyEnvNames are the proxy variables passed on to helpers, in this
// order: curl and git read either case (curl only the lower-case
// http_proxy).
var ProxyEnvNames = []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"}

// ProxyFromEnv is kubectl-tt's own proxy environment: the helpers that
// reach the network go through the same proxy as the person running it.
func ProxyFromEnv() map[string]string {
	out := map[string]string{}
	for _, k := range ProxyEnvNames {
		if v := os.Getenv(k); v != "" { // an empty one says nothing
			out[k] = v
		}
	}
	return out
}

// networkTasks reach the network: the probe and kmd (git ls-remote, clone),
// flash (the bundle's download).
var networkTasks = map[string]bool{"probe": true, "kmd-build": true, "kmd": true, "flash": true}

// helperResources are each task's requests (what the kubelet keeps for it
// under pressure) and memory limits (a runaway never takes the node down).
// The kmd-build helper builds the module (kbuild, a compiler per core), and
// the kmd helper for the installed kernels the node does not run.
var helperResources = map[string]corev1.ResourceRequirements{
	"probe":     resources("50m", "64Mi", "256Mi"),
	"kmd-build": resources("500m", "512Mi", "2Gi"),
	"kmd":       resources("500m", "512Mi", "2Gi"),
	"smi":       resources("100m", "256Mi", "1Gi"),
	"flash":     resources("100m", "256Mi", "1Gi"),
	// kubectl tt cleanup --host-caches: removes files, nothing more.
	"clean-cache": resources("50m", "64Mi", "256Mi"),
}

// helperGrace is how long a helper that changes the device gets after
// SIGTERM (its pod deleted by another tool's drain, a node shutdown) to
// finish the change in flight: tt-flash writing and resetting the chips (a
// Galaxy's 32 take minutes), the module swap from rmmod to insmod. The
// agent stops as soon as it is done; these are bounds. Such a helper is
// also protected from evictions while it runs (kube.ProtectHelper). The
// others are killed at once: nothing of theirs is unsafe to cut short.
var helperGrace = map[string]time.Duration{
	"flash": 10 * time.Minute,
	"kmd":   2 * time.Minute,
}

func resources(cpu, mem, memLimit string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memLimit)},
	}
}

// nodeAccess is the label a helper's node must carry.
func (h HelperConfig) nodeAccess() kube.NodeLabel {
	if h.NodeAccess.Key == "" {
		return DefaultHelperNodeLabel
	}
	return h.NodeAccess
}
