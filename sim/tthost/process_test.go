package tthost

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProcExitCodeAndEnv(t *testing.T) {
	dir := t.TempDir()
	p := proc{argv: []string{"/bin/sh", "-c", `echo "root=$FAKEHOST_ROOT"; exit 3`}, env: []string{"FAKEHOST_ROOT=/x"}, dir: dir,
		outPath: filepath.Join(dir, "out")}
	code, err := p.run(context.Background())
	out, _ := os.ReadFile(p.outPath)
	if err != nil || code != 3 || string(out) != "root=/x\n" {
		t.Fatalf("code %d err %v out %q", code, err, out)
	}
}

// Cancelling kills the whole process group: the agent's tools too.
func TestProcCancelKillsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	p := proc{argv: []string{"/bin/sh", "-c", `sleep 60 & echo $! > ` + pidFile + `; wait`}, dir: dir, outPath: filepath.Join(dir, "out")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { code, _ := p.run(ctx); done <- code }()
	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	cancel()
	select {
	case code := <-done:
		if code != exitKilled {
			t.Fatalf("exit %d, want %d", code, exitKilled)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("process not killed")
	}
	for deadline := time.Now().Add(time.Second); child != 0 && alive(child) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // SIGKILL is asynchronous
	}
	if child == 0 || alive(child) {
		t.Fatalf("child %d survived", child)
	}
}

// alive treats a zombie (killed, not yet reaped by whoever adopted it) as
// dead.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func TestProcStartFailure(t *testing.T) {
	dir := t.TempDir()
	if _, err := (proc{argv: []string{filepath.Join(dir, "nope")}, dir: dir, outPath: filepath.Join(dir,
		"out")}).run(context.Background()); err == nil {
		t.Fatal("missing binary started")
	}
}
