package fakesubstrate

import (
	"encoding/base64"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// page works out one List page: the [from, to) slice of n items and the
// next token. Tokens are opaque base64 of "<kind>:<offset>"; with
// EmptyPages, an "e" token is first answered by an empty page.
func (s *Server) page(req protoreflect.Message, n int) (from, to int, next string, err error) {
	size, _ := getInt(req, "page_size")
	switch {
	case size < 0:
		return 0, 0, "", status.Error(codes.InvalidArgument, "page_size must not be negative")
	case size == 0:
		size = int64(s.opts.PageSize)
	case size > 1000:
		size = 1000
	}
	kind, from, err := parseToken(getString(req, "page_token"))
	if err != nil {
		return 0, 0, "", err
	}
	if s.opts.EmptyPages && kind != "p" {
		return 0, 0, makeToken("p", from), nil
	}
	from = min(from, n)
	to = min(from+int(size), n)
	if to < n {
		next = makeToken("e", to)
	}
	return from, to, next, nil
}

func makeToken(kind string, off int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + strconv.Itoa(off)))
}

func parseToken(tok string) (string, int, error) {
	if tok == "" {
		return "e", 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	kind, off, ok := strings.Cut(string(b), ":")
	n, aerr := strconv.Atoi(off)
	if err != nil || !ok || aerr != nil || n < 0 || (kind != "e" && kind != "p") {
		return "", 0, status.Error(codes.InvalidArgument, "invalid page_token")
	}
	return kind, n, nil
}

// appendTo adds a new element to a repeated message field and returns it.
func appendTo(out protoreflect.Message, field string) protoreflect.Message {
	l := out.Mutable(out.Descriptor().Fields().ByName(protoreflect.Name(field))).List()
	e := l.NewElement()
	l.Append(e)
	return e.Message()
}

func (s *Server) listWorkers(req, out *dynamicpb.Message) error {
	all := s.sortedWorkers()
	from, to, next, err := s.page(req, len(all))
	if err != nil {
		return err
	}
	for _, w := range all[from:to] {
		s.encodeWorker(appendTo(out, "workers"), w)
	}
	setFirst(out, next, "next_page_token")
	return nil
}

func (s *Server) listActors(req, out *dynamicpb.Message) error {
	all := s.sortedActors(getString(req, "atespace"))
	from, to, next, err := s.page(req, len(all))
	if err != nil {
		return err
	}
	for _, a := range all[from:to] {
		s.encodeActor(appendTo(out, "actors"), a)
	}
	setFirst(out, next, "next_page_token")
	return nil
}

func (s *Server) listAssignments(req, out *dynamicpb.Message) error {
	w, err := s.workerLocked(req)
	if err != nil {
		return err
	}
	bound := s.actorsOn(w.Name)
	from, to, next, err := s.page(req, len(bound))
	if err != nil {
		return err
	}
	for _, a := range bound[from:to] {
		m := appendTo(out, "actor_assignments")
		setFirst(m, a.UID, "metadata.name")
		setFirst(m, a.Atespace, "actor.atespace")
		setFirst(m, a.Name, "actor.name")
		setFirst(m, a.UID, "actor_uid")
	}
	setFirst(out, next, "next_page_token")
	return nil
}
