package node

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// refusingAPI answers every SuspendActor with FailedPrecondition in state.
type refusingAPI struct {
	API
	state ateapi.ActorState
	calls int
}

func (r *refusingAPI) SuspendActor(_ context.Context, atespace, name string) (ateapi.Actor, error) {
	r.calls++
	return ateapi.Actor{}, &ateapi.Error{Method: "SuspendActor", Target: atespace + "/" + name, Code: codes.FailedPrecondition,
		Message: "MarkSuspending prerequisite not met", ActorState: r.state}
}

type nopRecorder struct{}

func (nopRecorder) Record(context.Context, corev1.ObjectReference, bool, string, string) {}

// A suspend refused in a state the actor leaves on its own is retried by
// the next round; any other refusal stops the run with the actor's state.
func TestSuspendRefusals(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	actors := []ateapi.Actor{{Atespace: "a", Name: "x", State: ateapi.ActorRunning}}
	for _, tc := range []struct {
		state   ateapi.ActorState
		blocked bool
	}{
		{ateapi.ActorResuming, false},
		{ateapi.ActorSuspending, false},
		{ateapi.ActorReverting, false},
		{ateapi.ActorCrashed, false}, // the next round reports it with the crashed ones
		{ateapi.ActorDeleting, true},
		{"", true},
	} {
		api := &refusingAPI{state: tc.state}
		e := &evacuation{api: api, rec: nopRecorder{}, maxSuspends: 2}
		err := e.suspend(context.Background(), node, actors, 0)
		if (err != nil) != tc.blocked || (err != nil && !runbook.IsBlocked(err)) || api.calls != 1 {
			t.Errorf("state %q: err %v (blocked %v), %d call(s); want blocked=%v after 1 call", tc.state, err, runbook.IsBlocked(err),
				api.calls, tc.blocked)
		}
		if tc.blocked && tc.state != "" && !strings.Contains(err.Error(), string(tc.state)) {
			t.Errorf("state %q: the error does not name the state: %v", tc.state, err)
		}
	}
}
