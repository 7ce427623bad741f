package ateapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// DialOptions say how to reach and trust the API server. Printing them
// never shows a token.
type DialOptions struct {
	// Endpoint is host:port of the API (--ate-endpoint). Empty means
	// port-forward through the Kubernetes API to a Ready pod behind Service.
	Endpoint string
	// CAFile is a PEM bundle (--ate-ca-file). Empty means the live
	// ClusterTrustBundles for the servicedns signer.
	CAFile string
	// Token is a bearer token (--token); TokenFile is read on every call
	// (--token-file). With neither, a token is minted by TokenRequest.
	Token     Secret
	TokenFile string
	// ServerName is verified against the certificate; default
	// "api.ate-system.svc".
	ServerName string
	// RESTConfig reaches the cluster; needed unless Endpoint, CAFile and a
	// token are all given.
	RESTConfig     *rest.Config
	Namespace      string // default "ate-system"
	Service        string // default "api"
	ServiceAccount string // default "ate-client"
	Audience       string // default "api.ate-system.svc"
	Client         ClientOptions
	// Unary, when set, runs around every call (a run's lock gate).
	Unary grpc.UnaryClientInterceptor
}

// Defaults used by Dial.
const (
	DefaultServerName     = "api.ate-system.svc"
	DefaultNamespace      = "ate-system"
	DefaultService        = "api"
	DefaultServiceAccount = "ate-client"
	DefaultAudience       = "api.ate-system.svc"
)

func (o DialOptions) withDefaults() DialOptions {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.ServerName, DefaultServerName)
	def(&o.Namespace, DefaultNamespace)
	def(&o.Service, DefaultService)
	def(&o.ServiceAccount, DefaultServiceAccount)
	def(&o.Audience, DefaultAudience)
	return o
}

// Dial connects to the API server with verified TLS (1.3, the CA from the
// file or the live ClusterTrustBundles; never insecure) and a bearer token,
// then discovers the service. Close the Client when done.
func Dial(ctx context.Context, o DialOptions) (*Client, error) {
	o = o.withDefaults()
	var kube kubernetes.Interface
	if o.RESTConfig != nil {
		var err error
		if kube, err = kubernetes.NewForConfig(o.RESTConfig); err != nil {
			return nil, fmt.Errorf("ateapi: kubernetes client: %w", err)
		}
	}
	roots, err := o.rootCAs(ctx)
	if err != nil {
		return nil, err
	}
	src, err := o.tokenSource(kube)
	if err != nil {
		return nil, err
	}
	creds := NewBearerCredentials(src)
	conns := &connWatch{}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: roots, ServerName: o.ServerName, MinVersion: tls.VersionTLS13,
		})),
		grpc.WithPerRPCCredentials(creds),
		grpc.WithStatsHandler(conns),
	}
	if o.Unary != nil {
		dopts = append(dopts, grpc.WithUnaryInterceptor(o.Unary))
	}
	target := "passthrough:///" + o.Endpoint
	var fwd *podForwarder
	if o.Endpoint == "" {
		if kube == nil {
			return nil, errors.New("ateapi: no endpoint and no kubeconfig: pass --ate-endpoint or a cluster")
		}
		fwd = newPodForwarder(o.RESTConfig, kube, o.Namespace, o.Service)
		target = "passthrough:///" + o.ServerName + ":443" // the dialer ignores it
		dopts = append(dopts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return fwd.dial(ctx)
		}))
	}
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		fwd.Close()
		return nil, fmt.Errorf("ateapi: %w", err)
	}
	c, err := newClient(ctx, conn, o.Client, conns)
	if err != nil {
		_ = conn.Close()
		fwd.Close()
		// Reflection already sent the token: a server may echo it.
		return nil, &scrubbedError{msg: creds.scrub(err.Error()), err: err}
	}
	c.creds = creds
	c.closers = append(c.closers, func() error { fwd.Close(); return nil }, conn.Close)
	return c, nil
}

func (o DialOptions) rootCAs(ctx context.Context) (*x509.CertPool, error) {
	var pemBytes []byte
	var err error
	switch {
	case o.CAFile != "":
		if pemBytes, err = os.ReadFile(o.CAFile); err != nil {
			return nil, fmt.Errorf("ateapi: read CA file: %w", err)
		}
	case o.RESTConfig != nil:
		if pemBytes, err = fetchTrustBundle(ctx, o.RESTConfig); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("ateapi: no CA: pass --ate-ca-file or a cluster to read ClusterTrustBundles from")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, errors.New("ateapi: the CA bundle holds no PEM certificate")
	}
	return pool, nil
}

func (o DialOptions) tokenSource(kube kubernetes.Interface) (TokenSource, error) {
	switch {
	case o.Token != "":
		return StaticToken(o.Token), nil
	case o.TokenFile != "":
		return FileToken(o.TokenFile), nil
	case kube != nil:
		return tokenRequestSource(kube, o.Namespace, o.ServiceAccount, o.Audience), nil
	}
	return nil, errors.New("ateapi: no token: pass --token-file or a cluster to mint one from")
}

// scrubbedError is err printed without the tokens sent; errors.Is/As and
// status.Code still see err.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
