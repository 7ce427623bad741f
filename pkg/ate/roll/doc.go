// Package roll holds the runbooks that act on the roll as a whole, each
// asking the node runbook's Locator where the nodes stand: clone the
// serving pools for NEW (clonerunbook.go), the node roll and rollback
// that pick each next node and run the node runbook on it (nodes.go),
// pin the pools to OLD (pinpools.go), retire OLD and roll back NEW
// (retire.go, rollback.go, sharing removal.go), revert crashed actors
// (revert.go); and the roll's preconditions and image pull probes.
package roll
