package ateapi

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
type Client struct {
	conn    grpc.ClientConnInterface
	svc     protoreflect.ServiceDescriptor
	caps    Capabilities
	opts    ClientOptions
	creds   *BearerCredentials // for scrubbing error texts; may be nil
	closers []func() error
}

// NewClient discovers the service over conn and probes its capabilities.
// The caller keeps ownership of conn (Close does not close it).
func NewClient(ctx context.Context, conn grpc.ClientConnInterface, opts ClientOptions) (*Client, error) {
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
	c := &Client{conn: conn, opts: opts}
	var err error
	for attempt := 1; ; attempt++ {
		if c.svc, err = discover(ctx, conn, opts.Service); err == nil {
			break
		}
		if !retryable(status.Code(err)) || attempt >= opts.Retry.MaxAttempts {
			return nil, c.wrap("ServerReflectionInfo", "", err, attempt)
		}
		if err := sleep(ctx, opts.Retry.backoff(attempt)); err != nil {
			return nil, err
		}
	}
	c.caps = Capabilities{Service: opts.Service, Methods: methodNames(c.svc), Era: detectEra(c.svc)}
	if c.caps.Has("DrainWorker") {
		if c.caps.DrainImplemented, err = c.probeDrain(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// probeDrain sends DrainWorker with no worker name: a real server refuses it
// in validation (InvalidArgument) before touching anything, a stub answers
// Unimplemented.
func (c *Client) probeDrain(ctx context.Context) (bool, error) {
	_, err := c.call(ctx, "DrainWorker", "(probe)", func(protoreflect.Message) {})
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
func (c *Client) Capabilities() Capabilities { return c.caps }

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
	md := c.svc.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, &Error{Method: method, Target: target, Code: codes.Unimplemented, Missing: true}
	}
	req := dynamicpb.NewMessage(md.Input())
	fill(req)
	full := "/" + string(c.svc.FullName()) + "/" + method
	waitReady := false
	for attempt := 1; ; attempt++ {
		var err error
		if raw {
			page := &rawPage{}
			if err = c.invoke(ctx, full, req, page, waitReady, grpc.ForceCodecV2(rawCodec{})); err == nil {
				return newWireMessage(md.Output(), page.b), nil
			}
		} else {
			resp := dynamicpb.NewMessage(md.Output())
			if err = c.invoke(ctx, full, req, resp, waitReady); err == nil {
				return resp, nil
			}
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
