package ate

import "time"

// Docs renders the ate runbooks for runbooks/*.md, keyed by file name.
func Docs() map[string]string {
	node := &NodeConfig{Sides: Sides{From: "OLD", To: "NEW"}, MaxConcurrentSuspends: 4,
		SuspendTimeout: 30 * time.Minute, AteletTimeout: 6 * time.Minute, DeleteTimeout: 10 * time.Minute, VerifyTimeout: 5 * time.Minute}
	return map[string]string{
		"ate-clone-pools.md": CloneRunbook(nil, nil, nil, Images{}).Markdown(),
		"ate-node.md":        NodeRunbook(nil, nil, nil, node).Markdown(),
		"ate-rollback.md":    RollbackRunbook(nil, nil, nil, nil).Markdown(),
		"ate-retire.md":      RetireRunbook(nil, nil, nil, nil, BackupOptions{Dir: "."}).Markdown(),
		"ate-revert.md":      RevertRunbook(nil, nil, 2*time.Minute).Markdown(),
		"ate-pin-pools.md":   PinPoolsRunbook(nil, nil, nil, nil).Markdown(),
		"ate-recover-node.md": RecoverRunbook(nil, nil, nil,
			&RecoverConfig{MaxConcurrentSuspends: 4, SuspendTimeout: 30 * time.Minute, ReplaceTimeout: 5 * time.Minute}).Markdown(),
	}
}
