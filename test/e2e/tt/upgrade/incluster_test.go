//go:build e2e

package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

// An in-cluster run: bad input creates no Job; a submitted Job's command,
// run as its pod would (the Job's args, the tt-runner ServiceAccount's token
// and the cluster's CA, TLS verified), is killed mid-node and restarted, is
// paused (status shows it running as tt-runner with its progress and ETA),
// handed to a person's terminal, which is interrupted mid-node, and handed
// back to a re-submitted run, which finishes: each node cordoned once, one
// kmd helper per node, no node left cordoned, no violation.
func TestInClusterRunKilledHandedOverAndBack(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 8*time.Minute)
	// The runs of the package's earlier tests are in the journal already
	// (one cordoned a node of this test a moment before it began): count
	// only this test's runs.
	before, _, err := journal.Read(ctx, c.Client, "kube-system", journal.Name("tt"))
	if err != nil {
		t.Fatal(err)
	}
	earlierRuns := map[string]bool{}
	for _, e := range before {
		earlierRuns[e.Run] = true
	}
	bin := installRunner(t, ctx)
	nodes := []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"}
	version := "2.8.1"
	for _, n := range nodes {
		if node(t, n).Labels[tt.LabelKMDVersion] == version {
			version = "2.9.0"
		}
	}
	jobs := c.Client.BatchV1().Jobs(deploy.RunnerNamespace)
	noJobs := func(why string) {
		t.Helper()
		if l, err := jobs.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
			t.Fatalf("%s: jobs %v, %v", why, l, err)
		}
	}
	base := []string{"upgrade", "kmd", "--nodes", strings.Join(nodes, ","), "--in-cluster"}
	for _, bad := range [][]string{{"--version", "two.eight"}, {"--version", version, "--nodes", "no-such-node"},
		{"--version", version, "--dry-run"}, {"--version", version, "--steal-lock"}} {
		if out, code := run(t, ctx, append(base, bad...)...); code != cli.ExitUsage {
			t.Fatalf("%v: exit %d, want 2\n%s", bad, code, out)
		}
		noJobs(strings.Join(bad, " "))
	}

	// submit returns the submitted Job's command and cancels the Job: its
	// pod is played below by a process (kwok runs no container).
	submit := func() []string {
		t.Helper()
		out, code := run(t, ctx, append(base, "--version", version)...)
		if code != 0 || !strings.Contains(out, "kubectl tt logs --in-cluster -f") {
			t.Fatalf("submit: exit %d\n%s", code, out)
		}
		l, err := jobs.List(ctx, metav1.ListOptions{LabelSelector: ttcmd.LabelInCluster + "=tt"})
		if err != nil || len(l.Items) != 1 {
			t.Fatalf("want one Job: %v, %v", l, err)
		}
		j := l.Items[0]
		pod := j.Spec.Template.Spec
		if pod.ServiceAccountName != deploy.RunnerServiceAccount || pod.Containers[0].Command[0] != "kubectl-tt" ||
			!strings.Contains(out, "job/"+j.Name) {
			t.Fatalf("job %s: %+v", j.Name, pod)
		}
		// Its pod is admitted (Pod Security "restricted" in the runner namespace) and status shows it.
		var st string
		if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			st, _ = run(t, ctx, "status")
			return strings.Contains(st, "IN-CLUSTER: job/"+j.Name) && strings.Contains(st, "; pod "+j.Name), nil
		}); err != nil {
			t.Fatalf("status never showed the in-cluster Job's pod:\n%s", st)
		}
		if out, code := run(t, ctx, "cancel"); code != 0 || !strings.Contains(out, "job/"+j.Name+" deleted") {
			t.Fatalf("cancel: exit %d", code)
		}
		if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			l, err := jobs.List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, err
		}); err != nil {
			t.Fatalf("the cancelled Job is still there: %v", err)
		}
		args := pod.Containers[0].Args
		for _, a := range args {
			if a == "--in-cluster" || strings.HasPrefix(a, "--kubeconfig") {
				t.Fatalf("the Job's args carry %s: %v", a, args)
			}
		}
		// It serves its metrics on its pod's port.
		if !slices.Contains(args, "--metrics-bind-address=:9400") || len(pod.Containers[0].Ports) != 1 ||
			pod.Containers[0].Ports[0].ContainerPort != 9400 {
			t.Fatalf("the Job serves no metrics on port 9400: args %v, ports %+v", args, pod.Containers[0].Ports)
		}
		return args
	}
	jobArgs := submit()
	kubeconfig := runnerKubeconfig(t, ctx)

	helpers, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{LabelSelector: kube.LabelHelper + "=kmd"})
	if err != nil {
		t.Fatal(err)
	}
	defer helpers.Stop()
	// Every kmd helper created, by node, in order, from the cluster.
	added := make(chan string, 16)
	go func() {
		for e := range helpers.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok && e.Type == watch.Added {
				added <- p.Spec.NodeName
			}
		}
	}()
	var created []string
	nextHelper := func() string {
		t.Helper()
		select {
		case n := <-added:
			created = append(created, n)
			return n
		case <-ctx.Done():
			t.Fatal("no kmd helper appeared")
			return ""
		}
	}
	// pod starts the Job's command as its pod would.
	pod := func(args []string) (*exec.Cmd, *strings.Builder) {
		// Each pod has its own network; these processes share this one.
		args = append(slices.Clone(args), "--metrics-bind-address=127.0.0.1:0")
		cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}

	// The Job's first pod is killed mid-node; the Job's next pod takes over.
	p1, out1 := pod(jobArgs)
	first := nextHelper()
	_ = p1.Process.Signal(syscall.SIGKILL)
	_ = p1.Wait()
	t.Logf("pod 1 (killed):\n%s", out1)
	p2, out2 := pod(jobArgs)
	var st string
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		st, _ = run(t, ctx, "status")
		return strings.Contains(st, "held by system:serviceaccount:"+deploy.RunnerNamespace+":"+deploy.RunnerServiceAccount), nil
	}); err != nil {
		t.Fatalf("status never named the in-cluster run as the Lease's holder:\n%s", st)
	}
	second := nextHelper()
	if second == first {
		t.Fatalf("the restarted pod made a second helper on %s", first)
	}
	if _, code := run(t, ctx, "pause", "--reason", "hand over"); code != 0 {
		t.Fatal("pause failed")
	}
	err = p2.Wait()
	t.Logf("pod 2 (restarted, paused):\n%s", out2)
	if err != nil || !strings.Contains(out2.String(), "paused") {
		t.Fatalf("the paused in-cluster run finishes its node and exits 0 paused: %v\n%s", err, out2)
	}
	if !strings.Contains(out2.String(), "serving the run's metrics at http://127.0.0.1:") {
		t.Errorf("the in-cluster run does not say where it serves its metrics")
	}
	// Paused mid-way: status shows the ETA from the two nodes this run measured.
	if st, _ = run(t, ctx, "status"); !strings.Contains(st, "PAUSED") || !strings.Contains(st, "2 done of 3") ||
		!strings.Contains(st, "over 2 node(s) of this run") {
		t.Fatalf("status of the paused roll must show its progress and an ETA from its measured nodes:\n%s", st)
	}
	if _, code := run(t, ctx, "resume"); code != 0 {
		t.Fatal("resume failed")
	}

	// A person's terminal takes the roll over; it is interrupted mid-node.
	termCtx, stop := context.WithCancel(ctx)
	third := make(chan string, 1)
	go func() {
		select {
		case n := <-added:
			third <- n
		case <-ctx.Done():
			third <- ""
		}
		stop()
	}()
	local := make([]string, 0, len(jobArgs))
	for _, a := range jobArgs {
		if !strings.HasPrefix(a, "--helper-image=") && !strings.HasPrefix(a, "--metrics-bind-address=") {
			local = append(local, a)
		}
	}
	if _, code := run(t, termCtx, local...); code == 0 {
		t.Fatal("the interrupted terminal run exited 0")
	}
	stop()
	left := <-third
	created = append(created, left)
	if n := node(t, left); !n.Spec.Unschedulable || n.Annotations[kube.AnnLeftCordoned] == "" {
		t.Fatalf("the interrupted run must leave %s cordoned and say why: %v", left, n.Annotations)
	}

	// Back to the cluster: a re-submitted run finishes.
	p3, out3 := pod(submit())
	if err := p3.Wait(); err != nil {
		t.Fatalf("the re-submitted run: %v\n%s", err, out3)
	}
	t.Logf("pod 3:\n%s", out3)
	entries, _, err := journal.Read(ctx, c.Client, "kube-system", journal.Name("tt"))
	if err != nil {
		t.Fatal(err)
	}
	cordoned := map[string]int{}
	for _, e := range entries {
		// Only this test's runs act meanwhile (the package's tests run one at a time).
		if e.Reason == "Cordoned" && !earlierRuns[e.Run] {
			cordoned[e.Object]++
			t.Logf("%s %s cordoned by run %s (%s)", e.Time.Format(time.RFC3339Nano), e.Object, e.Run, e.User)
		}
	}
	for _, n := range nodes {
		got := node(t, n)
		if got.Labels[tt.LabelKMDVersion] != version || got.Spec.Unschedulable || got.Annotations[kube.AnnLeftCordoned] != "" {
			t.Fatalf("%s after the roll: kmd %q unschedulable %v %v", n, got.Labels[tt.LabelKMDVersion], got.Spec.Unschedulable,
				got.Annotations)
		}
		if cordoned["node/"+n] != 1 {
			t.Fatalf("%s cordoned %d times across the runs: %v", n, cordoned["node/"+n], cordoned)
		}
	}
	helpers.Stop()
	for n := range drain(added) {
		created = append(created, n)
	}
	if len(created) != len(nodes) {
		t.Fatalf("kmd helpers created on %v; want one per node", created)
	}
}

