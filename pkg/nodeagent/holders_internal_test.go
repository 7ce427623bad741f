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
	h := fakehost.Holder{Comm: "inference", PodUID: uid, ContainerID: cid}
	stops := []func() error{fakehost.Churn(root, h, []int{100, 101, 102, 103}), fakehost.Churn(root, h, []int{200, 201, 202, 203})}
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
	for _, stop := range stops {
		if err := stop(); err != nil {
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
