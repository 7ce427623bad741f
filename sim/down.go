package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollbook/rollbook/sim/cluster"
	"github.com/rollbook/rollbook/sim/scenario"
)

func cmdDown(args []string) int {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory of the running sim (required)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait before killing it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "sim down: --dir is required")
		return 2
	}
	pid, err := readPID(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim down: no sim recorded in %s: %v\n", *dir, err)
		return 1
	}
	if !processAlive(pid) {
		fmt.Printf("sim in %s (pid %d) is not running\n", *dir, pid)
		return 0
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(*timeout)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			fmt.Printf("sim (pid %d) did not stop within %s; killed\n", pid, *timeout)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("sim (pid %d) stopped\n", pid)
	return 0
}

func readPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// state is the field after the ")" closing the command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func cmdAddNodes(args []string) int {
	fs := flag.NewFlagSet("add-nodes", flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory of the running sim (required)")
	count := fs.Int("count", 1, "nodes to add")
	start := fs.Int("start", 0, "index of the first new node")
	prefix := fs.String("prefix", "kwok-node-", "node name prefix")
	parallel := fs.Int("parallel", 32, "parallel creations")
	labelsFlag := fs.String("labels", "", "extra node labels, k=v,k2=v2 (e.g. to make a fleet for benchmarks)")
	annotationsFile := fs.String("annotations-file", "", "a JSON object of annotations every new node gets (e.g. the records "+
		"a roll leaves, for a status benchmark)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "sim add-nodes: --dir is required")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(*dir, "kubeconfig"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim add-nodes:", err)
		return 1
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim add-nodes:", err)
		return 1
	}
	t := time.Now()
	extra := map[string]string{}
	for _, kv := range strings.Split(*labelsFlag, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			extra[k] = v
		} else if kv != "" {
			fmt.Fprintf(os.Stderr, "sim add-nodes: --labels: %q is not k=v\n", kv)
			return 2
		}
	}
	var annotations map[string]string
	if *annotationsFile != "" {
		b, err := os.ReadFile(*annotationsFile)
		if err == nil {
			err = json.Unmarshal(b, &annotations)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim add-nodes: --annotations-file:", err)
			return 2
		}
	}
	if err := cluster.CreateNodes(context.Background(), cs, *prefix, *start, *count, *parallel, extra, annotations); err != nil {
		fmt.Fprintln(os.Stderr, "sim add-nodes:", err)
		return 1
	}
	fmt.Printf("created %d nodes in %.2fs\n", *count, time.Since(t).Seconds())
	return 0
}

func cmdScenarios() int {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SCENARIO\tDESCRIPTION")
	for _, s := range scenario.All() {
		fmt.Fprintf(w, "%s\t%s\n", s.Name, s.Description)
	}
	_ = w.Flush()
	return 0
}
