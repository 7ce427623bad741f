// Package apicall calls a gRPC API generically, the way grpcurl does and on
// grpcurl's library: the descriptors come from the server's reflection,
// requests are JSON parsed against them and responses are printed as JSON.
// It knows which methods only read (List*, Get*, Describe*), so callers can
// demand confirmation and a lock for the others.
package apicall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fullstorydev/grpcurl"
	"github.com/jhump/protoreflect/desc" //nolint:staticcheck // grpcurl's descriptor source speaks these types
	"github.com/jhump/protoreflect/grpcreflect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/runtime/protoiface"
	"google.golang.org/protobuf/types/descriptorpb"
)

// readMethods are the Agent Substrate methods known to only read, by full
// name: its proto does not mark them (no idempotency_level). A method's
// name alone decides nothing: a ListAndPurge would be a mutation.
var readMethods = map[string]bool{
	"ateapi.Control/ListWorkers":                true,
	"ateapi.Control/GetWorker":                  true,
	"ateapi.Control/ListActors":                 true,
	"ateapi.Control/GetActor":                   true,
	"ateapi.Control/ListWorkerActorAssignments": true,
}

// ReadOnly reports whether md only reads: its descriptor says so
// (option idempotency_level = NO_SIDE_EFFECTS, which gRPC also uses to
// allow GET), or it is one of the substrate's known reading methods.
// Every other method is treated as a mutation.
func ReadOnly(md *desc.MethodDescriptor) bool {
	if md.GetMethodOptions().GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
		return true
	}
	return readMethods[md.GetService().GetFullyQualifiedName()+"/"+md.GetName()]
}

// Method is one RPC of a service.
type Method struct {
	Service  string `json:"service"`
	Name     string `json:"name"`
	Request  string `json:"request"`
	Response string `json:"response"`
	ReadOnly bool   `json:"readOnly"`
	// Streaming is "", "client", "server" or "bidi".
	Streaming string `json:"streaming,omitempty"`
}

// FullName is "service/method", the form grpcurl invokes.
func (m Method) FullName() string { return m.Service + "/" + m.Name }

// API is one server's API as its reflection describes it.
type API struct {
	conn grpc.ClientConnInterface
	ref  *grpcreflect.Client
	src  grpcurl.DescriptorSource
}

// New reads descriptors over conn's server reflection. Close releases the
// reflection stream (not conn).
func New(ctx context.Context, conn grpc.ClientConnInterface) *API {
	ref := grpcreflect.NewClientAuto(ctx, conn)
	return &API{conn: conn, ref: ref, src: grpcurl.DescriptorSourceFromServer(ctx, ref)}
}

// Close ends the reflection stream.
func (a *API) Close() { a.ref.Reset() }

// Services lists the services the server offers, without the reflection
// service itself.
func (a *API) Services() ([]string, error) {
	all, err := grpcurl.ListServices(a.src)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range all {
		if !strings.HasPrefix(s, "grpc.reflection.") {
			out = append(out, s)
		}
	}
	return out, nil
}

// Methods lists the RPCs of service, or of every service when it is "".
func (a *API) Methods(service string) ([]Method, error) {
	services := []string{service}
	if service == "" {
		var err error
		if services, err = a.Services(); err != nil {
			return nil, err
		}
	}
	var out []Method
	for _, s := range services {
		d, err := a.src.FindSymbol(s)
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", s, err)
		}
		sd, ok := d.(*desc.ServiceDescriptor)
		if !ok {
			return nil, fmt.Errorf("%q is a %s, not a service", s, kind(d))
		}
		for _, md := range sd.GetMethods() {
			out = append(out, method(sd, md))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FullName() < out[j].FullName() })
	return out, nil
}

func method(sd *desc.ServiceDescriptor, md *desc.MethodDescriptor) Method {
	m := Method{Service: sd.GetFullyQualifiedName(), Name: md.GetName(), ReadOnly: ReadOnly(md),
		Request: md.GetInputType().GetFullyQualifiedName(), Response: md.GetOutputType().GetFullyQualifiedName()}
	switch {
	case md.IsClientStreaming() && md.IsServerStreaming():
		m.Streaming = "bidi"
	case md.IsClientStreaming():
		m.Streaming = "client"
	case md.IsServerStreaming():
		m.Streaming = "server"
	}
	return m
}

// NotFoundError says a name matched no method; Candidates are the
// methods whose name contains it, case-insensitively.
type NotFoundError struct {
	Name       string
	Candidates []string
}

// Error names the method and the near names.
func (e *NotFoundError) Error() string {
	msg := fmt.Sprintf("the API has no method %q", e.Name)
	if len(e.Candidates) > 0 {
		msg += "; did you mean " + strings.Join(e.Candidates, ", ") + "?"
	}
	return msg + " (kubectl ate api list shows them all)"
}

