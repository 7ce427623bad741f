package tthost

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/rollbook/rollbook/internal/fakehost"
)

func testHosts(t *testing.T, specs map[string]fakehost.Spec) *Hosts {
	t.Helper()
	h := &Hosts{Dir: t.TempDir(), roots: map[string]string{}}
	for n, s := range specs {
		if _, err := h.Add(n, s); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func devicePod(uid, node string, phase corev1.PodPhase, hostPaths ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w-" + uid, Namespace: "ns", UID: types.UID("0000000" + uid + "-1111-2222-3333-444444444444")},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "inference"}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
	for i, hp := range hostPaths {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v" + strconv.Itoa(i),
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hp}}})
	}
	return p
}

func inspect(t *testing.T, root string) fakehost.Observed {
	t.Helper()
	o, err := fakehost.Inspect(root)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestHolderFollowsPodLifecycle(t *testing.T) {
	h := testHosts(t, map[string]fakehost.Spec{"n0": {LoadedKMD: "2.7.0"}})
	root, _ := h.Root("n0")
	s := &HolderSync{Hosts: h}
	p := devicePod("1", "n0", corev1.PodPending, "/dev/tenstorrent")
	key := podKey(p)
	if err := s.Sync(key, p); err != nil || s.Holding(key) {
		t.Fatalf("pending pod: holding=%v err=%v", s.Holding(key), err)
	}
	p.Status.Phase = corev1.PodRunning
	if err := s.Sync(key, p); err != nil {
		t.Fatal(err)
	}
	o := inspect(t, root)
	if !s.Holding(key) || o.Refcnt != 2 || len(o.PIDs) != 2 { // pid 1 + holder
		t.Fatalf("running pod: holding=%v observed=%+v", s.Holding(key), o)
	}
	// The agent finds the pod by the UID in the holder's cgroup.
	cg, _ := os.ReadFile(filepath.Join(root, "proc", strconv.Itoa(o.PIDs[1]), "cgroup"))
	if !strings.Contains(string(cg), "pod"+strings.ReplaceAll(string(p.UID), "-", "_")+".slice") {
		t.Fatalf("cgroup %q does not name pod %s", cg, p.UID)
	}
	_ = s.Sync(key, p) // idempotent
	if o := inspect(t, root); o.Refcnt != 2 {
		t.Fatalf("second sync changed refcnt to %d", o.Refcnt)
	}
	p.Status.Phase = corev1.PodSucceeded
	if err := s.Sync(key, p); err != nil {
		t.Fatal(err)
	}
	if o := inspect(t, root); s.Holding(key) || o.Refcnt != 0 || len(o.PIDs) != 1 {
		t.Fatalf("finished pod still holds: %+v", o)
	}
	p.Status.Phase = corev1.PodRunning
	_ = s.Sync(key, p)
	if err := s.Sync(key, nil); err != nil { // deleted
		t.Fatal(err)
	}
	if o := inspect(t, root); o.Refcnt != 0 || len(o.PIDs) != 1 {
		t.Fatalf("deleted pod still holds: %+v", o)
	}
}

func TestHolderSelection(t *testing.T) {
	h := testHosts(t, map[string]fakehost.Spec{"n0": {LoadedKMD: "2.7.0", Devices: []fakehost.Device{{}, {}, {}}}})
	root, _ := h.Root("n0")
	s := &HolderSync{Hosts: h}
	helper := devicePod("1", "n0", corev1.PodRunning, "/dev/tenstorrent")
	helper.Labels = map[string]string{HelperLabel: "kmd"}
	other := devicePod("2", "n0", corev1.PodRunning, "/dev", "/var/log")
	offHost := devicePod("3", "n9", corev1.PodRunning, "/dev/tenstorrent")
	one := devicePod("4", "n0", corev1.PodRunning, "/dev/tenstorrent/1/")
	for _, p := range []*corev1.Pod{helper, other, offHost, one} {
		if err := s.Sync(podKey(p), p); err != nil {
			t.Fatal(err)
		}
	}
	if s.Holding(podKey(helper)) || s.Holding(podKey(other)) || s.Holding(podKey(offHost)) || !s.Holding(podKey(one)) {
		t.Fatal("only the pod mounting /dev/tenstorrent/1 may hold")
	}
	if o := inspect(t, root); o.Refcnt != 1 {
		t.Fatalf("refcnt %d, want 1 (device 1 only)", o.Refcnt)
	}
}

// A holder killed on the host (force-unload) comes back like a restarted
// container: after the backoff, and only once the driver is loaded.
func TestKilledHolderReopensAfterBackoff(t *testing.T) {
	h := testHosts(t, map[string]fakehost.Spec{"n0": {LoadedKMD: "2.7.0"}})
	root, _ := h.Root("n0")
	clk := testingclock.NewFakeClock(time.Now())
	s := &HolderSync{Hosts: h, Clock: clk}
	p := devicePod("1", "n0", corev1.PodRunning, "/dev/tenstorrent")
	key := podKey(p)
	_ = s.Sync(key, p)
	pid := inspect(t, root).PIDs[1]
	t.Setenv(fakehost.RootEnv, root)
	if code := fakehost.Main([]string{"kill", "-KILL", strconv.Itoa(pid)}); code != 0 {
		t.Fatalf("fake kill of our holder: exit %d", code)
	}
	if code := fakehost.Main([]string{"rmmod", "tenstorrent"}); code != 0 {
		t.Fatalf("rmmod after the kill: exit %d", code)
	}
	_ = s.Sync(key, p)
	clk.Step(restartBackoff)
	_ = s.Sync(key, p)
	if s.Holding(key) {
		t.Fatal("reopened the devices with no driver loaded")
	}
	ko := filepath.Join(root, "m.ko")
	if err := os.WriteFile(ko, fakehost.KernelObject("2.8.0", fakehost.DefaultKernel), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := fakehost.Main([]string{"insmod", ko}); code != 0 {
		t.Fatalf("insmod: exit %d", code)
	}
	_ = s.Sync(key, p)
	if o := inspect(t, root); !s.Holding(key) || o.Refcnt != 2 {
		t.Fatalf("not reopened after insmod: %+v", o)
	}
	if code := fakehost.Main([]string{"rmmod", "tenstorrent"}); code == 0 {
		t.Fatal("rmmod succeeded while a pod holds the devices")
	}
}

func TestStubbornHostHolderIsLeftAlone(t *testing.T) {
	plan, err := PlanFleet([]string{"a", "b", "c", "d", "e"}, true)
	if err != nil {
		t.Fatal(err)
	}
	h := testHosts(t, map[string]fakehost.Spec{"e": plan[4].Spec})
	root, _ := h.Root("e")
	s := &HolderSync{Hosts: h}
	p := devicePod("1", "e", corev1.PodRunning, "/dev/tenstorrent")
	_ = s.Sync(podKey(p), p)
	_ = s.Sync(podKey(p), nil)
	if o := inspect(t, root); o.Refcnt != 1 || len(o.PIDs) != 2 || o.PIDs[1] != StubbornPID {
		t.Fatalf("stubborn host holder changed: %+v", o)
	}
}

// A pod's containers, once stopped for its deletion, never start again —
// also when this sync's own watch lags (after an apiserver restart, by its
// reconnect backoff) and still shows the pod Running: a holder reopened
// then holds the device for a pod the API no longer has.
func TestStoppedForDeletionNeverReopens(t *testing.T) {
	h := testHosts(t, map[string]fakehost.Spec{"n0": {LoadedKMD: "2.7.0"}})
	root, _ := h.Root("n0")
	s := &HolderSync{Hosts: h}
	p := devicePod("1", "n0", corev1.PodRunning, "/dev/tenstorrent")
	key := podKey(p)
	if err := s.Sync(key, p); err != nil || !s.Holding(key) {
		t.Fatalf("running pod: holding=%v err=%v", s.Holding(key), err)
	}
	deleting := p.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(30 * time.Second)}
	if d, why := s.exitHold(deleting); d != 0 {
		t.Fatalf("exit held %s: %s", d, why)
	}
	// The stale view: the same pod, Running, no deletionTimestamp.
	if err := s.Sync(key, p); err != nil {
		t.Fatal(err)
	}
	if o := inspect(t, root); s.Holding(key) || o.Refcnt != 0 || len(o.PIDs) != 1 {
		t.Fatalf("a pod stopped for its deletion holds the device again: holding=%v observed=%+v", s.Holding(key), o)
	}
	// Another pod under the same name (a StatefulSet's) is another pod.
	again := devicePod("2", "n0", corev1.PodRunning, "/dev/tenstorrent")
	again.Name = p.Name
	if err := s.Sync(key, again); err != nil || !s.Holding(key) {
		t.Fatalf("a new pod under the name: holding=%v err=%v", s.Holding(key), err)
	}
}
