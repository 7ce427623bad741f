package nodeagent

import (
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
)

// A pod's process that exits while the walk reads it must not come back as
// a holder outside Kubernetes: that would stop the node as if a host
// process held the device ("stop them, or --force-unload"), and no drain
// would ever clear it.
func TestFindHoldersSkipsAProcessThatExitsMidWalk(t *testing.T) {
	root := t.TempDir()
	if err := fakehost.Create(root, fakehost.Spec{LoadedKMD: "2.7.0"}); err != nil {
		t.Fatal(err)
	}
	const uid = "00000001-1111-2222-3333-444444444444"
	const cid = "3f1a9c0b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170615e4d3"
	// Two churners: more exits land inside a walk.
	stop, done := make(chan struct{}), make(chan error, 2)
	for g := range 2 {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				pid := 100*(g+1) + i%4
				if err := fakehost.StartProcess(root, fakehost.Holder{PID: pid, Comm: "inference", PodUID: uid, ContainerID: cid}); err != nil {
					done <- err
					return
				}
				if err := fakehost.EndProcess(root, pid); err != nil {
					done <- err
					return
				}
			}
		}()
	}
	seen, bad := 0, Holder{}
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline) && bad.PID == 0; {
		hs, err := findHolders(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			seen++
			if h.PodUID != uid {
				bad = h
			}
		}
	}
	close(stop)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if bad.PID != 0 {
		t.Fatalf("after %d holders found, pid %d was reported outside any pod: %+v", seen, bad.PID, bad)
	}
	if seen == 0 {
		t.Fatal("the walk never found a holder: the test proves nothing")
	}
	t.Logf("%d holders found, each in its pod", seen)
}