// Resolve finds a method by its bare name (ListWorkers), "service/method"
// or "service.method".
func (a *API) Resolve(name string) (Method, error) {
	all, err := a.Methods("")
	if err != nil {
		return Method{}, err
	}
	nf := &NotFoundError{Name: name}
	var hits []Method
	for _, m := range all {
		switch name {
		case m.Name, m.FullName(), m.Service + "." + m.Name:
			hits = append(hits, m)
		}
		if similar(m.Name, name[strings.LastIndexAny(name, "/.")+1:]) {
			nf.Candidates = append(nf.Candidates, m.Name)
		}
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		return Method{}, nf
	}
	var names []string
	for _, m := range hits {
		names = append(names, m.FullName())
	}
	return Method{}, fmt.Errorf("%q is ambiguous: %s; name the service", name, strings.Join(names, ", "))
}

// similar reports whether a name is close enough to a method's to suggest
// it: one contains the other, or they are at most two edits apart.
func similar(method, name string) bool {
	a, b := strings.ToLower(method), strings.ToLower(name)
	if b == "" {
		return false
	}
	if strings.Contains(a, b) || strings.Contains(b, a) {
		return true
	}
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)] <= 2
}

// Describe returns the proto source of a service, method or message (a bare
// method name is resolved first) and, for a method or message, a JSON
// template of its request with every field.
func (a *API) Describe(symbol string) (string, error) {
	d, err := a.src.FindSymbol(strings.ReplaceAll(symbol, "/", "."))
	if err != nil {
		m, rerr := a.Resolve(symbol)
		if rerr != nil {
			return "", rerr
		}
		if d, err = a.src.FindSymbol(m.Service + "." + m.Name); err != nil {
			return "", err
		}
	}
	text, err := grpcurl.GetDescriptorText(d, a.src)
	if err != nil {
		return "", err
	}
	out := d.GetFullyQualifiedName() + " is a " + kind(d) + ":\n" + text + "\n"
	var msg *desc.MessageDescriptor
	switch x := d.(type) {
	case *desc.MethodDescriptor:
		msg = x.GetInputType()
		out += "\nRequest " + msg.GetFullyQualifiedName() + ":\n"
		if t, err := grpcurl.GetDescriptorText(msg, a.src); err == nil {
			out += t + "\n"
		}
	case *desc.MessageDescriptor:
		msg = x
	}
	if msg != nil {
		tmpl := grpcurl.MakeTemplate(msg)
		_, f, err := grpcurl.RequestParserAndFormatter(grpcurl.FormatJSON, a.src, nil, grpcurl.FormatOptions{EmitJSONDefaultFields: true})
		if err == nil {
			if s, err := f(tmpl); err == nil {
				out += "\nJSON template:\n" + s + "\n"
			}
		}
	}
	return out, nil
}

func kind(d desc.Descriptor) string {
	switch d.(type) {
	case *desc.ServiceDescriptor:
		return "service"
	case *desc.MethodDescriptor:
		return "method"
	case *desc.MessageDescriptor:
		return "message"
	case *desc.EnumDescriptor:
		return "enum"
	case *desc.FieldDescriptor:
		return "field"
	}
	return "symbol"
}

// RequestError is a request that does not fit the method's input message.
type RequestError struct{ Err error }

// Error is the parse error.
func (e *RequestError) Error() string { return e.Err.Error() }

// Unwrap returns the parse error.
func (e *RequestError) Unwrap() error { return e.Err }

// StatusError is a call the server answered with a non-OK status.
type StatusError struct {
	Method  string
	Code    codes.Code
	Message string
}

// Error is "METHOD: CODE: MESSAGE".
func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Method, e.Code, e.Message)
}

// Call invokes m with the JSON request data ("" sends an empty message)
// and writes each response as indented JSON to out. A request that does
// not parse against m's input is a *RequestError; a non-OK answer a
// *StatusError.
func (a *API) Call(ctx context.Context, m Method, data string, out io.Writer) error {
	if m.Streaming == "client" || m.Streaming == "bidi" {
		return &RequestError{Err: fmt.Errorf("%s takes a stream of requests; only unary and server-streaming methods can be called",
			m.Name)}
	}
	parser, formatter, err := grpcurl.RequestParserAndFormatter(grpcurl.FormatJSON, a.src, strings.NewReader(data), grpcurl.FormatOptions{})
	if err != nil {
		return err
	}
	var parseErr error
	h := &grpcurl.DefaultEventHandler{Out: out, Formatter: formatter}
	// grpcurl's RequestSupplier takes the deprecated golang/protobuf
	// proto.Message, an alias of protoiface.MessageV1.
	supply := func(msg protoiface.MessageV1) error {
		err := parser.Next(msg)
		if err != nil && !errors.Is(err, io.EOF) {
			parseErr = err
		}
		return err
	}
	err = grpcurl.InvokeRPC(ctx, a.src, a.conn, m.FullName(), nil, h, supply)
	if parseErr != nil {
		return &RequestError{Err: fmt.Errorf("request for %s does not fit %s: %v", m.Name, m.Request, parseErr)}
	}
	if err != nil {
		return err
	}
	if h.Status != nil && h.Status.Code() != codes.OK {
		return &StatusError{Method: m.Name, Code: h.Status.Code(), Message: h.Status.Message()}
	}
	return nil
}
