package tthost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/monitor"
)

// TestRunnerAndHolders runs the control plane in-process with two nodes:
// kwok-node-0 is a tt host, kwok-node-1 is not.
func TestRunnerAndHolders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	c, err := cluster.Up(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), Nodes: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := NewHosts(dir, exe, OfferedTTSMI)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := PlanFleet([]string{"kwok-node-0"}, false)
	root, err := hosts.Add("kwok-node-0", plan[0].Spec)
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(dir, "bin", AgentName)
	if err := os.MkdirAll(filepath.Dir(agent), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, agent); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// The runner's own mechanics are tested with a fake agent bound over
	// the image's kubectl-tt; the sim never overrides it.
	r := &Runner{Client: c.Client, Hosts: hosts, AgentOverride: agent, Logf: t.Logf}
	if layout := os.Getenv(EnvImage); layout != "" {
		store := os.Getenv(EnvImageStore)
		if store == "" {
			store = DefaultImageStore()
		}
		if r.Image, err = LoadImage(layout, store); err != nil {
			t.Fatal(err)
		}
		defer r.Image.Close()
		helperImage = r.Image.Ref()
	}
	if why := r.imageProblem(); why != "" {
		t.Skipf("helpers run only inside the node-agent image: %s", why)
	}
	hs := &HolderSync{Client: c.Client, Hosts: hosts, Logf: t.Logf, Resync: 500 * time.Millisecond}
	go func() { _ = r.Run(runCtx) }()
	go func() { _ = hs.Run(runCtx) }()
	cs := c.Client

	t.Run("success", func(t *testing.T) {
		p := finished(t, ctx, cs, helper("ok", "kwok-node-0", AgentName, "fake", "msg", "hello"))
		term := p.Status.ContainerStatuses[0].State.Terminated
		if p.Status.Phase != corev1.PodSucceeded || term.ExitCode != 0 || term.Reason != "Completed" ||
			term.Message != "hello root=/host node=kwok-node-0" || p.Status.PodIP != hostIP ||
			p.Status.ContainerStatuses[0].ImageID != r.Image.Ref() {
			t.Fatalf("status %+v", p.Status)
		}
	})
	t.Run("exit 3", func(t *testing.T) {
		p := finished(t, ctx, cs, helper("fails", "kwok-node-0", AgentName, "fake", "exit", "3", "msg", "broken"))
		term := p.Status.ContainerStatuses[0].State.Terminated
		if p.Status.Phase != corev1.PodFailed || term.ExitCode != 3 || term.Reason != "Error" || !strings.HasPrefix(term.Message,
			"broken") {
			t.Fatalf("status %+v", p.Status)
		}
	})
	// The image's own agent runs: kmd-build builds for the host's kernel
	// and prints the module; it loads nothing (loading needs kubectl tt's
	// vouch, which test/e2e/tt/vouch covers end to end).
	t.Run("real kmd agent", func(t *testing.T) {
		p := finished(t, ctx, cs, helper("kmd", "kwok-node-0", "kubectl-tt", "node-agent", "kmd-build", "--version", "2.8.0",
			"--commit", fakehost.FakeCommit("ttkmd-2.8.0")))
		res, err := nodeagent.ParseResult([]byte(p.Status.ContainerStatuses[0].State.Terminated.Message))
		if err != nil || p.Status.Phase != corev1.PodSucceeded || !res.Success || res.Op != nodeagent.OpKMDBuild ||
			res.Module == nil || len(res.Module.SHA256) != 64 {
			t.Fatalf("phase %s result %+v err %v", p.Status.Phase, res, err)
		}
		if o, _ := fakehost.Inspect(root); o.LoadedKMD != "2.7.0" {
			t.Fatalf("kmd-build loaded kmd %q", o.LoadedKMD)
		}
	})
	t.Run("command the image lacks", func(t *testing.T) {
		p := finished(t, ctx, cs, helper("lacks", "kwok-node-0", "/opt/nowhere/kubectl-tt", "fake"))
		term := p.Status.ContainerStatuses[0].State.Terminated
		if p.Status.Phase != corev1.PodFailed || term.ExitCode != 127 || !strings.Contains(term.Message, "not found in the image") &&
			!strings.Contains(term.Message, "no such file") {
			t.Fatalf("status %+v", p.Status)
		}
	})
	t.Run("node without host root", func(t *testing.T) {
		p := finished(t, ctx, cs, helper("nohost", "kwok-node-1", AgentName, "fake"))
		if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "SimNoTTHost" || !strings.Contains(p.Status.Message, "kwok-node-1") {
			t.Fatalf("status %+v", p.Status)
		}
	})
	t.Run("env from a Secret", func(t *testing.T) {
		// As a kubelet: a missing Secret keeps the pod Pending; once it
		// exists its key is the container's env var.
		pod := helper("secret-env", "kwok-node-0", AgentName, "fake", "env", "URL")
		pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "bundle"}, Key: "url"}}}}
		create(t, ctx, cs, pod)
		w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=secret-env"})
		if err != nil {
			t.Fatal(err)
		}
		// Two resyncs of the runner without the Secret: still Pending, nothing ran.
		deadline := time.After(2 * time.Second) // a negative: bounded, not a wait for a condition
	pending:
		for {
			select {
			case e := <-w.ResultChan():
				if p, ok := e.Object.(*corev1.Pod); ok && p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
					t.Fatalf("started without its Secret: %+v", p.Status)
				}
			case <-deadline:
				break pending
			}
		}
		w.Stop()
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bundle", Namespace: "default"},
			Data: map[string][]byte{"url": []byte("https://b.example/fw?sig=abc")}}
		if _, err := cs.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := until(t, ctx, cs, pod, terminal)
		if term := p.Status.ContainerStatuses[0].State.Terminated; !strings.HasPrefix(term.Message, "URL=https://b.example/fw?sig=abc ") {
			t.Fatalf("the Secret's key did not reach the env: %q", term.Message)
		}
	})
	t.Run("node affinity the node fails", func(t *testing.T) {
		// A kubelet rejects a pinned pod whose required node affinity its
		// node does not match (Pod Predicate NodeAffinity): helpers kept
		// off control-plane nodes never run on one.
		n, err := cs.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			n, _ := cs.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
			delete(n.Labels, "node-role.kubernetes.io/control-plane")
			_, _ = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}()
		pod := helper("on-cp", "kwok-node-0", AgentName, "fake")
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "node-role.kubernetes.io/control-plane",
					Operator: corev1.NodeSelectorOpDoesNotExist}}}}}}}
		p := finished(t, ctx, cs, pod)
		if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "NodeAffinity" {
			t.Fatalf("a helper whose affinity excludes its node ran: %+v", p.Status)
		}
	})
	t.Run("other command", func(t *testing.T) {
		p := finished(t, ctx, cs, helper("sh", "kwok-node-0", "/bin/sh", "-c", "true"))
		if p.Status.Phase != corev1.PodFailed || !strings.Contains(p.Status.ContainerStatuses[0].State.Terminated.Message,
			"only runs `kubectl-tt") {
			t.Fatalf("status %+v", p.Status)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		pod := helper("slow", "kwok-node-0", AgentName, "fake", "sleep", "60s")
		pod.Spec.ActiveDeadlineSeconds = ptr(int64(1))
		start := time.Now()
		p := finished(t, ctx, cs, pod)
		if p.Status.Phase != corev1.PodFailed || p.Status.Reason != reasonDeadline || time.Since(start) > 10*time.Second {
			t.Fatalf("after %s: status %+v", time.Since(start), p.Status)
		}
	})
	t.Run("deleted while running, no grace period", func(t *testing.T) {
		pod := create(t, ctx, cs, helper("gone", "kwok-node-0", AgentName, "fake", "sleep", "60s"))
		until(t, ctx, cs, pod, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		waitFile(t, filepath.Join(hosts.Dir, "runner.log"), "KILLED default/gone")
	})
	// As from a kubelet: SIGTERM to the container's main process; what it
	// reports on its way out is the pod's final status, written while it
	// is Terminating.
	t.Run("deleted while running, stops on SIGTERM", func(t *testing.T) {
		pod := create(t, ctx, cs, helper("term", "kwok-node-0", AgentName, "fake", "on-term", "finish", "sleep", "60s"))
		waitTrue(t, func() bool { _, err := os.Stat(filepath.Join(root, "sigterm-finish")); return err == nil })
		if err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		p := until(t, ctx, cs, pod, func(p *corev1.Pod) bool { return terminal(p) })
		if p.DeletionTimestamp == nil || p.Status.ContainerStatuses[0].State.Terminated == nil ||
			!strings.Contains(p.Status.ContainerStatuses[0].State.Terminated.Message, "stopped on SIGTERM") {
			t.Fatalf("want the Terminating pod's status to say it stopped on SIGTERM: %+v", p.Status)
		}
		waitFile(t, filepath.Join(hosts.Dir, "runner.log"), "TERMINATED default/term")
	})
	// Killed at the end of its grace period (3 s, deletionTimestamp to the
	// second: 2–3 s after the deletion), not before. (The pod reaper of
	// this harness's sim is another process and does not wait for this
	// runner: the pod may be gone before its final status.)
	t.Run("deleted while running, outlives its grace period", func(t *testing.T) {
		pod := helper("stubborn", "kwok-node-0", AgentName, "fake", "on-term", "ignore", "sleep", "60s")
		pod.Spec.TerminationGracePeriodSeconds = ptr(int64(3))
		pod = create(t, ctx, cs, pod)
		waitTrue(t, func() bool { _, err := os.Stat(filepath.Join(root, "sigterm-ignore")); return err == nil })
		start := time.Now()
		if err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTrue(t, func() bool {
			return strings.Contains(readFile(t, filepath.Join(hosts.Dir, "runner.log")), "KILLED default/stubborn") ||
				strings.Contains(readFile(t, filepath.Join(hosts.Dir, "runner.log")), "killed=true")
		})
		if took := time.Since(start); took < 2*time.Second || took > 6*time.Second {
			t.Fatalf("killed %s after the deletion, want at the end of its 3s grace period:\n%s", took,
				readFile(t, filepath.Join(hosts.Dir, "runner.log")))
		}
	})
	t.Run("device holder", func(t *testing.T) {
		base := inspectOK(t, root).Refcnt
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "workload", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: "kwok-node-0", Containers: []corev1.Container{{Name: "w", Image: "w"}},
				Volumes: []corev1.Volume{deviceVolumeForTest()}},
		}
		pod = create(t, ctx, cs, pod)
		until(t, ctx, cs, pod, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		key := podKey(pod)
		waitTrue(t, func() bool { return hs.Holding(key) })
		if got := inspectOK(t, root).Refcnt; got != base+2 {
			t.Fatalf("refcnt %d, want %d", got, base+2)
		}
		if err := cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTrue(t, func() bool { return !hs.Holding(key) && inspectOK(t, root).Refcnt == base })
	})
	t.Run("unknown image", func(t *testing.T) {
		// Only the image the runner was given resolves: by its digest or its
		// tag. Every other name fails as a kubelet's pull does.
		other := "sha256:" + strings.Repeat("0", 64)
		for i, image := range []string{
			AgentImageRepo + ":lastest",
			AgentImageRepo + ":latest",
			AgentImageRepo + "@" + other,
			"ghcr.io/someone/node-agent@" + r.Image.Digest,
			AgentImageRepo,
		} {
			p := helper(fmt.Sprintf("typo-%d", i), "kwok-node-0", AgentName, "fake", "msg", "never")
			p.Spec.Containers[0].Image = image
			p = create(t, ctx, cs, p)
			for _, reason := range []string{"ErrImagePull", "ImagePullBackOff"} {
				got := until(t, ctx, cs, p, func(p *corev1.Pod) bool {
					w := p.Status.ContainerStatuses
					return p.Status.Phase == corev1.PodPending && len(w) == 1 && w[0].State.Waiting != nil && w[0].State.Waiting.Reason == reason
				})
				want := PullError(image)
				if reason == "ImagePullBackOff" {
					want = `Back-off pulling image "` + image + `": ErrImagePull: ` + want
				}
				if msg := got.Status.ContainerStatuses[0].State.Waiting.Message; msg != want {
					t.Errorf("%s: %s message %q, want %q", image, reason, msg, want)
				}
			}
			if strings.Contains(readFile(t, filepath.Join(hosts.Dir, "runner.log")), "START default/"+p.Name+" ") {
				t.Fatalf("a helper naming %s, which the registry lacks, ran", image)
			}
		}
		// And the image by its tag runs.
		p := helper("by-tag", "kwok-node-0", AgentName, "fake", "msg", "tagged")
		p.Spec.Containers[0].Image = r.Image.Repo + ":" + r.Image.Tag
		if got := finished(t, ctx, cs, p); got.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("the image by its tag: %+v", got.Status)
		}
	})
	t.Run("device plugin and privileged holders, not a CSI plugin", func(t *testing.T) {
		base := inspectOK(t, root).Refcnt
		plugin := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plugin", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: "kwok-node-0", Containers: []corev1.Container{{Name: "p", Image: "p",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"tenstorrent.com/n150": resource.MustParse("1")}}}}}}
		dev := corev1.Volume{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev"}}}
		privileged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: "default",
			Annotations: map[string]string{AnnOpensDevice: "true"}},
			Spec: corev1.PodSpec{NodeName: "kwok-node-0", Volumes: []corev1.Volume{dev}, Containers: []corev1.Container{{Name: "p",
				Image: "p"}}}}
		csi := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "csi", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: "kwok-node-0", Volumes: []corev1.Volume{dev}, Containers: []corev1.Container{{Name: "c",
				Image: "c"}}}}
		for _, p := range []*corev1.Pod{plugin, privileged, csi} {
			p = create(t, ctx, cs, p)
			until(t, ctx, cs, p, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		}
		waitTrue(t, func() bool { return hs.Holding("default/plugin") && hs.Holding("default/privileged") })
		time.Sleep(time.Second) // a resync: the CSI pod must still not hold it
		if hs.Holding("default/csi") {
			t.Fatal("a pod mounting /dev without opening the device holds it")
		}
		if got := inspectOK(t, root).Refcnt; got != base+4 {
			t.Fatalf("refcnt %d, want %d", got, base+4)
		}
		rep := &recorded{}
		ev := &HostEvents{Hosts: hosts, Report: rep}
		ev.Poll()
		tool := exec.Command(filepath.Join(hosts.ToolsDir, "rmmod"), "tenstorrent")
		tool.Env = append(os.Environ(), fakehost.RootEnv+"="+root)
		if err := tool.Run(); err == nil {
			t.Fatal("rmmod under holders succeeded")
		}
		ev.Poll()
		if len(rep.rules) != 1 || rep.rules[0] != monitor.RuleRmmodUnderHolder {
			t.Fatalf("reported %v, want one %s", rep.rules, monitor.RuleRmmodUnderHolder)
		}
		for _, name := range []string{"plugin", "privileged", "csi"} {
			if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitTrue(t, func() bool { return inspectOK(t, root).Refcnt == base })
	})
	t.Run("node down", func(t *testing.T) {
		ready := func() corev1.ConditionStatus {
			n, err := cs.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status
				}
			}
			return ""
		}
		mark := func(val string) {
			patch := `{"metadata":{"labels":{"` + NotReadyLabel + `":` + val + `}}}`
			if _, err := cs.CoreV1().Nodes().Patch(ctx, "kwok-node-0", types.MergePatchType, []byte(patch),
				metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		mark(`"true"`)
		waitTrue(t, func() bool { return ready() == corev1.ConditionFalse })
		p := create(t, ctx, cs, helper("down", "kwok-node-0", AgentName, "fake"))
		time.Sleep(3 * time.Second) // longer than kwok's heartbeat would take to set Ready=True again
		if got, err := cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{}); err != nil ||
			got.Status.Phase != corev1.PodPending || ready() != corev1.ConditionFalse {
			t.Fatalf("on a down node after 3s: pod %v (err %v), node Ready=%s; want Pending and False", got.Status.Phase, err, ready())
		}
		mark("null")
		waitTrue(t, func() bool { return ready() == corev1.ConditionTrue })
		if got := until(t, ctx, cs, p, terminal); got.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("after the node came back: status %+v", got.Status)
		}
	})
}

