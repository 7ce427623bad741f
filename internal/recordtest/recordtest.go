// Package recordtest is a kube.Recorder that keeps its records in memory,
// for tests that assert what a run recorded.
package recordtest

import (
	"context"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Recorder keeps each record as "Reason Kind/Name: message".
type Recorder struct {
	mu   sync.Mutex
	recs []string
}

// Record implements kube.Recorder.
func (r *Recorder) Record(_ context.Context, obj corev1.ObjectReference, _ bool, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, reason+" "+obj.Kind+"/"+obj.Name+": "+message)
}

// Count is how many records start with prefix ("Reason", or "Reason Kind/Name").
func (r *Recorder) Count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.recs {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// All returns every record so far.
func (r *Recorder) All() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.recs...)
}
