package nodeagent

import (
	"encoding/json"
	"fmt"
	"os"
	"unicode/utf8"
)

// MaxTerminationMessageBytes is the kubelet's cap on a termination message;
// anything longer is cut, which would break the JSON.
const MaxTerminationMessageBytes = 4096

// DefaultTerminationLog is the kubelet's default terminationMessagePath.
const DefaultTerminationLog = "/dev/termination-log"

// EncodeResult marshals r as compact JSON no longer than
// MaxTerminationMessageBytes, shortening the least important fields first.
func EncodeResult(r Result) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil || len(b) <= MaxTerminationMessageBytes {
		return b, err
	}
	r.Truncated = true
	r.Steps = append([]Step(nil), r.Steps...)
	for _, shrink := range shrinkers {
		for shrink(&r, len(b)-MaxTerminationMessageBytes) {
			if b, err = json.Marshal(r); err != nil {
				return nil, err
			}
			if len(b) <= MaxTerminationMessageBytes {
				return b, nil
			}
		}
	}
	return nil, fmt.Errorf("result does not fit in %d bytes even when minimal", MaxTerminationMessageBytes)
}

// A shrinker makes r smaller given the current overflow and reports whether
// it changed anything; it is called until it stops or r fits.
type shrinker func(r *Result, over int) bool

var shrinkers = []shrinker{
	// The output tail is the only unbounded field: keep its end, but not
	// below outputTailFloor until everything else has been shortened.
	func(r *Result, over int) bool { return shrinkTail(r, over, outputTailFloor) },
	func(r *Result, _ int) bool { return shortenSteps(r, 80) },
	func(r *Result, _ int) bool {
		if len(r.Holders) <= 8 {
			return false
		}
		r.HoldersOmitted += len(r.Holders) - 8
		r.Holders = r.Holders[:8]
		return true
	},
	func(r *Result, _ int) bool { return dropHealthyDevices(r) },
	func(r *Result, _ int) bool {
		if len(r.Steps) <= 4 {
			return false
		}
		r.Steps = r.Steps[len(r.Steps)-4:]
		return true
	},
	func(r *Result, _ int) bool { return shortenSteps(r, 0) },
	func(r *Result, _ int) bool {
		if len(r.Warnings) == 0 {
			return false
		}
		r.Warnings = nil
		return true
	},
	func(r *Result, over int) bool { return shrinkTail(r, over, 0) },
	func(r *Result, _ int) bool {
		if r.Error == nil || len(r.Error.Message) <= 1024 {
			return false
		}
		r.Error = &Failure{Reason: r.Error.Reason, Message: keepHead(r.Error.Message, 1024)}
		return true
	},
	// Last resort: the verdict alone.
	func(r *Result, _ int) bool {
		if r.Steps == nil && r.Holders == nil && r.Devices == nil {
			return false
		}
		r.HoldersOmitted += len(r.Holders)
		r.DevicesOmitted += len(r.Devices)
		r.Steps, r.Holders, r.Devices = nil, nil, nil
		return true
	},
}

// outputTailFloor is how much tool output survives while other fields
// can still give way: the end of the output usually names the error.
const outputTailFloor = 1024

func shrinkTail(r *Result, over, floor int) bool {
	if len(r.OutputTail) <= floor {
		return false
	}
	r.OutputTail = keepTail(r.OutputTail, max(floor, len(r.OutputTail)-over-64))
	return true
}

func shortenSteps(r *Result, limit int) bool {
	changed := false
	for i := range r.Steps {
		if len(r.Steps[i].Detail) > limit {
			r.Steps[i].Detail = keepHead(r.Steps[i].Detail, limit)
			changed = true
		}
	}
	return changed
}

// dropHealthyDevices keeps failing devices (the ones a human needs) and
// drops healthy ones, last first.
func dropHealthyDevices(r *Result) bool {
	for i := len(r.Devices) - 1; i >= 0; i-- {
		if r.Devices[i].OK {
			r.Devices = append(r.Devices[:i:i], r.Devices[i+1:]...)
			r.DevicesOmitted++
			return true
		}
	}
	return false
}

// keepTail returns at most n bytes from the end of s, on a rune boundary.
func keepTail(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// keepHead returns at most n bytes from the start of s, on a rune boundary.
func keepHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// WriteTerminationMessage writes r, size-capped, to path (normally
// DefaultTerminationLog).
func WriteTerminationMessage(path string, r Result) error {
	b, err := EncodeResult(r)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ParseResult decodes a termination message written by
// WriteTerminationMessage.
func ParseResult(b []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return Result{}, fmt.Errorf("node-agent result: %w", err)
	}
	switch r.Op {
	case OpKMD, OpKMDBuild, OpSMI, OpFlash, OpProbe, OpCleanCache:
	default:
		return Result{}, fmt.Errorf("node-agent result: unknown op %q", r.Op)
	}
	if !r.Success && r.Error == nil {
		return Result{}, fmt.Errorf("node-agent result: failure without an error")
	}
	return r, nil
}
