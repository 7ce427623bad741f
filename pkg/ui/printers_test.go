package ui

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type row struct {
	Node string `json:"node"`
	Why  string `json:"why,omitempty"`
}

// A list is typed as kubectl's are: apiVersion, kind and the rows under
// items, the extra fields beside them; an empty list has items: [].
func TestListDocument(t *testing.T) {
	for _, tc := range []struct {
		items any
		n     int
	}{{[]row{{Node: "a"}, {Node: "b", Why: "held"}}, 2}, {[]row(nil), 0}} {
		var b bytes.Buffer
		if err := PrintObject(&b, "json", List{Kind: "NodeStatusList", Items: tc.items,
			Extra: map[string]any{"run": map[string]any{"holder": "x"}}}); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			APIVersion string           `json:"apiVersion"`
			Kind       string           `json:"kind"`
			Items      []map[string]any `json:"items"`
			Run        map[string]any   `json:"run"`
		}
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.APIVersion != APIVersion || doc.Kind != "NodeStatusList" || len(doc.Items) != tc.n || doc.Run["holder"] != "x" {
			t.Errorf("document: %s", b.String())
		}
		if !strings.Contains(b.String(), `"items": [`) {
			t.Errorf("items not a list: %s", b.String())
		}
	}
}

// Object names its kind and adds fields beside the value's own; the
// extra fields may not overwrite kind or apiVersion.
func TestObjectDocument(t *testing.T) {
	doc, err := Document(Object{Kind: "Status", Value: map[string]any{"phase": "Rolling"},
		Extra: map[string]any{"run": struct {
			ETA float64 `json:"etaSeconds"`
		}{90}, "kind": "Wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := doc["run"].(map[string]any)
	if doc["kind"] != "Status" || doc["apiVersion"] != APIVersion || doc["phase"] != "Rolling" || run["etaSeconds"] != float64(90) {
		t.Errorf("document: %v", doc)
	}
}

// The templates as kubectl get has them: a missing key prints nothing (the
// template people write, {.why}, works on rows without a why), go-template
// and custom-columns read the same document, -file forms read a file.
func TestTemplatesAllowMissingKeys(t *testing.T) {
	l := List{Kind: "NodeStatusList", Items: []row{{Node: "a"}, {Node: "b", Why: "held"}}}
	dir := t.TempDir()
	cols := filepath.Join(dir, "cols")
	if err := os.WriteFile(cols, []byte("NODE WHY\n.node .why\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for format, want := range map[string]string{
		"jsonpath={.why}": "",
		`jsonpath={range .items[*]}{.node}:{.why};{end}`:         "a:;b:held;",
		`go-template={{range .items}}{{.node}}={{.why}};{{end}}`: "a=<no value>;b=held;",
		"custom-columns=NODE:.node,WHY:.why":                     "NODE   WHY\na      <none>\nb      held\n",
		"custom-columns-file=" + cols:                            "NODE   WHY\na      <none>\nb      held\n",
		"custom-columns=KIND:.kind":                              "KIND\n<none>\n<none>\n",
	} {
		if err := ValidateOutput(format, "json", "jsonpath"); err != nil {
			t.Errorf("%s refused: %v", format, err)
			continue
		}
		var b bytes.Buffer
		if err := PrintObject(&b, format, l); err != nil {
			t.Errorf("%s: %v", format, err)
			continue
		}
		if b.String() != want {
			t.Errorf("%s printed %q, want %q", format, b.String(), want)
		}
	}
	for _, bad := range []string{"custom-columns=", "custom-columns=NODE", "go-template={{.x", "custom-columns-file=" + filepath.Join(dir, "none")} {
		if err := ValidateOutput(bad, "json", "jsonpath"); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
