package ateapi

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

// ProbeMove finds each refusal a move would meet, in every era, and
// changes nothing: the fleet reads the same after it.
func TestProbeMoveNamesEachRefusalAndChangesNothing(t *testing.T) {
	const principal = "system:serviceaccount:ate-system:ate-client"
	for _, era := range fakesubstrate.Eras() {
		t.Run(string(era), func(t *testing.T) {
			h := startFake(t, fakesubstrate.Options{Era: era})
			seedFleet(t, h.srv)
			c := h.mustDial(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			before, err := c.Inventory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			drains := c.Capabilities().DrainImplemented
			for _, tc := range []struct {
				name                   string
				methods, spaces, given []string
				want                   []Refusal
			}{
				{name: "allowed"},
				{name: "drain refused", methods: []string{"DrainWorker"}, want: []Refusal{{Method: "DrainWorker"}}},
				{name: "suspend refused", methods: []string{"SuspendActor"},
					want: []Refusal{{Method: "SuspendActor", Atespace: "other"}, {Method: "SuspendActor", Atespace: "team"}}},
				{name: "atespace hidden", spaces: []string{"team"},
					want: []Refusal{{Method: "ListActors", Atespace: "team"}, {Method: "SuspendActor", Atespace: "team"}}},
				{name: "atespaces list refused", methods: []string{"ListAtespaces"}, want: []Refusal{{Method: "ListAtespaces"}}},
				// An atespace the move was not given (no actor of it seen on
				// the node: a paused one the lists hide) is named by
				// ListAtespaces, and probed.
				{name: "a hidden atespace only the list names", spaces: []string{"other"}, given: []string{"team"},
					want: []Refusal{{Method: "ListActors", Atespace: "other"}, {Method: "SuspendActor", Atespace: "other"}}},
			} {
				h.srv.SetRefusedMethods(principal, tc.methods)
				h.srv.SetHiddenAtespaces(principal, tc.spaces)
				want := tc.want
				if !drains && tc.name == "drain refused" {
					want = nil // a server that cannot drain is never asked to
				}
				given := tc.given
				if given == nil {
					given = []string{"team", "other"}
				}
				refused, probed, err := c.ProbeMove(ctx, given)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if !reflect.DeepEqual(refused, want) || !reflect.DeepEqual(probed, []string{"other", "team"}) {
					t.Errorf("%s: refused %v, probed %v; want %v in [other team]", tc.name, refused, probed, want)
				}
			}
			h.srv.SetRefusedMethods(principal, nil)
			h.srv.SetHiddenAtespaces(principal, nil)
			after, err := c.Inventory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(view(before, era), view(after, era)) {
				t.Errorf("the probes changed the fleet:\n%+v\n%+v", view(before, era), view(after, era))
			}
		})
	}
}
