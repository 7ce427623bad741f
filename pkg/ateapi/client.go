package ateapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// ClientOptions tune a Client.
type ClientOptions struct {
	Retry RetryPolicy
	// PageSize asked of List RPCs; default 1000 (the server's maximum).
	PageSize int32
	// MaxPages bounds one List; default 1000. The server may return empty
	// pages with a next token, so this is what stops a looping server.
	MaxPages int
	// Service overrides the gRPC service name; default ServiceName.
	Service string
}

// Client calls ateapi.Control through descriptors learned by reflection.
// They are learned again when the server may have changed (see current):
// across the runbook's step 6 the next API server may be of another era,
// where the same field number means something else.
type Client struct {
	conn    grpc.ClientConnInterface
	opts    ClientOptions
	creds   *BearerCredentials // for scrubbing error texts; may be nil
	closers []func() error
	conns   *connWatch // counts the connections Dial's channel made; nil over a caller's conn

	res       atomic.Pointer[resolution]
	refreshMu sync.Mutex // one re-resolution at a time
}

// resolution is what one reflection of the server said.
type resolution struct {
	svc  protoreflect.ServiceDescriptor
	caps Capabilities
	conn uint64   // the connWatch count it was learned at
	sum  [32]byte // of the service's file descriptor: equal sums, same shapes
}

// NewClient discovers the service over conn and probes its capabilities.
// The caller keeps ownership of conn (Close does not close it).
func NewClient(ctx context.Context, conn grpc.ClientConnInterface, opts ClientOptions) (*Client, error) {
	return newClient(ctx, conn, opts, nil)
}

func newClient(ctx context.Context, conn grpc.ClientConnInterface, opts ClientOptions, conns *connWatch) (*Client, error) {
	if opts.PageSize <= 0 {
		opts.PageSize = 1000
	}
	if opts.MaxPages <= 0 {
		opts.MaxPages = 1000
	}
	if opts.Service == "" {
		opts.Service = ServiceName
	}
	opts.Retry = opts.Retry.withDefaults()
	c := &Client{conn: conn, opts: opts, conns: conns}
	res, err := c.resolve(ctx)
	if err != nil {
		return nil, err
	}
	c.res.Store(res)
	return c, nil
}

// resolve reflects the server and probes DrainWorker. A server that is
// rolling answers nothing for a while, so each attempt waits (bounded) for
// the channel to reconnect.
func (c *Client) resolve(ctx context.Context) (*resolution, error) {
	res := &resolution{}
	var err error
	for attempt := 1; ; attempt++ {
		if res.svc, err = c.discoverOnce(ctx, attempt > 1); err == nil {
			// The connection reflection just used (the first one opens
			// during the first discovery) is the one these describe.
			res.conn = c.conns.count()
			break
		}
		if !retryable(status.Code(err)) || attempt >= c.opts.Retry.MaxAttempts {
			return nil, c.wrap("ServerReflectionInfo", "", err, attempt)
		}
		if err := sleep(ctx, c.opts.Retry.backoff(attempt)); err != nil {
			return nil, err
		}
	}
	res.caps = Capabilities{Service: c.opts.Service, Methods: methodNames(res.svc), Era: detectEra(res.svc)}
	res.sum = fingerprint(res.svc)
	if res.caps.Has("DrainWorker") {
		if res.caps.DrainImplemented, err = c.probeDrain(ctx, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (c *Client) discoverOnce(ctx context.Context, waitReady bool) (protoreflect.ServiceDescriptor, error) {
	if !waitReady {
		return discover(ctx, c.conn, c.opts.Service)
	}
	if cc, ok := c.conn.(*grpc.ClientConn); ok {
		cc.Connect()
	}
	wctx, cancel := context.WithTimeout(ctx, c.opts.Retry.ReconnectWait)
	defer cancel()
	svc, err := discover(wctx, waitForReady{c.conn}, c.opts.Service)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		// The wait hides why the channel is not ready (a certificate
		// refused, say): one fail-fast attempt says it.
		return discover(ctx, c.conn, c.opts.Service)
	}
	return svc, err
}

// current is the resolution to build the next request from: learned again
// when the channel has made a new connection since (a reconnect may reach
// another API server: a rolled pod, another era).
func (c *Client) current(ctx context.Context) (*resolution, error) {
	res := c.res.Load()
	if c.conns == nil || res.conn == c.conns.count() {
		return res, nil
	}
	return c.refresh(ctx, res)
}

// refresh replaces stale by a new resolution, unless another call already
// did.
func (c *Client) refresh(ctx context.Context, stale *resolution) (*resolution, error) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if cur := c.res.Load(); cur != stale {
		return cur, nil
	}
	res, err := c.resolve(ctx)
	if err != nil {
		return nil, err
	}
	c.res.Store(res)
	return res, nil
}

// probeDrain sends DrainWorker with no worker name: a real server refuses it
// in validation (InvalidArgument) before touching anything, a stub answers
// Unimplemented.
func (c *Client) probeDrain(ctx context.Context, res *resolution) (bool, error) {
	_, err := c.callWith(ctx, res, "DrainWorker", "(probe)", func(protoreflect.Message) {}, false)
	switch {
	case err == nil, errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrNotFound):
		return true, nil
	case errors.Is(err, ErrUnimplemented):
		return false, nil
	case errors.Is(err, ErrUnauthenticated):
		return false, err
	}
	// PermissionDenied and the like say nothing about the implementation;
	// the real call will report them.
	return true, nil
}

