package fakesubstrate

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/rollbook/rollbook/pkg/protopath"
)

// page works out one List page: the [from, to) slice of n items, the next
// token and the change counter the list began at. Tokens are opaque base64
// of "<kind>:<offset>:<seq>"; with EmptyPages, an "e" token is first
// answered by an empty page.
func (s *Server) page(req protoreflect.Message, n int) (from, to int, next string, start uint64, err error) {
	size := protopath.Int(req, "page_size")
	switch {
	case size < 0:
		return 0, 0, "", 0, status.Error(codes.InvalidArgument, "page_size must not be negative")
	case size == 0:
		size = int64(s.opts.PageSize)
	case size > 1000:
		size = 1000
	}
	if s.opts.SoftLists {
		size = min(size, int64(s.opts.SoftPageSize))
	}
	kind, from, start, err := parseToken(protopath.String(req, "page_token"))
	if err != nil {
		return 0, 0, "", 0, err
	}
	if kind == "" {
		kind, start = "e", s.seq
	}
	if s.opts.EmptyPages && kind != "p" {
		return 0, 0, makeToken("p", from, start), start, nil
	}
	from = min(from, n)
	to = min(from+int(size), n)
	if to < n {
		next = makeToken("e", to, start)
	}
	return from, to, next, start, nil
}

// missed reports whether a soft list leaves out an item that changed after
// the list began (seq) or just before this page (SoftWindow).
func (s *Server) missed(seq uint64, changed time.Time, start uint64) bool {
	if !s.opts.SoftLists {
		return false
	}
	return seq > start || (s.opts.SoftWindow > 0 && s.now().Sub(changed) < s.opts.SoftWindow)
}

func makeToken(kind string, off int, seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + strconv.Itoa(off) + ":" + strconv.FormatUint(seq, 10)))
}

func parseToken(tok string) (string, int, uint64, error) {
	if tok == "" {
		return "", 0, 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	parts := strings.Split(string(b), ":")
	if err != nil || len(parts) != 3 || (parts[0] != "e" && parts[0] != "p") {
		return "", 0, 0, status.Error(codes.InvalidArgument, "invalid page_token")
	}
	n, aerr := strconv.Atoi(parts[1])
	seq, serr := strconv.ParseUint(parts[2], 10, 64)
	if aerr != nil || serr != nil || n < 0 {
		return "", 0, 0, status.Error(codes.InvalidArgument, "invalid page_token")
	}
	return parts[0], n, seq, nil
}

// appendTo adds a new element to a repeated message field and returns it.
func appendTo(out protoreflect.Message, field string) protoreflect.Message {
	l := out.Mutable(out.Descriptor().Fields().ByName(protoreflect.Name(field))).List()
	e := l.NewElement()
	l.Append(e)
	return e.Message()
}

// appendItem adds item to the repeated field of out, encoded by encode.
// With EncodeCache the item's bytes are reused until anything changes and
// go out as unknown fields of out: on the wire they are the same repeated
// field.
func (s *Server) appendItem(out protoreflect.Message, field string, item any, encode func(protoreflect.Message)) {
	if !s.opts.EncodeCache {
		encode(appendTo(out, field))
		return
	}
	if s.encoded == nil || s.encodedSeq != s.seq {
		s.encoded, s.encodedSeq = map[any][]byte{}, s.seq
	}
	b, ok := s.encoded[item]
	if !ok {
		fd := out.Descriptor().Fields().ByName(protoreflect.Name(field))
		m := dynamicpb.NewMessage(fd.Message())
		encode(m)
		body, err := proto.Marshal(m)
		if err != nil {
			panic(err) // a message built from its own descriptor always encodes
		}
		b = protowire.AppendBytes(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), body)
		s.encoded[item] = b
	}
	out.SetUnknown(append(out.GetUnknown(), b...))
}

func (s *Server) listWorkers(req, out *dynamicpb.Message) error {
	all := s.sortedWorkers()
	from, to, next, start, err := s.page(req, len(all))
	if err != nil {
		return err
	}
	for _, w := range all[from:to] {
		if !s.missed(w.seq, w.changed, start) {
			s.appendItem(out, "workers", w, func(m protoreflect.Message) { s.encodeWorker(m, w) })
		}
	}
	protopath.SetFirst(out, next, "next_page_token")
	return nil
}

func (s *Server) listActors(req, out *dynamicpb.Message, hidden map[string]bool) error {
	all := s.sortedActors(protopath.String(req, "atespace"))
	if len(hidden) > 0 {
		all = slices.DeleteFunc(slices.Clone(all), func(a *Actor) bool { return hidden[a.Atespace] })
	}
	from, to, next, start, err := s.page(req, len(all))
	if err != nil {
		return err
	}
	for _, a := range all[from:to] {
		if !s.missed(a.seq, a.changed, start) {
			s.appendItem(out, "actors", a, func(m protoreflect.Message) { s.encodeActor(m, a) })
		}
	}
	protopath.SetFirst(out, next, "next_page_token")
	return nil
}

// listAtespaces names every atespace an actor lives in (the fake creates
// atespaces with their first actor), hidden ones too: upstream lists the
// store's atespaces whoever asks.
func (s *Server) listAtespaces(out *dynamicpb.Message) {
	seen := map[string]bool{}
	for _, a := range s.sortedActors("") {
		if !seen[a.Atespace] {
			seen[a.Atespace] = true
			m := appendTo(out, "atespaces")
			protopath.SetFirst(m, a.Atespace, "name")
		}
	}
}

func (s *Server) listAssignments(req, out *dynamicpb.Message) error {
	w, err := s.workerLocked(req)
	if err != nil {
		return err
	}
	bound := s.actorsOn(w.Name)
	from, to, next, _, err := s.page(req, len(bound))
	if err != nil {
		return err
	}
	for _, a := range bound[from:to] {
		m := appendTo(out, "actor_assignments")
		protopath.SetFirst(m, a.UID, "metadata.name")
		protopath.SetFirst(m, a.Atespace, "actor.atespace")
		protopath.SetFirst(m, a.Name, "actor.name")
		protopath.SetFirst(m, a.UID, "actor_uid")
	}
	protopath.SetFirst(out, next, "next_page_token")
	return nil
}

// PrimeEncodeCache encodes every worker and actor now, so that with
// EncodeCache the first list costs what the next ones do.
func (s *Server) PrimeEncodeCache() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opts.EncodeCache {
		return
	}
	if md := s.schema.service.Methods().ByName("ListWorkers"); md != nil {
		out := dynamicpb.NewMessage(md.Output())
		for _, w := range s.sortedWorkers() {
			s.appendItem(out, "workers", w, func(m protoreflect.Message) { s.encodeWorker(m, w) })
			out.SetUnknown(nil)
		}
	}
	if md := s.schema.service.Methods().ByName("ListActors"); md != nil {
		out := dynamicpb.NewMessage(md.Output())
		for _, a := range s.sortedActors("") {
			s.appendItem(out, "actors", a, func(m protoreflect.Message) { s.encodeActor(m, a) })
			out.SetUnknown(nil)
		}
	}
}
