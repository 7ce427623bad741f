package lease

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The host a test runs "on", and holders recorded by runs elsewhere.
var (
	here = Facts{MachineID: "m1", BootID: "b1", PIDNamespace: "pid:[1]"}
	// A holder that ran on this host, boot and pid namespace as pid 7.
	local = Holder{User: "alice", Host: "laptop", PID: 7, RunID: "r1", MachineID: "m1", BootID: "b1", PIDNamespace: "pid:[1]", Start: "100"}
	me    = Holder{User: "bob", Host: "laptop", PID: 8, RunID: "r2", MachineID: "m1", BootID: "b1", PIDNamespace: "pid:[1]", Start: "200"}
	rules = Policy{Duration: 30 * time.Second, Margin: 5 * time.Second}
)

func held(h Holder) *Record {
	return &Record{Identity: h.Identity(), Holder: h, Duration: 30 * time.Second}
}

func with(h Holder, change func(*Holder)) Holder { change(&h); return h }

func facts(f Facts, change func(*Facts)) Facts { change(&f); return f }

var (
	running = Process{Known: true, Exists: true, Start: "100"}
	noPID   = Process{Known: true}
	reused  = Process{Known: true, Exists: true, Start: "999"}
	hidden  = Process{} // exists for kill(2), invisible in /proc (hidepid)
)

