package node

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollbook/rollbook/pkg/ateapi"
)

// actorsAPI answers GetActor from a map; a missing actor is NotFound.
type actorsAPI struct {
	API
	actors map[string]ateapi.Actor
}

func (a actorsAPI) GetActor(_ context.Context, atespace, name string) (ateapi.Actor, error) {
	if x, ok := a.actors[atespace+"/"+name]; ok {
		return x, nil
	}
	return ateapi.Actor{}, &ateapi.Error{Method: "GetActor", Target: atespace + "/" + name, Code: codes.NotFound}
}

// The flip reads every recorded resident directly: one awake or paused on
// the node blocks it whatever the lists said; suspended, gone, or living on
// another node does not.
func TestConfirmGone(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{
		AnnResidents: "a/paused,a/running,a/suspended,a/gone,a/moved"}}}
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "w-1", UID: types.UID("u1")}, Spec: corev1.PodSpec{NodeName: "n1"}}}
	api := actorsAPI{actors: map[string]ateapi.Actor{
		"a/paused":    {Atespace: "a", Name: "paused", State: ateapi.ActorPaused, AssignedNode: "n1", SnapshotNodes: []string{"n1"}},
		"a/running":   {Atespace: "a", Name: "running", State: ateapi.ActorRunning, Worker: "u1"},
		"a/suspended": {Atespace: "a", Name: "suspended", State: ateapi.ActorSuspended, SnapshotNodes: []string{"n1"}},
		// Resumed on another node's worker; its old snapshot node is stale.
		"a/moved": {Atespace: "a", Name: "moved", State: ateapi.ActorRunning, Worker: "u9", SnapshotNodes: []string{"n1"}},
	}}
	got, err := confirmGone(context.Background(), api, nodeFacts{cfg: &Config{}, node: node, pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.Contains(got[0], "a/paused is PAUSED") || !strings.Contains(got[1], "a/running is RUNNING") {
		t.Fatalf("blockers %q; want a/paused and a/running", got)
	}
}
