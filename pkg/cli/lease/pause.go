package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// AnnPaused on a runbook's Lease pauses its rolls: a running roll finishes
// the node in flight and starts no other; a new run starts nothing. It lives
// on the Lease so that it outlives any one run and is seen by every run.
const AnnPaused = "rollbook.dev/paused"

// Pause says who paused the roll, when and why.
type Pause struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

func (p Pause) String() string {
	s := fmt.Sprintf("paused by %s at %s", p.By, p.At.UTC().Format(time.RFC3339))
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// SetPause pauses (p != nil) or resumes (p == nil) the roll whose Lease is
// ns/name, creating the Lease (held by no one) when no run has made it yet.
// A merge patch of one annotation: a live holder's renewals keep it.
func SetPause(ctx context.Context, cs kubernetes.Interface, ns, name string, p *Pause) error {
	var value *string
	if p != nil {
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		v := string(b)
		value = &v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{AnnPaused: value}}})
	if err != nil {
		return err
	}
	leases := cs.CoordinationV1().Leases(ns)
	_, err = leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) && p != nil {
		_, err = leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{AnnPaused: *value}}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
	}
	if apierrors.IsNotFound(err) {
		return nil // resuming a roll that was never paused
	}
	if err != nil {
		return fmt.Errorf("lease %s/%s: %w", ns, name, err)
	}
	return nil
}

// ReadPause returns the pause on the Lease ns/name, or nil.
func ReadPause(ctx context.Context, cs kubernetes.Interface, ns, name string) (*Pause, error) {
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lease %s/%s: %w", ns, name, err)
	}
	return PauseOf(l), nil
}

// PauseOf reads the pause recorded on a Lease the caller already has.
func PauseOf(l *coordv1.Lease) *Pause {
	v, ok := l.Annotations[AnnPaused]
	if !ok {
		return nil
	}
	var p Pause
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return &Pause{By: "unknown", Reason: "unreadable pause record: " + v}
	}
	return &p
}

// Pause is the pause on the Lease as this lock last read or wrote it.
func (l *Lock) Pause() *Pause {
	l.mu.Lock()
	defer l.mu.Unlock()
	return PauseOf(l.lease)
}

// PauseWatch answers, for a run holding the Lease, whether its roll is
// paused without a read per target: the first answer is the Lease as the
// lock acquired it (read and written a moment before), the second reads the
// Lease and watches it from there, and every later one is the watch's. A
// run asks the API server at most twice, however many targets it starts.
// A pause written in the moment before an answer may be seen at the next
// one, as if it came just after.
type PauseWatch struct {
	cs       kubernetes.Interface
	ns, name string
	lock     *Lock

	mu     sync.Mutex
	asked  bool
	cur    *Pause
	live   bool // the watch follows the Lease
	stop   context.CancelFunc
	closed bool
}

// NewPauseWatch follows the pause on ns/name, which lock holds.
func NewPauseWatch(cs kubernetes.Interface, ns, name string, lock *Lock) *PauseWatch {
	return &PauseWatch{cs: cs, ns: ns, name: name, lock: lock}
}

// Current is the pause on the Lease, or nil.
func (w *PauseWatch) Current(ctx context.Context) (*Pause, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.asked {
		w.asked = true
		return w.lock.Pause(), nil
	}
	if w.live {
		return w.cur, nil
	}
	leases := w.cs.CoordinationV1().Leases(w.ns)
	l, err := leases.Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("lease %s/%s: %w", w.ns, w.name, err)
	}
	w.cur = PauseOf(l)
	if w.closed {
		return w.cur, nil
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	watcher, err := leases.Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + w.name,
		ResourceVersion: l.ResourceVersion})
	if err != nil {
		cancel()
		return w.cur, nil // read again next time
	}
	w.live, w.stop = true, cancel
	go w.follow(watcher)
	return w.cur, nil
}

// follow keeps cur from the watch until it ends; the next answer then
// reads the Lease again.
func (w *PauseWatch) follow(watcher watch.Interface) {
	defer watcher.Stop()
	for ev := range watcher.ResultChan() {
		l, ok := ev.Object.(*coordv1.Lease)
		if !ok { // an error event: the watch is over
			break
		}
		w.mu.Lock()
		if ev.Type == watch.Deleted {
			w.cur = nil
		} else {
			w.cur = PauseOf(l)
		}
		w.mu.Unlock()
		if ev.Type == watch.Deleted || heldBy(l) != w.lock.holder.Identity() {
			// Deleted or taken under us: the lock learns which with a
			// renewal now, not at its next tick.
			w.lock.Recheck()
		}
	}
	w.mu.Lock()
	w.live = false
	w.mu.Unlock()
}

// Close stops the watch.
func (w *PauseWatch) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.stop != nil {
		w.stop()
	}
}