// Capabilities reports the methods served, the era, and whether DrainWorker
// really works.
// They are the latest resolution's: after the API server rolled, the next
// call learns the new ones.
func (c *Client) Capabilities() Capabilities { return c.res.Load().caps }

// Close releases what Dial set up (connection, port-forward).
func (c *Client) Close() error {
	var errs []error
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	return errors.Join(errs...)
}

// call sends one unary RPC built by fill, retrying Aborted and Unavailable
// with bounded backoff. target names the object for error messages.
func (c *Client) call(ctx context.Context, method, target string, fill func(req protoreflect.Message)) (protoreflect.Message, error) {
	return c.callAs(ctx, method, target, fill, false)
}

// callAs is call; with raw the response stays encoded and is read through a
// wireMessage (list pages: see wire.go).
func (c *Client) callAs(ctx context.Context, method, target string, fill func(req protoreflect.Message),
	raw bool) (protoreflect.Message, error) {
	return c.callWith(ctx, nil, method, target, fill, raw)
}

// maxRelearn bounds how often one call learns the descriptors again.
const maxRelearn = 3

// callWith is callAs built from pinned, or (nil) from the current
// resolution. An answer that may come from another server than the one the
// request was built for is not trusted: when the channel reconnected during
// the call, or the server does not know the method or a field we sent, the
// descriptors are learned again and, if they changed, the call is sent
// again with the new ones (every call we make is safe to repeat).
func (c *Client) callWith(ctx context.Context, pinned *resolution, method, target string, fill func(req protoreflect.Message),
	raw bool) (protoreflect.Message, error) {
	waitReady := false
	relearned := 0
	for attempt := 1; ; attempt++ {
		res := pinned
		if res == nil {
			var err error
			if res, err = c.current(ctx); err != nil {
				return nil, err
			}
		}
		md := res.svc.Methods().ByName(protoreflect.Name(method))
		if md == nil {
			return nil, &Error{Method: method, Target: target, Code: codes.Unimplemented, Missing: true}
		}
		req := dynamicpb.NewMessage(md.Input())
		fill(req)
		full := "/" + string(res.svc.FullName()) + "/" + method
		var resp protoreflect.Message
		var err error
		if raw {
			page := &rawPage{}
			if err = c.invoke(ctx, full, req, page, waitReady, grpc.ForceCodecV2(rawCodec{})); err == nil {
				resp = newWireMessage(md.Output(), page.b)
			}
		} else {
			m := dynamicpb.NewMessage(md.Output())
			if err = c.invoke(ctx, full, req, m, waitReady); err == nil {
				resp = m
			}
		}
		if pinned == nil && relearned < maxRelearn && c.mayBeAnotherServer(res, err) {
			fresh, rerr := c.refresh(ctx, res)
			if rerr != nil {
				return nil, rerr
			}
			if fresh.sum != res.sum {
				relearned++
				attempt--
				waitReady = false
				continue
			}
		}
		if err == nil {
			return resp, nil
		}
		code := status.Code(err)
		if code == codes.DeadlineExceeded && waitReady && ctx.Err() == nil {
			code = codes.Unavailable // our reconnect wait ran out, not the caller's deadline
		}
		if !retryable(code) || attempt >= c.opts.Retry.MaxAttempts || ctx.Err() != nil {
			return nil, c.wrap(method, target, status.Error(code, status.Convert(err).Message()), attempt)
		}
		waitReady = code == codes.Unavailable
		if err := sleep(ctx, c.opts.Retry.backoff(attempt)); err != nil {
			return nil, c.wrap(method, target, status.FromContextError(err).Err(), attempt)
		}
	}
}

