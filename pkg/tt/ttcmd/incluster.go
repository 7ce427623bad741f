package ttcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/cli/lease"
	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/tt"
)

// An in-cluster run (`upgrade … --in-cluster`) is the same command as a Job
// in deploy.RunnerNamespace under the ServiceAccount deploy.RunnerServiceAccount,
// bound to the tt-operator roles (deploy/runner.yaml). It takes the same
// Lease and writes the same journal as a terminal's run, so either takes
// over from the other as two terminals do.
const (
	// LabelInCluster marks the Jobs (and their pods) of in-cluster runs.
	LabelInCluster = kube.LabelInCluster
	// annSubmittedBy says who submitted an in-cluster run.
	annSubmittedBy  = "rollbook.dev/submitted-by"
	runnerContainer = "run"
)

// dropped are the flags an in-cluster run does not pass on: the submit's own,
// and the kubeconfig's (the Job's pod uses its ServiceAccount).
var dropped = map[string]bool{"in-cluster": true, "runner-namespace": true, "kubeconfig": true, "context": true,
	"cluster": true, "user": true, "namespace": true, "server": true, "token": true, "as": true, "as-group": true,
	"as-uid": true, "certificate-authority": true, "client-certificate": true, "client-key": true,
	"insecure-skip-tls-verify": true, "tls-server-name": true, "username": true, "password": true, "cache-dir": true}

// addInClusterFlags gives an upgrade command --in-cluster.
func addInClusterFlags(cmd *cobra.Command) {
	cmd.Flags().Bool("in-cluster", false, "run this same command as a Job in --runner-namespace under the tt-runner "+
		"ServiceAccount (deploy/"+deploy.RunnerFile+"), so a long roll does not depend on this terminal; prints the Job "+
		"and how to follow it (status, logs --in-cluster, pause, cancel)")
	cmd.Flags().String("runner-namespace", deploy.RunnerNamespace, "namespace of in-cluster runs' Jobs")
}

// runOrSubmit runs the validated command here, or with --in-cluster
// submits it as a Job instead.
func runOrSubmit(cmd *cobra.Command, g *cli.Globals, helperImage string, run func(context.Context) error) error {
	if err := confirmFleetWide(cmd, g); err != nil {
		return err
	}
	if in, _ := cmd.Flags().GetBool("in-cluster"); !in {
		if cli.OutsideSchedule(cmd.Flags(), g, "tt") {
			return nil
		}
		return run(cmd.Context())
	}
	ns, _ := cmd.Flags().GetString("runner-namespace")
	return submit(cmd.Context(), cmd, g, ns, helperImage)
}

// confirmFleetWide asks on a terminal before an upgrade of every node (no
// NODE, --nodes or --selector), as kubeadm upgrade apply asks before it
// acts: the default selection is the whole fleet. A chosen set of nodes,
// --yes, --dry-run and a script are not asked.
func confirmFleetWide(cmd *cobra.Command, g *cli.Globals) error {
	fs := cmd.Flags()
	if yes, _ := fs.GetBool("yes"); yes || fs.Changed("nodes") || fs.Changed("selector") || len(fs.Args()) > 0 {
		return nil
	}
	if dry := fs.Lookup("dry-run"); dry != nil && dry.Value.String() == "client" {
		return nil
	}
	out := g.IOStreams.Out
	if o, _ := fs.GetString("output"); o != "" {
		out = g.IOStreams.ErrOut
	}
	return cli.ConfirmOnTerminal(g.IOStreams.In, out,
		"No NODE, --nodes or --selector: "+cmd.CommandPath()+" acts on every Tenstorrent node of the cluster, --max-parallel at "+
			"a time (--dry-run shows the plan).",
		"Upgrade every node?", "Nothing upgraded.")
}

