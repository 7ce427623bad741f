// Package ate is the Agent Substrate rolling upgrade as runbooks, in
// layers, each importing only those below it:
//
//   - fleet: the read model of the roll — atelet DaemonSets, node version
//     labels, WorkerPools and their pods, the substrate's inventory — and
//     the pure facts derived from it (lineages, capacity, checks).
//   - node: the node runbook, which moves one node between two versions
//     without losing an actor, and its Locator, the only place that
//     decides where a node stands (its facts are private to it); the
//     recover-node runbook shares its evacuation.
//   - roll: the runbooks over the whole roll — clone the pools, the node
//     roll that picks each next node from the Locator, pin, retire,
//     rollback, revert — and the roll's preconditions.
//   - campaign: what a person reads — status, preflight, cleanup.
//
// This package renders every runbook's documentation (Docs).
package ate