func TestDecide(t *testing.T) {
	on := func(p Process) Facts { return facts(here, func(f *Facts) { f.Process = p }) }
	cases := []struct {
		name   string
		cur    *Record
		f      Facts
		p      Policy
		want   Action
		reason string        // a part of the takeover reason
		wait   time.Duration // for Watch
	}{
		{name: "no lease: create it", cur: nil, f: here, want: Create},
		{name: "released lease: claim it", cur: &Record{Holder: local}, f: here, want: Claim},
		{name: "already this run's: claim it", cur: held(me), f: here, want: Claim},

		// On this very host, boot and pid namespace the holder's process decides at once.
		{name: "local holder's process gone", cur: held(local), f: on(noPID), want: TakeOver, reason: "(pid 7 on laptop) no longer exists"},
		{name: "local holder's pid reused by another process", cur: held(local), f: on(reused), want: TakeOver, reason: "no longer exists"},
		{name: "local holder alive", cur: held(local), f: on(running), want: Refuse},
		{name: "local holder alive, even after a change seen", cur: held(local),
			f: facts(on(running), func(f *Facts) { f.Changed = true }), want: Refuse},
		{name: "local holder hidden from /proc: cannot tell", cur: held(local), f: on(hidden), want: Watch, wait: 35 * time.Second},
		{name: "local holder without a recorded start, pid in use", cur: held(with(local, func(h *Holder) { h.Start = "" })),
			f: on(running), want: Watch, wait: 35 * time.Second},
		{name: "local holder without a pid", cur: held(with(local, func(h *Holder) { h.PID = 0 })), f: on(noPID), want: Watch, wait: 35 * time.Second},

		// Anywhere else a pid means nothing here: the Lease's expiry decides.
		{name: "same hostname, another machine (its pid free here)", cur: held(with(local, func(h *Holder) { h.MachineID = "m2"; h.BootID = "b2" })),
			f: on(noPID), want: Watch, wait: 35 * time.Second},
		{name: "same hostname, another machine (its pid taken here)", cur: held(with(local, func(h *Holder) { h.MachineID = "m2"; h.BootID = "b2" })),
			f: on(running), want: Watch, wait: 35 * time.Second},
		{name: "same machine ID, another boot: a reboot or a cloned image", cur: held(with(local, func(h *Holder) { h.BootID = "b0" })),
			f: on(noPID), want: Watch, wait: 35 * time.Second},
		{name: "same boot ID, another machine ID", cur: held(with(local, func(h *Holder) { h.MachineID = "m2" })),
			f: on(noPID), want: Watch, wait: 35 * time.Second},
		{name: "same machine and boot, another pid namespace (a container)", cur: held(with(local, func(h *Holder) { h.PIDNamespace = "pid:[2]" })),
			f: on(noPID), want: Watch, wait: 35 * time.Second},
		{name: "holder recorded no machine ID (an older rollbook)", cur: held(with(local, func(h *Holder) { h.MachineID = "" })),
			f: on(noPID), want: Watch, wait: 35 * time.Second},
		{name: "this host has no machine ID", cur: held(with(local, func(h *Holder) { h.MachineID = "" })),
			f: facts(on(noPID), func(f *Facts) { f.MachineID = "" }), want: Watch, wait: 35 * time.Second},
		{name: "this host cannot inspect processes", cur: held(local), f: here, want: Watch, wait: 35 * time.Second},

		// Watching, by this machine's clock.
		{name: "watched unchanged, not yet long enough", cur: held(with(local, func(h *Holder) { h.MachineID = "m2" })),
			f: facts(here, func(f *Facts) { f.Unchanged = 34 * time.Second }), want: Watch, wait: 35 * time.Second},
		{name: "watched unchanged for the duration and margin", cur: held(with(local, func(h *Holder) { h.MachineID = "m2" })),
			f: facts(here, func(f *Facts) { f.Unchanged = 35 * time.Second }), want: TakeOver, reason: "not renewed for 35s as seen from this machine"},
		{name: "changed while watched: its holder is alive", cur: held(with(local, func(h *Holder) { h.MachineID = "m2" })),
			f: facts(here, func(f *Facts) { f.Changed = true; f.Unchanged = time.Hour }), want: Refuse},
		{name: "changed while watched, released meanwhile", cur: &Record{Holder: local},
			f: facts(here, func(f *Facts) { f.Changed = true }), want: Claim},
		{name: "the holder's own short duration is waited out, margin scaled, at least 1s",
			cur: &Record{Identity: "x", Holder: Holder{Host: "ci"}, Duration: 2 * time.Second},
			f:   here, p: Policy{Duration: 30 * time.Second, Margin: 7500 * time.Millisecond}, want: Watch, wait: 3 * time.Second},
		{name: "the holder's own long duration, margin scaled",
			cur: &Record{Identity: "x", Holder: Holder{Host: "ci"}, Duration: 60 * time.Second},
			f:   here, want: Watch, wait: 70 * time.Second},
		{name: "no duration on the Lease: ours", cur: &Record{Identity: "x", Holder: Holder{Host: "ci"}},
			f: here, want: Watch, wait: 35 * time.Second},

		// --steal-lock takes it from anyone.
		{name: "steal from a live local holder", cur: held(local), f: on(running), p: Policy{Steal: true}, want: TakeOver, reason: ReasonSteal},
		{name: "steal from a holder elsewhere", cur: held(with(local, func(h *Holder) { h.MachineID = "m2" })),
			f: here, p: Policy{Steal: true}, want: TakeOver, reason: ReasonSteal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			if p.Duration == 0 {
				p.Duration, p.Margin = rules.Duration, rules.Margin
			}
			d := Decide(tc.cur, me, tc.f, p)
			if d.Action != tc.want {
				t.Fatalf("got %v (%+v), want %v", d.Action, d, tc.want)
			}
			if !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", d.Reason, tc.reason)
			}
			if d.Action == Watch && d.Wait != tc.wait {
				t.Errorf("watch for %s, want %s", d.Wait, tc.wait)
			}
			if (d.Action == Refuse || d.Action == TakeOver || d.Action == Watch) && d.Holder != tc.cur.Holder {
				t.Errorf("decision names %+v, want the holder %+v", d.Holder, tc.cur.Holder)
			}
		})
	}
}

// This machine's identifiers are recorded as digests, never as read; this
// process reads as alive here and an exited one as gone.
func TestThisMachine(t *testing.T) {
	m := ThisMachine()
	for file, id := range map[string]string{"/etc/machine-id": m.MachineID, "/proc/sys/kernel/random/boot_id": m.BootID} {
		if raw, err := os.ReadFile(file); err == nil && (id == "" || strings.Contains(string(raw), id)) {
			t.Errorf("%s: recorded as %q, want a digest of it", file, id)
		}
	}
	if m.Inspect == nil || m.MachineID == "" || m.BootID == "" || m.PIDNamespace == "" {
		t.Skip("this host cannot tell its own processes apart")
	}
	self := Holder{PID: os.Getpid(), MachineID: m.MachineID, BootID: m.BootID, PIDNamespace: m.PIDNamespace, Start: inspect(os.Getpid()).Start}
	if f := m.Facts(self); self.Start == "" || !f.alive(self) || f.gone(self) {
		t.Errorf("this process (%+v) does not read as alive: %+v", self, f)
	}
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	dead := self
	dead.PID = exited.Process.Pid
	if f := m.Facts(dead); !f.gone(dead) {
		t.Errorf("an exited process (pid %d) does not read as gone: %+v", dead.PID, f)
	}
}