// submit checks what a Job's run would refuse, then creates the Job.
func submit(ctx context.Context, cmd *cobra.Command, g *cli.Globals, ns, image string) error {
	fs := cmd.Flags()
	if dry := fs.Lookup("dry-run"); dry != nil && dry.Value.String() == "client" {
		return cli.UsageErrorf("--in-cluster with --dry-run: plan here (drop --in-cluster), then submit")
	}
	if steal, _ := fs.GetBool("steal-lock"); steal {
		return cli.UsageErrorf("--in-cluster with --steal-lock: a Job's restarted pod would steal again; stop the run " +
			"holding the lock (Ctrl-C, or `kubectl tt cancel`), or let it be taken over once it stops renewing")
	}
	if key := fs.Lookup("signing-key"); key != nil && key.Changed {
		return cli.UsageErrorf("--in-cluster with --signing-key: the module-signing key stays on this machine, and a Job " +
			"would need it in the cluster; run the upgrade from this terminal")
	}
	if image == "" {
		return cli.UsageErrorf("--in-cluster needs an image: pass --helper-image (the node-agent image ships kubectl-tt)")
	}
	waitForWindow(fs)
	serveMetrics(fs)
	notifyURL := handNotifyToSecret(fs)
	args := runnerArgs(cmd, image)
	for _, a := range args {
		if lease.RedactArgs([]string{a})[0] != a {
			flag := strings.SplitN(a, "=", 2)[0]
			return cli.UsageErrorf("--in-cluster: %s would be readable in the Job's spec; pass it from the terminal", flag)
		}
	}
	cs, err := g.Factory.KubernetesClientSet()
	if err != nil {
		return err
	}
	if err := checkNodesExist(ctx, cs, fs); err != nil {
		return err
	}
	if err := checkNeedsPerson(ctx, cs, cmd); err != nil {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, deploy.RunnerServiceAccount, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return cli.UsageErrorf("no ServiceAccount %s/%s for in-cluster runs: a cluster admin applies deploy/%s",
				ns, deploy.RunnerServiceAccount, deploy.RunnerFile)
		}
		return err
	}
	needs := []cli.Permission{{Verb: "create", Group: "batch", Resource: "jobs", Namespace: ns}}
	if notifyURL != "" {
		needs = append(needs, cli.Permission{Verb: "create", Resource: "secrets", Namespace: ns},
			cli.Permission{Verb: "update", Resource: "secrets", Namespace: ns, Name: deploy.RunnerNotifySecret})
	}
	if err := cli.CheckPermissions(ctx, cs, "tt", needs); err != nil {
		return err
	}
	who := lease.WhoAmI(ctx, cs)
	job, err := cs.BatchV1().Jobs(ns).Create(ctx, RunnerJob(ns, verbOf(cmd), image, args, who), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the in-cluster run's Job: %w", err)
	}
	if notifyURL != "" {
		if err := storeNotifySecret(ctx, cs, job, notifyURL); err != nil {
			return err
		}
	}
	out := g.IOStreams.Out
	fmt.Fprintln(out, cli.Where(g))
	fmt.Fprintf(out, "job/%s created in %s: kubectl-tt %s\n", job.Name, ns, strings.Join(args, " "))
	fmt.Fprintf(out, `Follow it:
  kubectl tt status                 # the run, its progress and ETA, the Job's pod
  kubectl tt logs --in-cluster -f   # the run's output
  kubectl tt pause / resume         # finish the node in flight and start no other / go on
  kubectl tt cancel                 # stop it (the run stops between API calls, as on Ctrl-C)
Take it over from a terminal: run the same command there with --steal-lock (the Job then ends).
`)
	return nil
}

// handNotifyToSecret takes --notify-url (or --notify-url-env) off the
// flags the Job is given and says the Job's pod reads it from
// deploy.RunnerNotifyEnv; it returns the URL ("" without one).
func handNotifyToSecret(fs *pflag.FlagSet) string {
	f := fs.Lookup("notify-url")
	if f == nil || !fs.Changed("notify-url") && !fs.Changed("notify-url-env") {
		return ""
	}
	url := f.Value.String() // runnerArgs leaves --notify-url out
	_ = fs.Set("notify-url-env", deploy.RunnerNotifyEnv)
	return url
}

// storeNotifySecret puts the URL in deploy.RunnerNotifySecret, owned by the
// Job so that it goes when the Job does (cancel, or the Job's TTL). The Job
// is deleted again when the Secret cannot be written: its run would fail
// to start without it.
func storeNotifySecret(ctx context.Context, cs kubernetes.Interface, job *batchv1.Job, url string) error {
	owner := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID}
	err := kube.PutSecret(ctx, cs, job.Namespace, deploy.RunnerNotifySecret, notifySecretPurpose,
		map[string][]byte{deploy.RunnerNotifyKey: []byte(url)}, owner)
	if err == nil {
		return nil
	}
	derr := cs.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name,
		metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if derr != nil && !apierrors.IsNotFound(derr) {
		return fmt.Errorf("--notify-url goes to the in-cluster run in a Secret: %w; and job/%s could not be deleted again: %v",
			err, job.Name, derr)
	}
	return fmt.Errorf("--notify-url goes to the in-cluster run in a Secret: %w (job/%s deleted again; nothing ran)", err, job.Name)
}

// notifySecretPurpose labels the notify Secret (kube.LabelSecret).
const notifySecretPurpose = "notify-url"

// verbOf is "kmd", "smi" or "firmware".
func verbOf(cmd *cobra.Command) string { return cmd.Name() }

// waitForWindow makes an in-cluster run with --window wait for the next
// window rather than end paused (unless --wait-for-window=false): a Job
// has no one to re-run it.
func waitForWindow(fs *pflag.FlagSet) {
	if fs.Changed("window") && !fs.Changed("wait-for-window") {
		_ = fs.Set("wait-for-window", "true")
	}
}

