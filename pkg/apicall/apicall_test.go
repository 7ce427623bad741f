package apicall

import "testing"

func TestReadOnly(t *testing.T) {
	for name, want := range map[string]bool{
		"ListWorkers": true, "GetActor": true, "DescribeThing": true, "ateapi.Control/ListActors": true,
		"ateapi.Control.GetWorker": true, "List": true,
		"SuspendActor": false, "ResumeActor": false, "DrainWorker": false, "Getaway": false, "Listen": false,
		"ateapi.Control/RevertActor": false, "DeleteActor": false,
	} {
		if got := ReadOnly(name); got != want {
			t.Errorf("ReadOnly(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSimilar(t *testing.T) {
	for _, tc := range []struct {
		method, name string
		want         bool
	}{
		{"ListWorkers", "ListWorkerz", true},
		{"ListWorkers", "listworkers", true},
		{"ListWorkers", "Workers", true},
		{"GetActor", "GetActr", true},
		{"ListWorkers", "SuspendActor", false},
		{"ListWorkers", "", false},
	} {
		if got := similar(tc.method, tc.name); got != tc.want {
			t.Errorf("similar(%q, %q) = %v, want %v", tc.method, tc.name, got, tc.want)
		}
	}
}