// An in-cluster run's --notify-url goes in a Secret owned by its Job, not
// in the Job's spec; the Job's command, given the Secret's value as its pod
// would be, posts the run's end to the webhook; cancelling the Job takes
// the Secret with it.
func TestInClusterRunNotifiesThroughItsSecret(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 3*time.Minute)
	bin := installRunner(t, ctx)
	events := make(chan map[string]any, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e map[string]any
		if r.URL.Path == "/hook/T0/SECRETPATH" && json.NewDecoder(r.Body).Decode(&e) == nil {
			events <- e
		}
	}))
	defer hook.Close()
	url := hook.URL + "/hook/T0/SECRETPATH"
	// A node labelled with the version it runs: the run has nothing to do
	// but end. The package's earlier in-cluster test left it labelled; alone,
	// this test labels the scenario's kmd.
	n := "kwok-node-0"
	version := node(t, n).Labels[tt.LabelKMDVersion]
	if version == "" {
		version = "2.7.0"
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, tt.LabelKMDVersion, version)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out, code := run(t, ctx, "upgrade", "kmd", "--nodes", n, "--version", version, "--in-cluster", "--notify-url", url)
	if code != 0 || strings.Contains(out, "SECRETPATH") {
		t.Fatalf("submit with --notify-url: exit %d, or the output shows the URL\n%s", code, out)
	}
	jobs := c.Client.BatchV1().Jobs(deploy.RunnerNamespace)
	l, err := jobs.List(ctx, metav1.ListOptions{LabelSelector: ttcmd.LabelInCluster + "=tt"})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("want one Job: %v, %v", l, err)
	}
	job := l.Items[0]
	if spec, _ := json.Marshal(job); strings.Contains(string(spec), "SECRETPATH") {
		t.Fatalf("the Job's spec holds the webhook URL")
	}
	sec, err := c.Client.CoreV1().Secrets(deploy.RunnerNamespace).Get(ctx, deploy.RunnerNotifySecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data[deploy.RunnerNotifyKey]) != url || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != job.UID {
		t.Fatalf("Secret %s: owners %+v; want the URL, owned by job/%s", sec.Name, sec.OwnerReferences, job.Name)
	}
	// The Job's pod, played by a process: its env var from the Secret.
	c0 := job.Spec.Template.Spec.Containers[0]
	cmd := exec.Command(bin, append(slices.Clone(c0.Args), "--metrics-bind-address=0", "--kubeconfig", runnerKubeconfig(t, ctx))...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	for _, e := range c0.Env {
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Name == sec.Name {
			cmd.Env = append(cmd.Env, e.Name+"="+string(sec.Data[r.SecretKeyRef.Key]))
		}
	}
	if got, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(got), "SECRETPATH") {
		t.Fatalf("the Job's run: %v, or its output shows the URL\n%s", err, got)
	}
	select {
	case e := <-events:
		if e["event"] != "done" || e["plugin"] != "tt" {
			t.Fatalf("the webhook got %v, want tt's done", e)
		}
	case <-ctx.Done():
		t.Fatal("the in-cluster run posted nothing to --notify-url")
	}
	if out, code := run(t, ctx, "cancel"); code != 0 {
		t.Fatalf("cancel: exit %d\n%s", code, out)
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Secrets(deploy.RunnerNamespace).Get(ctx, deploy.RunnerNotifySecret, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the cancelled Job's notify Secret is still there")
	}
}

