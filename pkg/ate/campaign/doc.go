// Package campaign is what a person reads about the roll, the top floor of
// package ate: where it stands and the exact next command (status.go),
// what to confirm before the first node (preflight.go), and which of
// rollbook's records cleanup may remove (cleanup.go). It reads through the
// lower layers and decides no position of its own: a node's comes from
// the node runbook's Locator.
package campaign
