package admission

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

type inner struct {
	Path string  `json:"path,omitempty"`
	Type *string `json:"type,omitempty"`
}

type object struct {
	Name      string                       `json:"name,omitempty"`
	Namespace string                       `json:"namespace,omitempty"`
	Flag      *bool                        `json:"flag,omitempty"`
	Inner     *inner                       `json:"inner,omitempty"`
	Items     []inner                      `json:"items,omitempty"`
	Labels    map[string]string            `json:"labels,omitempty"`
	Limits    map[string]resource.Quantity `json:"limits,omitempty"`
	Varies    string                       `json:"varies,omitempty"`
}

func TestRulesPinEveryFieldOfTheType(t *testing.T) {
	s := Shape{
		Object:   &object{Name: "n", Items: []inner{{Path: "/"}}, Labels: map[string]string{"a": "b"}, Varies: "v"},
		Holes:    map[string]Hole{"varies": func(at string) []Rule { return []Rule{{Expression: at + ".startsWith('v')"}} }},
		Defaults: map[string]any{"flag": true},
		Ignore:   []string{"namespace"},
	}
	rules, err := s.Rules("object")
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, r := range rules {
		all = append(all, r.Expression)
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{
		"object.name == 'n'",                           // set: equal
		"!has(object.inner)",                           // unset: absent, whole subtree
		"!has(object.flag) || ((object.flag == true))", // defaulted: unset or the default
		"size(object.items) == 1",                      // a list: its length,
		"object.items[0].path == '/'",                  // and each item
		"!has(object.items[0].type)",
		"size(object.labels) == 1 && 'a' in object.labels && object.labels['a'] == 'b'",
		"object.varies.startsWith('v')", // a hole's own rule
		"!has(dyn(object).limits)",      // a Quantity map, read through dyn()
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no rule says %s; rules:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "namespace") {
		t.Errorf("an ignored field is pinned:\n%s", joined)
	}
}

func TestAHoleMustBeAPath(t *testing.T) {
	s := Shape{Object: &object{}, Holes: map[string]Hole{"nope": func(string) []Rule { return nil }}}
	if _, err := s.Rules("object"); err == nil {
		t.Error("a hole on no path of the object was accepted")
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("a'b\\c\nd"); got != `'a\'b\\c\nd'` {
		t.Errorf("Quote = %s", got)
	}
}
