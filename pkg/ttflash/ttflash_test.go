package ttflash

import (
	"fmt"
	"testing"
)

func TestDecideFollowsEveryRule(t *testing.T) {
	for _, r := range Rules {
		spi := r.SPI
		if spi == "" {
			spi = r.Running
		}
		if got := Decide(Parse(r.Running), Parse(spi), Parse(r.Bundle), r.Flags); got != r.Want {
			t.Errorf("%s (%s): Decide = %+v, want %+v", r.Name, r.Source, got, r.Want)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"19.9.0.0": "19.9.0.0", "19.9.0": "19.9.0.0", "18.2.0.0\n": "18.2.0.0",
		"80.17.2.0": "17.2.0.0", "80.18.0.1": "18.0.1.0",
		"255.255.255.255": "none", "0.0.222.173": "none", "N/A": "none", "?": "none", "": "none",
		"19.9": "none", "1.2.3.4.5": "none", "19.x.0.0": "none", "19.256.0.0": "none", "19.-1.0.0": "none",
		"019.9.0.0": "none", "+19.9.0.0": "none",
	} {
		if got := Parse(in).String(); got != want {
			t.Errorf("Parse(%q) = %s, want %s", in, got, want)
		}
	}
}

// versions spans the schemes, the sentinels and each relation to every
// bundle below.
var versions = []string{
	"80.16.0.0", "80.17.2.0", "80.18.2.0", "18.0.0.0", "18.2.0.0", "18.9.1.0", "19.0.0.0", "19.9.0.0",
	"20.1.0.0", "21.0.0.0", "255.255.255.255", "0.0.222.173", "N/A",
}

var bundles = []string{"18.2.0", "19.0.0", "19.9.0", "20.0.0"}

var flagSets = []Flags{{}, {Force: true}, {AllowMajorDowngrades: true}, {Force: true, AllowMajorDowngrades: true}}

func (f Flags) within(g Flags) bool {
	return (!f.Force || g.Force) && (!f.AllowMajorDowngrades || g.AllowMajorDowngrades)
}

// Needs is the least tt-flash needs: with it the chip is written, and with
// any set of flags that lacks one of its flags it is not. So kubectl tt
// never passes --force for a case tt-flash writes without it.
func TestNeedsIsLeast(t *testing.T) {
	for _, run := range versions {
		for _, b := range bundles {
			r, bv := Parse(run), Parse(b)
			c := ClassifyVersions(r, bv)
			need := c.Needs()
			name := fmt.Sprintf("%s → %s (%s, needs %v)", run, b, c, need.Argv())
			if c == CaseSame {
				if d := Decide(r, r, bv, Flags{}); d.Outcome != Skip {
					t.Errorf("%s: tt-flash %s without flags", name, d.Outcome)
				}
				continue
			}
			if d := Decide(r, r, bv, need); d.Outcome != Write {
				t.Errorf("%s: with %v tt-flash %s (%s)", name, need.Argv(), d.Outcome, d.Refusal)
			}
			for _, f := range flagSets {
				if need.within(f) {
					continue
				}
				if d := Decide(r, r, bv, f); d.Outcome == Write {
					t.Errorf("%s: tt-flash writes with only %v; Needs asks for more", name, f.Argv())
				}
			}
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		running, bundle string
		want            Case
	}{
		{"80.17.2.0", "18.2.0.0", CaseUpgrade},
		{"80.18.2.0", "18.2.0.0", CaseSame},
		{"80.16.0.0", "18.2.0.0", CaseMultiMajorUpgrade},
		{"18.2.0.0", "20.0.0.0", CaseMultiMajorUpgrade},
		{"19.9.0.0", "18.5.0", CaseMajorDowngrade},
		{"19.9.0.0", "19.5.0", CaseMinorDowngrade},
		{"18.2.0.0", "19.0.0", CaseUpgrade},
		{"255.255.255.255", "19.0.0", CaseNoRunning},
		{"?", "19.0.0", CaseNoRunning},
		{"19.0.0.0", "bogus", CaseNoRunning},
	} {
		if got := Classify(tc.running, tc.bundle); got != tc.want {
			t.Errorf("Classify(%s, %s) = %s, want %s", tc.running, tc.bundle, got, tc.want)
		}
	}
}
