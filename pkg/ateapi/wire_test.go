package ateapi

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rollbook/rollbook/internal/fakesubstrate"

	"github.com/rollbook/rollbook/pkg/protopath"
)

// TestWireDecodingMatchesDynamic reads the same List pages of every era
// kept encoded and as dynamic messages: the decoders must see the same
// workers and actors, every fact of the seeded fleet included.
func TestWireDecodingMatchesDynamic(t *testing.T) {
	for _, era := range fakesubstrate.Eras() {
		t.Run(string(era), func(t *testing.T) {
			h := startFake(t, fakesubstrate.Options{Era: era, PageSize: 100})
			seedFleet(t, h.srv)
			c := h.mustDial(t, nil)
			ctx := context.Background()
			for _, l := range []struct {
				method, field string
				decode        func(protoreflect.Message) any
			}{
				{"ListWorkers", "workers", func(m protoreflect.Message) any { return decodeWorker(m) }},
				{"ListActors", "actors", func(m protoreflect.Message) any { return decodeActor(m) }},
			} {
				fill := pageRequest(100, "", "")
				dyn, err := c.call(ctx, l.method, "", fill)
				if err != nil {
					t.Fatal(err)
				}
				wire, err := c.callAs(ctx, l.method, "", fill, true)
				if err != nil {
					t.Fatal(err)
				}
				want, got := protopath.List(dyn, l.field), protopath.List(wire, l.field)
				if len(want) == 0 || len(got) != len(want) {
					t.Fatalf("%s: %d items on the wire, %d decoded dynamically", l.method, len(got), len(want))
				}
				for i := range want {
					if w, g := l.decode(want[i]), l.decode(got[i]); !reflect.DeepEqual(w, g) {
						t.Errorf("%s item %d:\nwire    %+v\ndynamic %+v", l.method, i, g, w)
					}
					// The slow path (anything beyond Has/Get) sees the same message.
					if !proto.Equal(got[i].Interface(), want[i].Interface()) {
						t.Errorf("%s item %d: the wire message decodes differently in full", l.method, i)
					}
				}
			}
		})
	}
}

// TestWireMessageMergesRepeatedOccurrences: a singular message field sent
// twice merges, as proto decoding does; a scalar's last occurrence wins.
func TestWireMessageMergesRepeatedOccurrences(t *testing.T) {
	h := startFake(t, fakesubstrate.Options{Era: fakesubstrate.EraC})
	c := h.mustDial(t, nil)
	md := c.res.Load().svc.Methods().ByName("ListActors").Output().Fields().ByName("actors").Message()
	part := func(fill func(protoreflect.Message)) []byte {
		a := dynamicpb.NewMessage(md)
		fill(a)
		b, err := proto.Marshal(a.Interface())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := append(part(func(m protoreflect.Message) {
		protopath.Set(m, "metadata.name", "first")
		protopath.Set(m, "metadata.atespace", "team")
	}),
		part(func(m protoreflect.Message) { protopath.Set(m, "metadata.name", "second") })...)
	a := decodeActor(newWireMessage(md, b))
	if a.Name != "second" || a.Atespace != "team" {
		t.Fatalf("got %s/%s, want team/second", a.Atespace, a.Name)
	}
}