// mayBeAnotherServer: the answer to a request built from res may not be
// res's server's: the channel connected anew meanwhile, or the server
// refused the method or a field res has.
func (c *Client) mayBeAnotherServer(res *resolution, err error) bool {
	if c.conns != nil && c.conns.count() != res.conn {
		return true
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unimplemented:
		return true
	case codes.InvalidArgument:
		return strings.Contains(st.Message(), "unknown field")
	}
	return false
}

func (c *Client) invoke(ctx context.Context, full string, req protoreflect.ProtoMessage, resp any, waitReady bool,
	opts ...grpc.CallOption) error {
	if !waitReady {
		return c.conn.Invoke(ctx, full, req, resp, opts...)
	}
	// After Unavailable, wait (bounded) for the channel to reconnect, e.g.
	// through a re-resolved port-forward, instead of failing fast again.
	if cc, ok := c.conn.(*grpc.ClientConn); ok {
		cc.Connect()
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Retry.ReconnectWait)
	defer cancel()
	return c.conn.Invoke(ctx, full, req, resp, append(opts, grpc.WaitForReady(true))...)
}

func (c *Client) wrap(method, target string, err error, attempts int) *Error {
	st := status.Convert(err)
	msg := st.Message()
	if c.creds != nil {
		msg = c.creds.scrub(msg)
	}
	return &Error{Method: method, Target: target, Code: st.Code(), Message: msg, Attempts: attempts}
}

// followUpTimeout bounds reads made only to enrich an error message.
const followUpTimeout = 5 * time.Second

// fingerprint sums the file that defines svc: two resolutions with equal
// sums build and read every message alike.
func fingerprint(svc protoreflect.ServiceDescriptor) [32]byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(protodesc.ToFileDescriptorProto(svc.ParentFile()))
	if err != nil {
		return sha256.Sum256([]byte(svc.FullName())) // cannot happen for a parsed descriptor
	}
	return sha256.Sum256(b)
}

// connWatch counts the transports a channel opens (a gRPC stats handler):
// each new one may reach another API server.
type connWatch struct{ n atomic.Uint64 }

func (w *connWatch) count() uint64 {
	if w == nil {
		return 0
	}
	return w.n.Load()
}

func (w *connWatch) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (w *connWatch) HandleRPC(context.Context, stats.RPCStats)                         {}
func (w *connWatch) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w *connWatch) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		w.n.Add(1)
	}
}

// waitForReady makes every stream wait for the channel to (re)connect, for
// reflection, whose client takes no call options.
type waitForReady struct{ grpc.ClientConnInterface }

func (w waitForReady) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string,
	opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return w.ClientConnInterface.NewStream(ctx, desc, method, append(opts, grpc.WaitForReady(true))...)
}
