// Package fleet is the read model of an Agent Substrate roll, the ground
// floor of package ate: what the Kubernetes API says (atelet DaemonSets,
// node version labels and rollbook's marks, WorkerPools, their pods and
// Deployments) and what the substrate's inventory says, read once, and the
// pure facts every runbook derives from them — OLD and NEW, pool
// lineages, free worker capacity, a clone's fit on the nodes, the checks
// a roll must pass.
//
// It decides nothing about where a node stands: that is the node
// runbook's (package node).
package fleet