// helperImage is what helper pods name: the image the runner was given.
var helperImage = AgentImageRepo + ":latest"

// helper is a helper pod as kubectl tt makes them: the host's / at /host.
func helper(name, node string, argv ...string) *corev1.Pod {
	host := corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{HelperLabel: "test"}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Volumes: []corev1.Volume{host},
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "agent", Image: helperImage, Command: argv,
				Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}}}},
	}
}

func deviceVolumeForTest() corev1.Volume {
	return corev1.Volume{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/tenstorrent"}}}
}

func create(t *testing.T, ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func finished(t *testing.T, ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	return until(t, ctx, cs, create(t, ctx, cs, p), terminal)
}

// until watches the pod until cond holds.
func until(t *testing.T, ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", p.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return cs.CoreV1().Pods(p.Namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cs.CoreV1().Pods(p.Namespace).Watch(ctx, o)
		},
	}
	ev, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
		pod, ok := e.Object.(*corev1.Pod)
		return ok && cond(pod), nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	return ev.Object.(*corev1.Pod)
}

func inspectOK(t *testing.T, root string) fakehost.Observed {
	t.Helper()
	o, err := fakehost.Inspect(root)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// waitTrue polls host-side state (files, not API objects).
func waitTrue(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

func waitFile(t *testing.T, path, substr string) {
	t.Helper()
	waitTrue(t, func() bool { b, _ := os.ReadFile(path); return strings.Contains(string(b), substr) })
}

type recorded struct{ rules []string }

func (r *recorded) Report(rule, _, _ string) { r.rules = append(r.rules, rule) }

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, _ := os.ReadFile(p)
	return string(b)
}
