package ate

import (
	"time"

	"github.com/rollbook/rollbook/pkg/ate/node"
	"github.com/rollbook/rollbook/pkg/ate/roll"
)

// Docs renders the ate runbooks for runbooks/*.md, keyed by file name.
func Docs() map[string]string {
	cfg := &node.Config{Sides: node.Sides{From: "OLD", To: "NEW"}, MaxConcurrentSuspends: 4,
		SuspendTimeout: 30 * time.Minute, AteletTimeout: 6 * time.Minute, DeleteTimeout: 10 * time.Minute, VerifyTimeout: 5 * time.Minute}
	return map[string]string{
		"ate-clone-pools.md": roll.CloneRunbook(nil, nil, nil, roll.Images{}).Markdown(),
		"ate-node.md":        node.Runbook(nil, nil, nil, cfg).Markdown(),
		"ate-rollback.md":    roll.RollbackRunbook(nil, nil, nil, nil).Markdown(),
		"ate-retire.md":      roll.RetireRunbook(nil, nil, nil, nil, roll.BackupOptions{Dir: "."}).Markdown(),
		"ate-revert.md":      roll.RevertRunbook(nil, nil, 2*time.Minute).Markdown(),
		"ate-pin-pools.md":   roll.PinPoolsRunbook(nil, nil, nil, nil).Markdown(),
		"ate-recover-node.md": node.RecoverRunbook(nil, nil, nil,
			&node.RecoverConfig{MaxConcurrentSuspends: 4, SuspendTimeout: 30 * time.Minute, ReplaceTimeout: 5 * time.Minute,
				DeleteTimeout: 10 * time.Minute}).Markdown(),
	}
}
