package journal

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/httpcount"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/pkg/runbook"
)

func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 1}) }

var node = corev1.ObjectReference{Kind: "Node", Name: "n1"}

// The pure parts: one entry per line, stamped when unstamped, read back in
// order; lines that are not entries are skipped.
func TestEncodeDecode(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	a, err := encode(Entry{Run: "r1", Object: "node/n1", Reason: "Cordoned", Message: "with a\nnewline"}, at)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(a), "\n") != 1 || !strings.HasSuffix(string(a), "\n") {
		t.Fatalf("an entry must be exactly one line: %q", a)
	}
	stamped := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	b, _ := encode(Entry{Time: stamped, Run: "r1", Object: "node/n2", Reason: "Uncordoned", Warning: true}, at)
	got, err := decode(string(a) + "not json\n" + string(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Message != "with a\nnewline" || !got[0].Time.Equal(at) || got[0].Time.Location() != time.UTC ||
		!got[1].Time.Equal(stamped) || !got[1].Warning || got[1].Object != "node/n2" {
		t.Fatalf("decoded %+v", got)
	}
}

// The history is bounded: whole lines go from the front, each counted, and
// one line longer than the bound is kept rather than cut.
func TestRotationKeepsTheNewestWholeLines(t *testing.T) {
	cm := &corev1.ConfigMap{}
	for i := range 10 {
		cm = appended(cm, "entry-"+strconv.Itoa(i)+"\n", 40)
	}
	body := cm.Data[dataKey]
	if len(body) > 40 || !strings.HasSuffix(body, "entry-9\n") || !strings.HasPrefix(body, "entry-") {
		t.Fatalf("body %q", body)
	}
	kept := strings.Count(body, "\n")
	if n, _ := strconv.Atoi(cm.Annotations[AnnRotated]); n+kept != 10 {
		t.Fatalf("rotated %s + kept %d != 10 written", cm.Annotations[AnnRotated], kept)
	}
	long := strings.Repeat("x", 100) + "\n"
	if body, dropped := rotate("a\n"+long, 40); body != long || dropped != 1 {
		t.Fatalf("an over-long last line: %q, dropped %d", body, dropped)
	}
}

// Batching: records made within Batch of the first are written together,
// once, after Batch; Append and Flush write at once with what is pending;
// a failed write keeps the records pending for the next.
func TestBatchingWritesRecordsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			writes []string
			fail   error
		)
		w := &Writer{Base: Entry{Run: "r1"}, Batch: 2 * time.Second}
		w.commit = func(_ context.Context, lines string) error {
			mu.Lock()
			defer mu.Unlock()
			if fail != nil {
				return fail
			}
			writes = append(writes, lines)
			return nil
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return len(writes) }
		ctx := runbook.WithStep(t.Context(), "tt.cordon")
		w.Record(ctx, node, false, "Cordoned", "one")
		time.Sleep(time.Second)
		w.Record(ctx, node, false, "Labelled", "two")
		synctest.Wait()
		if n := count(); n != 0 {
			t.Fatalf("%d writes before the batch is due", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := count(); n != 1 {
			t.Fatalf("%d writes when the batch is due, want 1", n)
		}
		got, _ := decode(writes[0])
		if len(got) != 2 || got[0].Message != "one" || got[1].Message != "two" || got[0].Step != "tt.cordon" || got[1].Run != "r1" {
			t.Fatalf("batch %+v", got)
		}
		if got[1].Time.Sub(got[0].Time) != time.Second {
			t.Fatalf("entries stamped %v and %v, want when recorded", got[0].Time, got[1].Time)
		}

		w.Record(ctx, node, false, "Cordoned", "three")
		mu.Lock()
		fail = errors.New("the API server is down")
		mu.Unlock()
		if err := w.Append(ctx, Entry{Object: "lease/x", Reason: "RunEnded", Message: "four"}); err == nil {
			t.Fatal("a failed write must say so")
		}
		mu.Lock()
		fail = nil
		mu.Unlock()
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // no batch timer left behind
		synctest.Wait()
		if n := count(); n != 2 {
			t.Fatalf("%d writes, want the batch and the flush after the failure", n)
		}
		got, _ = decode(writes[1])
		// The failed Append's own entry was reported to its caller; the
		// records pending before it are kept for the next write.
		if len(got) != 1 || got[0].Message != "three" {
			t.Fatalf("after a failed write the pending records must follow: %+v", got)
		}
	})
}

// Against the API server: the ConfigMap is created, appended to without a
// read per write, bounded, and recreated when deleted under the writer.
func TestWritesToTheConfigMap(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	cs, requests := httpcount.Client(c.RESTConfig)
	w := &Writer{Client: cs, Namespace: ns, Name: Name("test"), Base: Entry{Run: "r1", User: "alice"}, MaxBytes: 1024}
	for i := range 3 {
		if err := w.Append(ctx, Entry{Object: "node/n1", Reason: "Step", Message: strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A get (not found) and a create, then one update per write.
	if n := requests.Load(); n != 4 {
		t.Errorf("%d requests for three writes, want 4", n)
	}
	got, rotated, err := Read(ctx, c.Client, ns, Name("test"))
	if err != nil || rotated != 0 || len(got) != 3 || got[2].Message != "2" {
		t.Fatalf("read %+v, rotated %d, %v", got, rotated, err)
	}
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, Name("test"), metav1.GetOptions{})
	if err != nil || cm.Labels["app.kubernetes.io/managed-by"] != "rollbook" {
		t.Fatalf("configmap %v: %v", cm.Labels, err)
	}

	for i := range 20 {
		if err := w.Append(ctx, Entry{Object: "node/n1", Reason: "Step", Message: strings.Repeat("m", 50) + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	got, rotated, err = Read(ctx, c.Client, ns, Name("test"))
	if err != nil || rotated == 0 || rotated+len(got) != 23 || !strings.HasSuffix(got[len(got)-1].Message, "19") {
		t.Fatalf("bounded to 1 KiB: %d kept, %d rotated, %v", len(got), rotated, err)
	}

	if err := c.Client.CoreV1().ConfigMaps(ns).Delete(ctx, Name("test"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, Entry{Object: "node/n1", Reason: "Step", Message: "after"}); err != nil {
		t.Fatalf("writing after the ConfigMap was deleted: %v", err)
	}
	got, _, err = Read(ctx, c.Client, ns, Name("test"))
	if err != nil || len(got) != 1 || got[0].Message != "after" {
		t.Fatalf("recreated history %+v, %v", got, err)
	}
}

// Two runs write one history: each writes from the version it last wrote,
// so the second conflicts, reads again and appends — nothing is lost.
func TestConcurrentWritersLoseNothing(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	ns := c.NewNamespace(t)
	writers := []*Writer{
		{Client: c.Client, Namespace: ns, Name: Name("test")},
		{Client: c.Client, Namespace: ns, Name: Name("test")},
	}
	var wg sync.WaitGroup
	for i, w := range writers {
		wg.Go(func() {
			for j := range 10 {
				if err := w.Append(ctx, Entry{Object: "node/n1", Reason: "Step", Message: strconv.Itoa(i) + "/" + strconv.Itoa(j)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got, _, err := Read(ctx, c.Client, ns, Name("test"))
	if err != nil || len(got) != 20 {
		t.Fatalf("%d entries of 20: %v", len(got), err)
	}
	seen := map[string]bool{}
	for _, e := range got {
		seen[e.Message] = true
	}
	if len(seen) != 20 {
		t.Fatalf("entries lost or doubled: %v", seen)
	}
}