// installRunner applies the tt-operator roles and deploy/runner.yaml as
// shipped, and returns the kubectl-tt that plays the Job's pod.
func installRunner(t *testing.T, ctx context.Context) string {
	t.Helper()
	c := simtest.Get(t)
	bin, err := simtest.AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rbac/tt-operator.yaml", deploy.RunnerFile} {
		if err := deploy.Apply(ctx, dyn, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// runnerKubeconfig is what the Job's pod has: the tt-runner ServiceAccount's
// token (TokenRequest, short-lived) and the API server's CA, TLS verified.
func runnerKubeconfig(t *testing.T, ctx context.Context) string {
	t.Helper()
	c := simtest.Get(t)
	tr, err := c.Client.CoreV1().ServiceAccounts(deploy.RunnerNamespace).CreateToken(ctx, deploy.RunnerServiceAccount,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := c.RESTConfig.CAData
	if len(ca) == 0 && c.RESTConfig.CAFile != "" {
		if ca, err = os.ReadFile(c.RESTConfig.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	if len(ca) == 0 {
		t.Fatal("the sim's rest.Config has no CA: TLS must stay verified")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sim"] = &clientcmdapi.Cluster{Server: c.RESTConfig.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["tt-runner"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["in-cluster"] = &clientcmdapi.Context{Cluster: "sim", AuthInfo: "tt-runner"}
	cfg.CurrentContext = "in-cluster"
	path := filepath.Join(t.TempDir(), "runner.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// drain is what is buffered in ch now.
func drain(ch chan string) chan string {
	out := make(chan string, cap(ch))
	for {
		select {
		case v := <-ch:
			out <- v
		default:
			close(out)
			return out
		}
	}
}