// RunnerMetricsPort is where an in-cluster run serves its metrics (unless
// --metrics-bind-address says otherwise).
const RunnerMetricsPort = 9400

// serveMetrics makes an in-cluster run serve its metrics on its pod's
// RunnerMetricsPort unless --metrics-bind-address was given: a Job's
// progress is otherwise seen only through status.
func serveMetrics(fs *pflag.FlagSet) {
	if fs.Lookup("metrics-bind-address") != nil && !fs.Changed("metrics-bind-address") {
		_ = fs.Set("metrics-bind-address", fmt.Sprintf(":%d", RunnerMetricsPort))
	}
}

// metricsPort is the port args serve metrics on (0: none).
func metricsPort(args []string) int32 {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--metrics-bind-address="); ok {
			if _, p, err := net.SplitHostPort(v); err == nil {
				if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 {
					return int32(n)
				}
			}
		}
	}
	return 0
}

// runnerArgs are the command's arguments for the Job: its command path
// below the root, every flag set (minus dropped), and the positional
// arguments; --helper-image always, so the run uses the Job's own image.
func runnerArgs(cmd *cobra.Command, image string) []string {
	var path []string
	for c := cmd; c.HasParent(); c = c.Parent() {
		path = append([]string{c.Name()}, path...)
	}
	args := path
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if dropped[f.Name] || f.Name == "helper-image" || f.Name == "notify-url" {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			vals := sv.GetSlice()
			if len(vals) == 0 {
				args = append(args, "--"+f.Name+"=")
			}
			for _, v := range vals {
				args = append(args, "--"+f.Name+"="+v)
			}
			return
		}
		v := f.Value.String()
		if f.Value.Type() == "stringToInt" || f.Value.Type() == "stringToString" {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
		}
		args = append(args, "--"+f.Name+"="+v)
	})
	args = append(args, "--helper-image="+image)
	return append(args, cmd.Flags().Args()...)
}

// checkNodesExist refuses a node named in --nodes or as an argument that
// does not exist, before a Job is made (the run would refuse it too).
func checkNodesExist(ctx context.Context, cs kubernetes.Interface, fs *pflag.FlagSet) error {
	nodes, _ := fs.GetStringSlice("nodes")
	for _, n := range append(nodes, fs.Args()...) {
		if _, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return cli.UsageErrorf("node %q does not exist", n)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// RunnerJob is the Job of an in-cluster run of `kubectl-tt args…`.
//
// Its pod is retried after a kill or an eviction (a restarted run takes
// over the Lease once the dead one's expires and continues from the
// cluster's state), but not after bad input (2), a guard that needs a
// person (3) or a live run holding the Lease (4: someone took it over):
// those fail the Job. It prefers nodes without Tenstorrent cards, which
// the roll itself drains; it runs unprivileged with a read-only root.
func RunnerJob(ns, verb, image string, args []string, submittedBy string) *batchv1.Job {
	labels := map[string]string{LabelInCluster: "tt", "app.kubernetes.io/managed-by": "rollbook"}
	// The metrics port, named, with the annotations a Prometheus that
	// discovers pods by them reads.
	var ports []corev1.ContainerPort
	var podAnnotations map[string]string
	if port := metricsPort(args); port > 0 {
		ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: port, Protocol: corev1.ProtocolTCP}}
		podAnnotations = map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(int(port)),
			"prometheus.io/path": "/metrics"}
	}
	env := []corev1.EnvVar{{Name: "HOME", Value: "/tmp"}}
	if slices.Contains(args, "--notify-url-env="+deploy.RunnerNotifyEnv) {
		ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: deploy.RunnerNotifySecret},
			Key: deploy.RunnerNotifyKey}
		env = append(env, corev1.EnvVar{Name: deploy.RunnerNotifyEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref}})
	}
	failJob := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr.To(runnerContainer),
			Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{cli.ExitUsage, cli.ExitBlocked, cli.ExitLocked}}}
	evicted := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "tt-" + verb + "-", Namespace: ns, Labels: labels,
			Annotations: map[string]string{annSubmittedBy: submittedBy}},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To(int32(6)),
			TTLSecondsAfterFinished: ptr.To(int32(7 * 24 * 3600)),
			PodFailurePolicy:        &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{failJob, evicted}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					ServiceAccountName: deploy.RunnerServiceAccount,
					RestartPolicy:      corev1.RestartPolicyNever,
					// SIGTERM (cancel, a drain) stops the run between API calls; this is
					// time for the step in flight and for marking nodes left cordoned.
					TerminationGracePeriodSeconds: ptr.To(int64(600)),
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
							Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
								{Key: tt.LabelPCIPresent, Operator: corev1.NodeSelectorOpDoesNotExist}}}}}}},
					Containers: []corev1.Container{{
						Name: runnerContainer, Image: image, Command: []string{"kubectl-tt"}, Args: args, Ports: ports,
						Env: env,
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
}

// inClusterJobs are the in-cluster runs' Jobs in ns, newest first.
func inClusterJobs(ctx context.Context, cs kubernetes.Interface, ns string) ([]batchv1.Job, error) {
	l, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelInCluster + "=tt"})
	if err != nil {
		return nil, err
	}
	jobs := l.Items
	sort.Slice(jobs, func(i, j int) bool { return jobs[j].CreationTimestamp.Before(&jobs[i].CreationTimestamp) })
	return jobs, nil
}

