package tthost

import (
	"context"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"

	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/podloop"
)

// HelperLabel marks rollbook helper pods; the runner owns them.
const HelperLabel = "rollbook.dev/helper"

// restartBackoff is how long a container whose device-holding process was
// killed (force-unload) stays down before it reopens the devices: the
// kubelet's first CrashLoopBackOff delay.
const restartBackoff = 10 * time.Second

// HolderSync makes every pod that mounts /dev/tenstorrent (or a device
// under it) and is Running on a simulated tt node hold those devices on
// the node's host: a fake process in the pod's cgroup with the device
// files open, counted in the module refcount. The holder goes away when
// the pod stops Running or is deleted.
type HolderSync struct {
	Client kubernetes.Interface
	Hosts  *Hosts
	Logf   func(format string, a ...any)
	Clock  clock.Clock
	// Resync re-checks every pod this often: that is what reopens devices
	// after a module reload or a killed holder. Default 2s.
	Resync time.Duration

	mu      sync.Mutex
	holders map[string]*podHolder // by pod key
	// stopped are the pods whose containers exitHold stopped for their
	// deletion: a kubelet never starts those again, whatever a lagging
	// watch still shows.
	stopped map[types.UID]bool
	nextPID int
}

type podHolder struct {
	uid      types.UID
	root     string
	pid      int       // 0 while the process is down
	killedAt time.Time // when a live holder vanished under us
}

// Run syncs until ctx is done.
func (s *HolderSync) Run(ctx context.Context) error {
	s.init()
	cluster.HoldExits(s.exitHold)
	c := &podloop.Controller{
		Name: "tt-holders", Client: s.Client, Resync: s.Resync, Logf: s.Logf,
		Tweak: func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" },
		Sync: func(ctx context.Context, key string, pods corelisters.PodLister) error {
			ns, name, err := splitKey(key)
			if err != nil {
				return nil
			}
			p, err := pods.Pods(ns).Get(name)
			if apierrors.IsNotFound(err) {
				p, err = nil, nil
			}
			if err != nil {
				return err
			}
			return s.Sync(key, p)
		},
	}
	return c.Run(ctx)
}

func (s *HolderSync) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders == nil {
		s.holders = map[string]*podHolder{}
		s.stopped = map[types.UID]bool{}
	}
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	if s.Resync <= 0 {
		s.Resync = 2 * time.Second
	}
	if s.Logf == nil {
		s.Logf = func(string, ...any) {}
	}
	if s.nextPID == 0 {
		s.nextPID = 40000
	}
}

// Holding reports whether the pod with this key holds devices now.
func (s *HolderSync) Holding(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.holders[key]
	return h != nil && h.pid != 0 && procAlive(h.root, h.pid)
}

// Sync brings the holder of the pod at key in line with p (nil: deleted).
func (s *HolderSync) Sync(key string, p *corev1.Pod) error {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.holders[key]
	if h != nil && (p == nil || p.UID != h.uid) {
		if err := s.release(key, h); err != nil {
			return err
		}
		h = nil
	}
	if p == nil {
		return nil
	}
	root, devs, want := s.wants(p)
	if !want || s.stopped[p.UID] {
		if h != nil {
			return s.release(key, h)
		}
		return nil
	}
	if h == nil {
		h = &podHolder{uid: p.UID, root: root}
		s.holders[key] = h
	}
	if h.pid != 0 {
		if procAlive(root, h.pid) {
			return nil
		}
		// Killed on the host (kubectl tt --force-unload): the container
		// restarts after a backoff and opens the devices again.
		s.Logf("tt-holders: %s: holder pid %d was killed; container restarts in %s", key, h.pid, restartBackoff)
		h.pid, h.killedAt = 0, s.Clock.Now()
	}
	if !h.killedAt.IsZero() && s.Clock.Since(h.killedAt) < restartBackoff {
		return nil
	}
	// No driver, no device nodes: the open would fail; retry on resync.
	if !moduleLoaded(root) {
		return nil
	}
	devs = present(devs, deviceIndices(root))
	if len(devs) == 0 {
		return nil
	}
	pid := freePID(root, s.nextPID)
	s.nextPID = pid + 1
	c := p.Spec.Containers[0].Name
	if err := openHolder(root, holderProc{PID: pid, Comm: comm(c), PodUID: string(p.UID), ContainerID: containerID(string(p.UID), c),
		Devices: devs}); err != nil {
		return err
	}
	h.pid, h.killedAt = pid, time.Time{}
	s.Logf("tt-holders: %s on %s holds /dev/tenstorrent/%v (pid %d)", key, p.Spec.NodeName, devs, pid)
	return nil
}

