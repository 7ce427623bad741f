// Package node is the node runbook: it moves one Agent Substrate node
// between two versions — record the move, drain the node's workers,
// suspend every actor living there, flip its version label, wait for that
// version's atelet, delete the pods of the pools it left, verify the new
// workers serve — without losing an actor. Roll (OLD → NEW) and rollback
// (NEW → OLD) are its two Sides.
//
// Its facts about a node (nodeFacts) are private to it: the Locator is
// the only way to ask where a node stands, both ways, and it answers with
// runbook.Locate over this runbook's own steps, so the roll, status,
// retire and rollback cannot disagree. Start reading at runbook.go (the
// steps in order), then locator.go.
//
// The recover-node runbook (recover.go) shares the evacuation of the
// node's actors (evacuate.go, suspend.go).
package node
