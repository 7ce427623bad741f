package nodeagent_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

func TestEncodeResultFitsTerminationMessage(t *testing.T) {
	r := nodeagent.Result{
		Op: nodeagent.OpKMD, Node: "tt-node-1", Target: "2.0.0", StartedAt: time.Now(),
		OutputTail: strings.Repeat("line of tool output \x1b[31mred\x1b[0m ünïcode\n", 5000),
		Error:      &nodeagent.Failure{Reason: nodeagent.ReasonHoldersRemain, Message: strings.Repeat("holder ", 1000)},
		Warnings:   []string{strings.Repeat("w", 3000)},
	}
	for i := 0; i < 300; i++ {
		r.Holders = append(r.Holders, nodeagent.Holder{PID: 4300000 + i, Comm: "python3", PodUID: "0f4d3b8e-6a1c-4c55-9d0e-2b7a1e3c9f10",
			ContainerID: strings.Repeat("a", 64)})
	}
	for i := 0; i < 32; i++ {
		r.Devices = append(r.Devices, nodeagent.Device{Index: i, BusID: "0000:01:00.0", Board: "galaxy-wh", Before: "18.2.0.0",
			After: "19.9.0.0", OK: i != 5})
	}
	for i := 0; i < 50; i++ {
		r.Steps = append(r.Steps, nodeagent.Step{Name: "step", MS: 12, OK: true, Detail: strings.Repeat("d", 500)})
	}
	b, err := nodeagent.EncodeResult(r)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), nodeagent.MaxTerminationMessageBytes)
	back, err := nodeagent.ParseResult(b)
	require.NoError(t, err)
	assert.True(t, back.Truncated)
	assert.Equal(t, nodeagent.ReasonHoldersRemain, back.Error.Reason)
	assert.Equal(t, 300, len(back.Holders)+back.HoldersOmitted)
	assert.Equal(t, 32, len(back.Devices)+back.DevicesOmitted)
	assert.Len(t, r.Steps, 50, "the caller's result is not modified")
	assert.Len(t, r.Steps[0].Detail, 500)
}

func TestEncodeResultLeavesSmallResultsAlone(t *testing.T) {
	ok := true
	r := nodeagent.Result{Op: nodeagent.OpKMD, Success: true, Target: "2.0.0", Before: "1.31.0", After: "2.0.0", CacheHit: &ok,
		Steps: []nodeagent.Step{{Name: "insmod", MS: 3, OK: true}}}
	b, err := nodeagent.EncodeResult(r)
	require.NoError(t, err)
	full, err := json.Marshal(r)
	require.NoError(t, err)
	assert.Equal(t, full, b)
}

func TestParseResultRejectsGarbage(t *testing.T) {
	for _, in := range []string{"", "not json", `{"op":"reboot","success":true}`, `{"op":"kmd","success":false}`, `{"op":"kmd"`} {
		_, err := nodeagent.ParseResult([]byte(in))
		assert.Error(t, err, "input %q", in)
	}
	r, err := nodeagent.ParseResult([]byte(`{"op":"flash","success":true,"changed":false,"target":"19.9.0.0"}`))
	require.NoError(t, err)
	assert.Equal(t, "19.9.0.0", r.Target)
}
