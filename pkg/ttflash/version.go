// Package ttflash holds tt-flash's rules for firmware bundle versions: how
// a chip's running version is read and normalised, how it relates to a
// bundle's, and which tt-flash flags a flash of it needs. The node agent
// (its flags and refusals), the probe's blockers and the fake tt-flash all
// decide with these functions, so they cannot drift apart; docs/tt.md
// cites the upstream source of each rule.
package ttflash

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a firmware bundle version as tt-flash compares it: four parts,
// the pre-18 scheme normalised. The zero Version is "no running version".
type Version struct {
	parts [4]int
	known bool
}

// Known reports whether the chip reported a version tt-flash can use.
func (v Version) Known() bool { return v.known }

// Major is the first part after normalisation (tt-flash's fwId).
func (v Version) Major() int { return v.parts[0] }

func (v Version) String() string {
	if !v.known {
		return "none"
	}
	return fmt.Sprintf("%d.%d.%d.%d", v.parts[0], v.parts[1], v.parts[2], v.parts[3])
}

// Compare orders two known versions part by part.
func (v Version) Compare(w Version) int {
	for i := range v.parts {
		switch {
		case v.parts[i] < w.parts[i]:
			return -1
		case v.parts[i] > w.parts[i]:
			return 1
		}
	}
	return 0
}

// oldScheme is the first part of every bundle before the renumbering at
// 18: 80.<major>.<minor>.<patch> (tt-flash flash.py normalize_fw_version).
const oldScheme = 80

// Parse reads a version as tt-smi, sysfs or a manifest print it: three or
// four dot-separated bytes. Anything else — "?", tt-smi's "N/A", and the
// words tt-flash's Wormhole reader treats as "no version" (0xffffffff, which
// Galaxy chips report, and 0xdead) — is no running version.
func Parse(s string) Version {
	fields := strings.Split(strings.TrimSpace(s), ".")
	if len(fields) < 3 || len(fields) > 4 {
		return Version{}
	}
	var p [4]int
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != f {
			return Version{}
		}
		p[i] = n
	}
	if len(fields) == 4 && (p == [4]int{255, 255, 255, 255} || p == [4]int{0, 0, 0xde, 0xad}) {
		return Version{}
	}
	if p[0] == oldScheme {
		p = [4]int{p[1], p[2], p[3], 0}
	}
	return Version{parts: p, known: true}
}

// Case is how a bundle relates to what one chip runs. Every refusal names
// each device's case.
type Case string

// The cases, named as every refusal names them.
const (
	// CaseUpgrade: the same major or the next one (tt-flash permits one
	// major boundary per flash).
	CaseUpgrade Case = "upgrade"
	CaseSame    Case = "same"
	// CaseMinorDowngrade: the same major, older.
	CaseMinorDowngrade Case = "minor downgrade"
	CaseMajorDowngrade Case = "major downgrade"
	// CaseMultiMajorUpgrade: more than one major newer; tt-flash's fwId
	// check refuses it without --force.
	CaseMultiMajorUpgrade Case = "upgrade across more than one major"
	// CaseNoRunning: the chip reports no running version; tt-flash refuses
	// it without --force.
	CaseNoRunning Case = "no running version"
)

// Classify relates bundle (the target) to running (a chip's readback).
// An unreadable bundle version is reported as CaseNoRunning too: nothing
// can be compared.
func Classify(running, bundle string) Case {
	return ClassifyVersions(Parse(running), Parse(bundle))
}

// ClassifyVersions is Classify on parsed versions.
func ClassifyVersions(r, b Version) Case {
	switch {
	case !r.known || !b.known:
		return CaseNoRunning
	case r.Major() > b.Major():
		return CaseMajorDowngrade
	case r.Major() < b.Major()-1:
		return CaseMultiMajorUpgrade
	}
	switch r.Compare(b) {
	case -1:
		return CaseUpgrade
	case 1:
		return CaseMinorDowngrade
	}
	return CaseSame
}

// Flags are tt-flash's switches that change its per-chip decision.
type Flags struct {
	Force                bool // --force
	AllowMajorDowngrades bool // --allow-major-downgrades
}

// Argv is the flags as tt-flash takes them.
func (f Flags) Argv() []string {
	var out []string
	if f.Force {
		out = append(out, "--force")
	}
	if f.AllowMajorDowngrades {
		out = append(out, "--allow-major-downgrades")
	}
	return out
}

// Or is the union of two flag sets.
func (f Flags) Or(g Flags) Flags {
	return Flags{Force: f.Force || g.Force, AllowMajorDowngrades: f.AllowMajorDowngrades || g.AllowMajorDowngrades}
}

// Needs is the least tt-flash needs to write a chip in case c (whose SPI
// holds what it runs). CaseSame needs nothing: there is nothing to write.
// TestNeedsIsLeast holds it to Decide.
func (c Case) Needs() Flags {
	switch c {
	case CaseMinorDowngrade, CaseMultiMajorUpgrade, CaseNoRunning:
		return Flags{Force: true}
	case CaseMajorDowngrade:
		return Flags{Force: true, AllowMajorDowngrades: true}
	}
	return Flags{}
}
