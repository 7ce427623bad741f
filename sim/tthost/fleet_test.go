package tthost

import (
	"strings"
	"testing"
)

func TestPlanFleet(t *testing.T) {
	three, err := PlanFleet([]string{"n0", "n1", "n2"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range three {
		if p.Role != RolePlain || p.Labels[LabelKMDVersion] != FleetKMD || p.Labels[LabelTelemetryGate] != "true" {
			t.Errorf("node %d: %+v", i, p)
		}
		if p.Galaxy != (i == 2) {
			t.Errorf("node %d galaxy=%v", i, p.Galaxy)
		}
	}
	five, err := PlanFleet([]string{"n0", "n1", "n2", "n3", "n4"}, true)
	if err != nil {
		t.Fatal(err)
	}
	got := []Role{five[0].Role, five[1].Role, five[2].Role, five[3].Role, five[4].Role}
	want := []Role{RolePlain, RolePlain, RoleHostManaged, RoleSkip, RoleStubborn}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("roles %v, want %v", got, want)
		}
	}
	if !five[1].Galaxy || five[2].Labels[LabelInstallMode] != "host" || !five[2].Spec.DKMS || five[3].Labels[LabelDriverSkip] != "true" {
		t.Fatalf("awkward plan wrong: %+v", five)
	}
	if _, err := PlanFleet([]string{"n0", "n1", "n2"}, true); err == nil || !strings.Contains(err.Error(), "--nodes 5") {
		t.Fatalf("awkward with 3 nodes: %v", err)
	}
}

func TestApplySituations(t *testing.T) {
	plan, err := PlanFleet([]string{"n0", "n1", "n2", "n3", "n4"}, true)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{EnvLyingKMD: "n0", EnvRebooted: " n1 ", EnvOldGlibc: "n0,n1"}
	log, err := ApplySituations(plan, func(k string) string { return env[k] })
	if err != nil || len(log) != 4 {
		t.Fatalf("log %v, err %v", log, err)
	}
	if plan[0].Labels[LabelKMDVersion] != LyingKMD || plan[0].Spec.LoadedKMD != FleetKMD || plan[0].Spec.HostGlibc != OldGlibc {
		t.Errorf("n0: %+v", plan[0])
	}
	if plan[1].Spec.RebootedInto != RebootKernel || plan[1].Labels[LabelKMDVersion] != FleetKMD {
		t.Errorf("n1: %+v", plan[1])
	}
	for _, bad := range []map[string]string{{EnvRebooted: "n9"}, {EnvLyingKMD: "n2"}} {
		if _, err := ApplySituations(plan, func(k string) string { return bad[k] }); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}
