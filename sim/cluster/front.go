package cluster

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// front is the kube-apiserver's address as every client knows it, a TCP
// relay to where the apiserver really listens, so that a restart
// (RestartAPIServer) looks to clients as a real one does: every
// connection ends at once (an in-process apiserver shutting down keeps its
// open watches for up to its request timeout, a minute), and connecting
// is refused until the new apiserver serves. TLS passes through untouched.
type front struct {
	addr, backend string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func startFront(addr, backend string) (*front, error) {
	f := &front{addr: addr, backend: backend, conns: map[net.Conn]bool{}}
	return f, f.up()
}

// up listens again on the front address.
func (f *front) up() error {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment after down
		if ln, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("apiserver front %s: %w", f.addr, err)
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go f.accept(ln)
	return nil
}

// down stops listening (connecting is refused) and ends every connection.
func (f *front) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		_ = f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		_ = c.Close()
	}
	f.conns = map[net.Conn]bool{}
}

func (f *front) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go f.relay(c)
	}
}

func (f *front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln == nil {
		return false
	}
	f.conns[c] = true
	return true
}

func (f *front) forget(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
		_ = c.Close()
	}
}

func (f *front) relay(c net.Conn) {
	b, err := net.DialTimeout("tcp", f.backend, 10*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !f.track(c) || !f.track(b) {
		f.forget(c, b)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	f.forget(c, b)
}
