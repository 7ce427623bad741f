//go:build e2e

package progress

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/ui"
)

// statusDoc is tt status -o json as a script reads it.
type statusDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []struct {
		Node  string `json:"node"`
		State string `json:"state"`
	} `json:"items"`
	Run struct {
		Progress *struct {
			Run     string `json:"run"`
			Done    int    `json:"done"`
			Total   int    `json:"total"`
			Outcome string `json:"outcome"`
		} `json:"progress"`
		Paused *struct {
			Reason string `json:"reason"`
		} `json:"paused"`
	} `json:"run"`
}

// tt status -o json is a typed list as kubectl prints one: apiVersion and
// kind set, a row per node under items, and the roll's run beside them
// (the last run's progress and outcome, the pause); jsonpath over a key
// some rows lack prints nothing for them, and custom-columns reads the
// same rows.
func TestStatusDocument(t *testing.T) {
	c := simtest.Get(t)
	c.ExpectNoViolations(t)
	ctx := simtest.Context(t, 5*time.Minute)
	const n = "kwok-node-0"
	if out, code := tttest.Run(t, ctx, "upgrade", "kmd", "--version", "2.8.1", "--nodes", n); code != 0 {
		t.Fatalf("the roll of %s: exit %d\n%s", n, code, out)
	}
	read := func() statusDoc {
		t.Helper()
		out, code := tttest.Run(t, ctx, "status", "-o", "json")
		if code != 0 {
			t.Fatalf("status -o json: exit %d\n%s", code, out)
		}
		var d statusDoc
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("status -o json is not a JSON document: %v\n%s", err, out)
		}
		return d
	}
	docExamples(t, ctx)
	d := read()
	if d.APIVersion != ui.APIVersion || d.Kind != "NodeStatusList" || len(d.Items) != 3 {
		t.Errorf("status -o json: apiVersion %q, kind %q, %d items; want %s, NodeStatusList, 3", d.APIVersion, d.Kind, len(d.Items),
			ui.APIVersion)
	}
	if p := d.Run.Progress; p == nil || p.Run == "" || p.Done != 1 || p.Total != 1 || p.Outcome != "done" {
		t.Errorf("status -o json: the last run's progress is %+v, want 1 of 1 done", p)
	}
	if d.Run.Paused != nil {
		t.Errorf("status -o json: paused %+v with no pause", d.Run.Paused)
	}

	if _, code := tttest.Run(t, ctx, "pause", "--reason", "change freeze"); code != 0 {
		t.Fatalf("pause: exit %d", code)
	}
	defer tttest.Run(t, ctx, "resume")
	if p := read().Run.Paused; p == nil || p.Reason != "change freeze" {
		t.Errorf("status -o json while paused: paused %+v, want the reason", p)
	}

	out, code := tttest.Run(t, ctx, "status", "-o", "jsonpath={range .items[*]}{.node}={.why};{end}")
	if code != 0 || strings.Count(out, "=") != 3 || !strings.Contains(out, n+"=") {
		t.Errorf("status -o jsonpath over a missing key: exit %d, %q", code, out)
	}
	out, code = tttest.Run(t, ctx, "status", "-o", "custom-columns=NODE:.node,WHY:.why")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "NODE") {
		t.Errorf("status -o custom-columns: exit %d\n%s", code, out)
	}
	out, code = tttest.Run(t, ctx, "status", "-o", "name")
	if code != 0 || !strings.Contains(out, "node/"+n+"\n") || strings.Count(out, "\n") != 3 {
		t.Errorf("status -o name: exit %d\n%s", code, out)
	}
}

// docExamples runs every `kubectl tt status …` docs/output.md shows, on
// the sim after a roll that ended done: each exits 0 and prints something.
func docExamples(t *testing.T, ctx context.Context) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "output.md"))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, m := range regexp.MustCompile("`kubectl tt (status[^`]*)`").FindAllStringSubmatch(string(b), -1) {
		args := shellWords(t, m[1])
		out, code := tttest.Run(t, ctx, args...)
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Errorf("docs/output.md's %q: exit %d\n%s", m[0], code, out)
		}
		ran++
	}
	if ran < 3 {
		t.Fatalf("ran %d of docs/output.md's examples: the scan is broken", ran)
	}
}

// shellWords splits s as a shell does for the examples: by spaces, with
// single-quoted parts kept whole and unquoted.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
