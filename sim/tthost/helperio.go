package tthost

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// What a kubelet does around a helper's process that the runner must do
// too: mount its ConfigMap volumes, and serve its container log (through
// kwok's kubelet API, which answers pods/log from a kwok Logs object).

// envVolumeRoot is where the agent finds the pod's other volumes
// (pkg/nodeagent/agentcmd.EnvVolumeRoot): mount path P is at root/P.
const envVolumeRoot = "ROLLBOOK_VOLUME_ROOT"

// mountConfigMaps writes container c's ConfigMap volumes under dir, as the
// kubelet's atomic writer would (a file per key), and returns the env that
// points the agent at them. A ConfigMap that does not exist fails the
// start (a kubelet would hold the pod in ContainerCreating).
func mountConfigMaps(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, c corev1.Container, dir string) ([]string, error) {
	vols := map[string]*corev1.ConfigMapVolumeSource{}
	secrets := map[string]*corev1.SecretVolumeSource{}
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			vols[v.Name] = v.ConfigMap
		}
		if v.Secret != nil {
			secrets[v.Name] = v.Secret
		}
	}
	root := filepath.Join(dir, "volumes")
	used := false
	for _, m := range c.VolumeMounts {
		if src, ok := secrets[m.Name]; ok {
			if err := mountSecret(ctx, cs, pod.Namespace, src, filepath.Join(root, filepath.Clean("/"+m.MountPath))); err != nil {
				return nil, fmt.Errorf("volume %s: %w", m.Name, err)
			}
			used = true
			continue
		}
		src, ok := vols[m.Name]
		if !ok {
			continue
		}
		cm, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("configmap %s/%s of volume %s: %w", pod.Namespace, src.Name, m.Name, err)
		}
		at := filepath.Join(root, filepath.Clean("/"+m.MountPath))
		if err := os.MkdirAll(at, 0o755); err != nil {
			return nil, err
		}
		for k, v := range cm.Data {
			if err := os.WriteFile(filepath.Join(at, filepath.Base(k)), []byte(v), 0o444); err != nil {
				return nil, err
			}
		}
		for k, v := range cm.BinaryData {
			if err := os.WriteFile(filepath.Join(at, filepath.Base(k)), v, 0o444); err != nil {
				return nil, err
			}
		}
		used = true
	}
	if !used {
		return nil, nil
	}
	return []string{envVolumeRoot + "=" + root}, nil
}

// mountSecret writes a Secret volume's keys (its items, when listed) under
// at, read-only to the owner, as the kubelet does with defaultMode 0400.
func mountSecret(ctx context.Context, cs kubernetes.Interface, ns string, src *corev1.SecretVolumeSource, at string) error {
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, src.SecretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", ns, src.SecretName, err)
	}
	files := map[string]string{}
	for k := range sec.Data {
		files[k] = k
	}
	if len(src.Items) > 0 {
		files = map[string]string{}
		for _, it := range src.Items {
			if _, ok := sec.Data[it.Key]; !ok {
				return fmt.Errorf("secret %s/%s has no key %s", ns, src.SecretName, it.Key)
			}
			files[it.Key] = it.Path
		}
	}
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	for k, p := range files {
		if err := os.WriteFile(filepath.Join(at, filepath.Base(p)), sec.Data[k], 0o400); err != nil {
			return err
		}
	}
	return nil
}

// serveLog keeps container c's output as a CRI log file (what kwok's
// kubelet API reads) and points a kwok Logs object at it, before the pod's
// final status is written: whoever sees the pod finished can read its log.
func (r *Runner) serveLog(ctx context.Context, pod *corev1.Pod, container, output string) error {
	dir := filepath.Join(r.Hosts.Dir, ".logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, fmt.Sprintf("%s_%s_%s_%s.log", pod.Namespace, pod.Name, pod.UID, container))
	if err := criLog(output, file, r.Clock.Now()); err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
		"metadata": map[string]any{"name": pod.Name, "namespace": pod.Namespace},
		"spec":     map[string]any{"logs": []map[string]any{{"containers": []string{container}, "logsFile": file}}},
	})
	rc := r.Client.CoreV1().RESTClient()
	path := "/apis/kwok.x-k8s.io/v1alpha1/namespaces/" + pod.Namespace + "/logs"
	err := rc.Post().AbsPath(path).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	if apierrors.IsAlreadyExists(err) { // a pod of the same name before: point at this one
		_ = rc.Delete().AbsPath(path, pod.Name).Do(ctx).Error()
		err = rc.Post().AbsPath(path).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	}
	return err
}

// criLog writes output's lines in the CRI log format ("<time> stdout F <line>").
func criLog(output, file string, at time.Time) error {
	in, err := os.Open(output)
	if err != nil {
		return err
	}
	defer in.Close()
	var b strings.Builder
	ts := at.UTC().Format(time.RFC3339Nano)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxOutput)
	for sc.Scan() {
		b.WriteString(ts + " stdout F " + sc.Text() + "\n")
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}
