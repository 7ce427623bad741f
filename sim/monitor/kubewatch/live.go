package kubewatch

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// liveReplicas mirrors, in the order the pod watch delivers events, which
// pods of each ReplicaSet are not being deleted. A handler must not count
// them from the informer's store: the store is updated before the handlers
// run, so when a Terminating update is handled the store may already hold
// the replacement the ReplicaSet made for that very pod, and the deletion
// would pass for a scale-down. Only the pod handler's goroutine uses it.
type liveReplicas map[string]map[types.UID]bool // "namespace/replicaset" → pod UIDs

// observe records p's new state (gone: removed from the cluster) and returns
// how many pods of p's ReplicaSet were live just before it, p included if
// it was; 0 for a pod no ReplicaSet owns.
func (l liveReplicas) observe(p *corev1.Pod, gone bool) int {
	name := owningReplicaSet(p)
	if name == "" {
		return 0
	}
	key := p.Namespace + "/" + name
	set := l[key]
	before := len(set)
	if gone || p.DeletionTimestamp != nil {
		delete(set, p.UID)
		if len(set) == 0 {
			delete(l, key)
		}
		return before
	}
	if set == nil {
		set = map[types.UID]bool{}
		l[key] = set
	}
	set[p.UID] = true
	return before
}
