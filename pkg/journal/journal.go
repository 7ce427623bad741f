// Package journal keeps the durable history of every run: each mutation
// (run, who, host, command, object, step, what changed, when) appended to a
// ConfigMap per plugin. Events expire after an hour; the journal stays,
// bounded in size, its oldest entries rotated out.
package journal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/paced"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// Entry is one line of the history.
type Entry struct {
	Time    time.Time `json:"time"`
	Run     string    `json:"run"`
	User    string    `json:"user,omitempty"`
	Host    string    `json:"host,omitempty"`
	Command string    `json:"command,omitempty"`
	Object  string    `json:"object"`
	Step    string    `json:"step,omitempty"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Warning bool      `json:"warning,omitempty"`
}

const (
	dataKey = "entries"
	// AnnRotated counts the entries rotated out of the ConfigMap so far.
	AnnRotated = "rollbook.dev/history-rotated"
	// DefaultMaxBytes keeps the ConfigMap far below the 1 MiB object limit.
	DefaultMaxBytes = 512 << 10
)

// Name is the ConfigMap holding plugin's history.
func Name(plugin string) string { return "rollbook-" + plugin + "-history" }

// Writer appends entries for one run. It is a kube.Recorder, so every
// mutation a run records is journaled; the step comes from the context the
// engine gives each step's action.
type Writer struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Base fills Run, User, Host and Command of every entry.
	Base     Entry
	MaxBytes int
	// Batch, when set, keeps records for up to this long and writes them
	// together: one ConfigMap update per Batch of any number of steps and
	// targets, not one per mutation. A run killed with SIGKILL loses at most
	// the last Batch of records (the Events, written at once, still carry
	// them); Append and Flush write at once, with whatever is pending. Zero
	// writes each record through.
	Batch time.Duration

	// writing serializes ConfigMap writes; mu guards what follows and is
	// never held across a request, so recording never waits on a write.
	writing sync.Mutex
	cm      *corev1.ConfigMap // last version written, to update without a read (under writing)
	mu      sync.Mutex
	pending []byte // lines recorded but not yet written
	timer   *time.Timer

	// commit appends whole lines to the history; nil: the ConfigMap
	// (update). Tests of the batching replace it.
	commit func(ctx context.Context, lines string) error
}

// Record implements kube.Recorder.
func (w *Writer) Record(ctx context.Context, obj corev1.ObjectReference, warning bool, reason, message string) {
	e := w.Base
	e.Object = objectName(obj)
	e.Step = runbook.StepOf(ctx)
	e.Reason, e.Message, e.Warning = reason, message, warning
	if w.Batch > 0 {
		line, err := encode(e, kube.ServerNow())
		if err != nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.pending = append(w.pending, line...)
		if w.timer == nil {
			w.timer = time.AfterFunc(w.Batch, w.flushLater)
		}
		return
	}
	// Like Events, the record outlives a cancelled run: the mutation happened.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = w.Append(wctx, e)
}

func (w *Writer) flushLater() {
	// Paced: the batch's timer, not a step, asks for this write.
	ctx, cancel := context.WithTimeout(paced.Mark(context.Background()), 5*time.Second)
	defer cancel()
	_ = w.Flush(ctx)
}

// Defer keeps e (stamped now) for the next write, whatever triggers it,
// without starting the batch's timer: a run's start needs no write of its
// own (one request fewer per run), and a run that changes nothing has it
// written with its end.
func (w *Writer) Defer(e Entry) error {
	line, err := encode(e, kube.ServerNow())
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(w.pending, line...)
	return nil
}

// Flush writes the records still pending, if any.
func (w *Writer) Flush(ctx context.Context) error { return w.write(ctx, nil) }

// Append adds e (stamped now when its time is zero), with any records
// still pending before it.
func (w *Writer) Append(ctx context.Context, e Entry) error {
	line, err := encode(e, kube.ServerNow())
	if err != nil {
		return err
	}
	return w.write(ctx, line)
}

// encode is e as one line of the history, stamped now (UTC) when its time
// is zero.
func encode(e Entry, now time.Time) ([]byte, error) {
	if e.Time.IsZero() {
		e.Time = now.UTC()
	}
	line, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// write appends the pending lines and then lines to the ConfigMap. Pending
// lines are kept when the write fails.
func (w *Writer) write(ctx context.Context, lines []byte) error {
	w.writing.Lock()
	defer w.writing.Unlock()
	w.mu.Lock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	pending := w.pending
	w.pending = nil
	w.mu.Unlock()
	add := string(pending) + string(lines)
	if add == "" {
		return nil
	}
	commit := w.commit
	if commit == nil {
		commit = w.update
	}
	if err := commit(ctx, add); err != nil {
		w.mu.Lock()
		w.pending = append(pending, w.pending...)
		w.mu.Unlock()
		return err
	}
	return nil
}

// update appends add (whole lines) to the ConfigMap, creating it if needed
// (again, if it was deleted meanwhile). It writes from the version it last
// wrote without a read, and reads afresh after a conflict.
func (w *Writer) update(ctx context.Context, add string) error {
	max := w.MaxBytes
	if max <= 0 {
		max = DefaultMaxBytes
	}
	cms := w.Client.CoreV1().ConfigMaps(w.Namespace)
	create := func() error {
		empty := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "rollbook"}}}
		created, err := cms.Create(ctx, appended(empty, add, max), metav1.CreateOptions{})
		if err != nil {
			return err // AlreadyExists: another run created it first, read it and retry
		}
		w.cm = created
		return nil
	}
	err := kube.RetryOnConflict(ctx, func() error {
		cur := w.cm
		if cur == nil {
			got, err := cms.Get(ctx, w.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return create()
			}
			if err != nil {
				return err
			}
			cur = got
		}
		updated, err := cms.Update(ctx, appended(cur, add, max), metav1.UpdateOptions{})
		if err != nil {
			w.cm = nil // written or deleted by someone else: read it again
			if apierrors.IsNotFound(err) {
				return create()
			}
			return err
		}
		w.cm = updated
		return nil
	})
	if kube.IsWriteConflict(err) {
		return fmt.Errorf("history %s/%s keeps changing under us: %w", w.Namespace, w.Name, err)
	}
	return err
}

// appended is cm with add appended to its entries, the oldest entries
// rotated out to keep them within max bytes and counted in AnnRotated.
func appended(cm *corev1.ConfigMap, add string, max int) *corev1.ConfigMap {
	next := cm.DeepCopy()
	if next.Data == nil {
		next.Data = map[string]string{}
	}
	body, dropped := rotate(next.Data[dataKey]+add, max)
	next.Data[dataKey] = body
	if dropped > 0 {
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		n, _ := strconv.Atoi(next.Annotations[AnnRotated])
		next.Annotations[AnnRotated] = strconv.Itoa(n + dropped)
	}
	return next
}

// rotate drops whole lines from the front of body until it fits max.
func rotate(body string, max int) (string, int) {
	dropped := 0
	for len(body) > max {
		i := strings.IndexByte(body, '\n')
		if i < 0 || i == len(body)-1 {
			break
		}
		body = body[i+1:]
		dropped++
	}
	return body, dropped
}

// Read returns the history of ns/name, oldest first, and how many older
// entries were rotated out.
func Read(ctx context.Context, cs kubernetes.Interface, ns, name string) ([]Entry, int, error) {
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	rotated, _ := strconv.Atoi(cm.Annotations[AnnRotated])
	out, err := decode(cm.Data[dataKey])
	return out, rotated, err
}

// decode reads the entries of a history body, oldest first, skipping
// lines that are not entries.
func decode(body string) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

func objectName(o corev1.ObjectReference) string {
	kind := strings.ToLower(o.Kind)
	if o.Namespace != "" {
		return kind + "/" + o.Namespace + "/" + o.Name
	}
	return kind + "/" + o.Name
}
