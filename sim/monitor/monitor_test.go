package monitor

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReportDedupsReportEachDoesNot(t *testing.T) {
	dir := t.TempDir()
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Report(RuleActorLost, "actor/demo/a", "CRASHED")
	m.Report(RuleActorLost, "actor/demo/a", "CRASHED") // the same: once
	m.Report(RuleActorLost, "actor/demo/b", "CRASHED")
	m.ReportEach(RuleTooManyOut, "nodes", "2 out")
	m.ReportEach(RuleTooManyOut, "nodes", "2 out") // a second episode
	vs, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{RuleActorLost, RuleActorLost, RuleTooManyOut, RuleTooManyOut}
	if len(vs) != len(want) {
		t.Fatalf("got %d violations %+v, want %d", len(vs), vs, len(want))
	}
	for i, v := range vs {
		if v.Rule != want[i] || v.Time.IsZero() {
			t.Errorf("violation %d: %+v, want rule %s with a time", i, v, want[i])
		}
	}
	var nilMon *Monitor
	nilMon.Report(RuleCordonLeft, "node/x", "ignored")
	nilMon.ReportEach(RuleCordonLeft, "node/x", "ignored")
}

func TestReadMissingAndMalformed(t *testing.T) {
	dir := t.TempDir()
	if vs, err := Read(dir); err != nil || vs != nil {
		t.Fatalf("no file: %v %v, want none and no error", vs, err)
	}
	if err := os.WriteFile(filepath.Join(dir, File), []byte("{\"rule\":\"x\"}\n\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vs, err := Read(dir)
	if err == nil || len(vs) != 1 {
		t.Fatalf("malformed line: %v %v, want the good line and an error", vs, err)
	}
}
