package simtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUUse is the CPU time the sim's processes used, by command name. A
// process that ended (a helper pod's agent, once reaped) is counted under
// its parent's name with " (ended children)".
type CPUUse map[string]time.Duration

// Total is the sum over every process.
func (u CPUUse) Total() time.Duration {
	var t time.Duration
	for _, d := range u {
		t += d
	}
	return t
}

// Since is what u used beyond before.
func (u CPUUse) Since(before CPUUse) CPUUse {
	d := CPUUse{}
	for k, v := range u {
		if v -= before[k]; v > 0 {
			d[k] = v
		}
	}
	return d
}

// clockTicks is Linux's USER_HZ, which /proc/PID/stat counts in on every
// architecture Go supports.
const clockTicks = 100

// CPU reads, from /proc, the CPU time every process in the sim's process
// group used so far (the sim starts in a group of its own): benchmarks use
// it to tell a roll limited by the machine's cores from one limited by its
// waits.
func (c *Cluster) CPU() (CPUUse, error) {
	pgid := c.cmd.Process.Pid
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	u := CPUUse{}
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		comm := s[open+1 : end]
		// Fields after the name, from field 3 (state): pgrp is 5, utime
		// 14, stime 15, cutime 16, cstime 17.
		f := strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g != pgid {
			continue
		}
		ticks := func(i int) time.Duration {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			return time.Duration(n) * time.Second / clockTicks
		}
		u[comm] += ticks(11) + ticks(12)
		if ended := ticks(13) + ticks(14); ended > 0 {
			u[comm+" (ended children)"] += ended
		}
	}
	if len(u) == 0 {
		return nil, fmt.Errorf("no process of the sim's group %d in /proc", pgid)
	}
	return u, nil
}

// PeakRSS is the sim process's peak resident memory (VmHWM), in bytes.
func (c *Cluster) PeakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", c.cmd.Process.Pid)
}