// newestPod is the Job's newest pod, or nil.
func newestPod(ctx context.Context, cs kubernetes.Interface, j *batchv1.Job) (*corev1.Pod, error) {
	l, err := cs.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.Name})
	if err != nil || len(l.Items) == 0 {
		return nil, err
	}
	pods := l.Items
	sort.Slice(pods, func(i, k int) bool { return pods[k].CreationTimestamp.Before(&pods[i].CreationTimestamp) })
	return &pods[0], nil
}

// jobState is "running", "succeeded", "failed: why" or "pending".
func jobState(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return "succeeded"
		case batchv1.JobFailed:
			return "failed: " + c.Reason + ": " + c.Message
		}
	}
	if j.Status.Active > 0 {
		return "active"
	}
	return "pending"
}

// inClusterNote is status's line about the newest in-cluster run, "" when
// there is none (or its namespace cannot be read).
func inClusterNote(ctx context.Context, cs kubernetes.Interface) string {
	jobs, err := inClusterJobs(ctx, cs, deploy.RunnerNamespace)
	if err != nil || len(jobs) == 0 {
		return ""
	}
	j := &jobs[0]
	line := fmt.Sprintf("IN-CLUSTER: job/%s in %s (submitted by %s): %s", j.Name, j.Namespace, j.Annotations[annSubmittedBy], jobState(j))
	if j.Status.Failed > 0 {
		line += fmt.Sprintf(", %d pod(s) failed", j.Status.Failed)
	}
	if p, err := newestPod(ctx, cs, j); err == nil && p != nil {
		line += fmt.Sprintf("; pod %s %s", p.Name, p.Status.Phase)
	}
	return line + " — kubectl tt logs --in-cluster -f"
}

// printInClusterLogs prints (follow: streams) the newest in-cluster run's pod log.
func printInClusterLogs(ctx context.Context, cs kubernetes.Interface, ns string, follow bool, out io.Writer) error {
	jobs, err := inClusterJobs(ctx, cs, ns)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return cli.UsageErrorf("no in-cluster run in %s (kubectl tt upgrade … --in-cluster submits one)", ns)
	}
	j := &jobs[0]
	p, err := newestPod(ctx, cs, j)
	if err != nil {
		return err
	}
	if p == nil {
		fmt.Fprintf(out, "job/%s: %s, no pod yet\n", j.Name, jobState(j))
		return nil
	}
	fmt.Fprintf(out, "job/%s (%s), pod %s (%s):\n", j.Name, jobState(j), p.Name, p.Status.Phase)
	r, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: runnerContainer, Follow: follow}).Stream(ctx)
	if err != nil {
		return fmt.Errorf("log of pod %s: %w", p.Name, err)
	}
	defer r.Close()
	_, err = io.Copy(out, r)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// checkNeedsPerson refuses, before a Job is made, a selected node whose
// failed flash needs a person (the Job's run would refuse it, exit 3).
func checkNeedsPerson(ctx context.Context, cs kubernetes.Interface, cmd *cobra.Command) error {
	fs := cmd.Flags()
	var sel tt.Selection
	sel.Selector, _ = fs.GetString("selector")
	nodes, _ := fs.GetStringSlice("nodes")
	sel.Nodes = append(append([]string{}, nodes...), fs.Args()...)
	sel.AnyNode, _ = fs.GetBool("any-node")
	sel.AcknowledgedFailedFlash, _ = fs.GetStringSlice(tt.AcknowledgeFlag)
	sel.HelperNamespace, _ = fs.GetString("helper-namespace")
	err := tt.CheckNeedsPerson(ctx, cs, sel, verbOf(cmd) == "firmware")
	var person *tt.NeedsPersonError
	var bad *tt.SelectionError
	switch {
	case errors.As(err, &person):
		return cli.WithExitCode(cli.ExitBlocked, err)
	case errors.As(err, &bad):
		return cli.UsageErrorf("%v", err)
	}
	return err
}
