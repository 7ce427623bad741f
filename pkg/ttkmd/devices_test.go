package ttkmd

import "testing"

func TestDrivesFollowsTheIDTable(t *testing.T) {
	cases := []struct {
		version, device string
		want            bool
	}{
		{"1.29", "0x401e", true}, {"2.10.0", "0x401E", true},
		{"1.30", "0xb140", false}, {"1.31", "0xb140", true}, {"2.8.0", "0xb140", true},
		{"2.1.0", "0xfaca", true}, {"2.2.0", "0xfaca", false}, {"2.9.1", "0xfaca", false},
		{"2.8.0", "0x1234", false},
		{"main", "0xb140", true}, // unreadable: not refused on a guess
	}
	for _, c := range cases {
		if got, why := Drives(c.version, c.device); got != c.want || (got == (why != "")) {
			t.Errorf("Drives(%s, %s) = %v %q, want %v", c.version, c.device, got, why, c.want)
		}
	}
}

func TestLess(t *testing.T) {
	for _, c := range [][2]string{{"1.30", "1.31"}, {"1.34", "1.34.1"}, {"1.34", "2.0.0"}, {"2.9.1", "2.10.0"}, {"2.10.0", "main"}} {
		if !Less(c[0], c[1]) || Less(c[1], c[0]) {
			t.Errorf("Less(%s, %s) wrong", c[0], c[1])
		}
	}
	if Less("2.0", "2.0.0") || Less("2.0.0", "2.0") {
		t.Error("2.0 and 2.0.0 are the same version")
	}
}