// exitHold stops a deleted pod's device holder before the pod reaper
// removes the pod, as a kubelet stops a pod's containers before it
// confirms the deletion: this sync's own watch may lag the reaper's (after
// an apiserver restart, by its reconnect backoff), and a process of a pod
// the API no longer has would hold the device for nobody.
func (s *HolderSync) exitHold(p *corev1.Pod) (time.Duration, string) {
	if p.DeletionTimestamp == nil {
		return 0, ""
	}
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	s.stopped[p.UID] = true
	if h := s.holders[key]; h != nil && h.uid == p.UID {
		if err := s.release(key, h); err != nil {
			return time.Second, "its device holder (pid " + strconv.Itoa(h.pid) + ") did not stop: " + err.Error()
		}
	}
	return 0, ""
}

func (s *HolderSync) release(key string, h *podHolder) error {
	if h.pid != 0 {
		if err := closeHolder(h.root, h.pid); err != nil {
			return err
		}
		s.Logf("tt-holders: %s released its devices (pid %d)", key, h.pid)
	}
	delete(s.holders, key)
	return nil
}

// wants reports whether p should hold devices, on which host, and which
// device indices (nil: all of them).
func (s *HolderSync) wants(p *corev1.Pod) (root string, devs []int, ok bool) {
	// A terminating pod's processes are gone before its object is: the
	// kubelet kills the containers, then the apiserver forgets the pod.
	if _, helper := p.Labels[HelperLabel]; helper || p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers) == 0 ||
		p.DeletionTimestamp != nil {
		return "", nil, false
	}
	root, ok = s.Hosts.Root(p.Spec.NodeName)
	if !ok {
		return "", nil, false
	}
	devs, ok = deviceMounts(p)
	if !ok && (requestsDevice(p) || opensHostDev(p)) {
		return root, nil, true
	}
	return root, devs, ok
}

// ResourcePrefix is the extended-resource namespace of Tenstorrent device
// plugins: a container given one opens the device without any hostPath.
const ResourcePrefix = "tenstorrent.com/"

// AnnOpensDevice is the sim's model of what a pod's process does: a pod
// mounting host /dev (privileged) opens /dev/tenstorrent only when this
// says so. A CSI node plugin mounts /dev and never opens the device.
const AnnOpensDevice = "sim.rollbook.dev/opens-tenstorrent"

func requestsDevice(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, rl := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			for name := range rl {
				if strings.HasPrefix(string(name), ResourcePrefix) {
					return true
				}
			}
		}
	}
	return false
}

func opensHostDev(p *corev1.Pod) bool {
	if p.Annotations[AnnOpensDevice] != "true" {
		return false
	}
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil && path.Clean(v.HostPath.Path) == "/dev" {
			return true
		}
	}
	return false
}

// deviceMounts reads the pod's hostPath volumes at or under
// /dev/tenstorrent: the whole directory means every device (nil), a
// /dev/tenstorrent/<N> volume means device N.
func deviceMounts(p *corev1.Pod) (devs []int, ok bool) {
	all := false
	for _, v := range p.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		hp := path.Clean(v.HostPath.Path)
		switch {
		case hp == "/dev/tenstorrent":
			all, ok = true, true
		case strings.HasPrefix(hp, devPrefix):
			if n, err := strconv.Atoi(strings.TrimPrefix(hp, devPrefix)); err == nil {
				devs, ok = append(devs, n), true
			}
		}
	}
	if all {
		return nil, true
	}
	return devs, ok
}

// present keeps the wanted devices that exist (nil wanted: all existing).
func present(want, have []int) []int {
	if want == nil {
		return have
	}
	var out []int
	for _, w := range want {
		for _, h := range have {
			if w == h {
				out = append(out, w)
				break
			}
		}
	}
	return out
}

// comm is a process name from a container name, at most 15 bytes like the
// kernel's TASK_COMM_LEN.
func comm(container string) string {
	if len(container) > 15 {
		return container[:15]
	}
	return container
}
