package tt

import (
	jsoniter "github.com/json-iterator/go"
	corev1 "k8s.io/api/core/v1"
)

// recordJSON decodes the records: json-iterator's configuration that
// behaves as encoding/json. Status decodes one or two per node, and
// encoding/json took 2.5× as long (BenchmarkNodeStatusRolledFleet: 115
// against 45 ms for 5,000 nodes, 2026-12-06), a third of status's
// headroom over its floor. k8s.io/apimachinery keeps the module in the
// build either way.
var recordJSON = jsoniter.ConfigCompatibleWithStandardLibrary

// decodeRecord decodes a record annotation's raw JSON into v.
func decodeRecord(raw string, v any) error { return recordJSON.UnmarshalFromString(raw, v) }

// nodeRecords are the results rollbook recorded on a node (its last probe,
// kmd result and flash result), each decoded at most once and only when
// asked for: status asks several questions of each of thousands of nodes,
// and decoding a record once per question was most of its own time
// (BenchmarkNodeStatusRolledFleet).
type nodeRecords struct {
	n *corev1.Node

	probe              *ProbeRecord
	kmd                kmdRecord
	fw                 firmwareRecord
	probeRead, kmdRead bool
	kmdOK, fwOK        bool
	fwRead             bool
}

func recordsOf(n *corev1.Node) *nodeRecords { return &nodeRecords{n: n} }

// Probe is the node's last probe record, nil when it has none.
func (r *nodeRecords) Probe() *ProbeRecord {
	if !r.probeRead {
		r.probe, r.probeRead = probeRecordOf(r.n), true
	}
	return r.probe
}

// KMD is the node's kmd result record; ok false when it has none.
func (r *nodeRecords) KMD() (kmdRecord, bool) {
	if !r.kmdRead {
		raw, found := r.n.Annotations[AnnKMDResult]
		r.kmdOK, r.kmdRead = found && decodeRecord(raw, &r.kmd) == nil, true
	}
	return r.kmd, r.kmdOK
}

// Firmware is the node's flash result record; ok false when it has none.
func (r *nodeRecords) Firmware() (firmwareRecord, bool) {
	if !r.fwRead {
		r.fw, r.fwOK = firmwareRecordOf(r.n)
		r.fwRead = true
	}
	return r.fw, r.fwOK
}
