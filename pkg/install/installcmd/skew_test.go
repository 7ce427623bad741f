package installcmd

import (
	"strings"
	"testing"
)

func TestSkewSummary(t *testing.T) {
	objs := func(n int, installed string) []Skew {
		var out []Skew
		for i := range n {
			out = append(out, Skew{Object: "o" + string(rune('a'+i)), Installed: installed})
		}
		return out
	}
	for _, c := range []struct {
		name string
		rep  SkewReport
		want []string
		not  []string
	}{
		{"nothing installed", SkewReport{Version: "v1", Checked: 7, Skews: objs(7, "")},
			[]string{"this plugin is v1", "none of the 7 objects", "oa, ob, oc, od, oe and 2 more"}, []string{"another version"}},
		{"one old", SkewReport{Version: "v2", Checked: 7, Skews: objs(1, "v1")},
			[]string{"from another version: oa (v1)"}, []string{"not installed"}},
		{"some missing", SkewReport{Version: "v2", Checked: 7, Skews: append(objs(1, "v1"), Skew{Object: "x"})},
			[]string{"oa (v1)", "not installed: x"}, []string{"none of"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			detail, fix := c.rep.Summary("tt")
			for _, w := range c.want {
				if !strings.Contains(detail, w) {
					t.Errorf("%q lacks %q", detail, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(detail, n) {
					t.Errorf("%q has %q", detail, n)
				}
			}
			if !strings.Contains(fix, "kubectl tt install --apply") {
				t.Errorf("fix %q", fix)
			}
		})
	}
}
