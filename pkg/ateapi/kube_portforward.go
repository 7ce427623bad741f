package ateapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// podForwarder port-forwards to a Ready pod behind the API Service,
// listening on 127.0.0.1 only. gRPC calls dial through it for every new
// connection; when the forward has died (pod gone, API server dropped the
// stream) the next dial re-resolves the pod and starts a new forward.
type podForwarder struct {
	cfg       *rest.Config
	kube      kubernetes.Interface
	namespace string
	service   string

	mu  sync.Mutex
	cur *forward
}

type forward struct {
	pod    string
	local  uint16
	cancel context.CancelFunc
	done   chan struct{}
	errs   *lastLine
}

func newPodForwarder(cfg *rest.Config, kube kubernetes.Interface, namespace, service string) *podForwarder {
	return &podForwarder{cfg: cfg, kube: kube, namespace: namespace, service: service}
}

// Close stops the current forward; safe on nil.
func (f *podForwarder) Close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil {
		f.cur.cancel()
		f.cur = nil
	}
}

func (f *podForwarder) dial(ctx context.Context) (net.Conn, error) {
	fw, err := f.ensure(ctx)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", fw.local))
}

func (f *podForwarder) ensure(ctx context.Context) (*forward, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil {
		select {
		case <-f.cur.done: // died: re-resolve below
			f.cur.cancel()
			f.cur = nil
		default:
			return f.cur, nil
		}
	}
	pod, port, err := f.resolve(ctx)
	if err != nil {
		return nil, err
	}
	fw, err := f.start(ctx, pod, port)
	if err != nil {
		return nil, err
	}
	f.cur = fw
	return fw, nil
}

// resolve finds a Running+Ready pod behind the Service and the container
// port its targetPort names.
func (f *podForwarder) resolve(ctx context.Context) (string, int32, error) {
	svc, err := f.kube.CoreV1().Services(f.namespace).Get(ctx, f.service, metav1.GetOptions{})
	if err != nil {
		return "", 0, fmt.Errorf("ateapi: get service %s/%s: %w", f.namespace, f.service, err)
	}
	if len(svc.Spec.Selector) == 0 {
		return "", 0, fmt.Errorf("ateapi: service %s/%s has no selector", f.namespace, f.service)
	}
	pods, err := f.kube.CoreV1().Pods(f.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String(),
	})
	if err != nil {
		return "", 0, fmt.Errorf("ateapi: list pods of service %s/%s: %w", f.namespace, f.service, err)
	}
	pod, err := ChoosePod(pods.Items)
	if err != nil {
		return "", 0, fmt.Errorf("ateapi: service %s/%s: %w", f.namespace, f.service, err)
	}
	sp, err := APIServicePort(svc)
	if err != nil {
		return "", 0, err
	}
	port, err := ResolveTargetPort(sp, pod)
	if err != nil {
		return "", 0, err
	}
	return pod.Name, port, nil
}

// start opens a forward to pod:port using WebSockets (tunnelled SPDY) and
// falling back to SPDY, as kubectl does.
func (f *podForwarder) start(ctx context.Context, pod string, port int32) (*forward, error) {
	url := f.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(f.namespace).
		Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(f.cfg)
	if err != nil {
		return nil, fmt.Errorf("ateapi: port-forward transport: %w", err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	ws, err := portforward.NewSPDYOverWebsocketDialer(url, f.cfg)
	if err != nil {
		return nil, fmt.Errorf("ateapi: port-forward websocket dialer: %w", err)
	}
	dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	// The forward outlives this dial's ctx: it serves later reconnects too.
	fctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	errs := &lastLine{}
	pf, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"},
		[]string{fmt.Sprintf("0:%d", port)}, ready, io.Discard, errs)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("ateapi: port-forward: %w", err)
	}
	fw := &forward{pod: pod, cancel: cancel, done: make(chan struct{}), errs: errs}
	var ferr error
	go func() {
		defer close(fw.done)
		ferr = pf.ForwardPorts()
	}()
	select {
	case <-ready:
	case <-fw.done:
		cancel()
		return nil, fmt.Errorf("ateapi: port-forward to pod %s/%s: %v %s", f.namespace, pod, ferr, errs.String())
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		cancel()
		return nil, fmt.Errorf("ateapi: port-forward to pod %s/%s: not ready after 30s", f.namespace, pod)
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		cancel()
		return nil, errors.Join(errors.New("ateapi: port-forward reported no local port"), err)
	}
	fw.local = ports[0].Local
	return fw, nil
}

// lastLine keeps the port-forwarder's last error line for messages.
type lastLine struct {
	mu   sync.Mutex
	line string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := strings.TrimSpace(string(p)); s != "" {
		l.line = s
	}
	return len(p), nil
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.line
}
