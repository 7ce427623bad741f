// Command fakeapi serves a fake Agent Substrate control API holding a large
// inventory, for benchmarking `kubectl ate status` with the API: WORKERS
// workers spread over NODES nodes named like the sim's (kwok-node-I) and
// ACTORS actors bound to them, some paused or suspended. It writes the
// endpoint, the CA and a token file into -dir and serves until killed.
//
//	go run ./hack/fakeapi -dir /tmp/x -nodes 5000 -workers 5000 -actors 50000
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
	"github.com/rollbook/rollbook/pkg/atestate"
)

func main() {
	dir := flag.String("dir", "", "directory for endpoint, ca.pem and token")
	nodes := flag.Int("nodes", 5000, "nodes the workers run on (kwok-node-0…)")
	workers := flag.Int("workers", 5000, "registered workers")
	actors := flag.Int("actors", 50000, "actors; every 10th is paused, every 10th+1 suspended, the rest bound")
	pageSize := flag.Int("page-size", 1000, "List page size when a request asks for 0")
	flag.Parse()
	if *dir == "" || *nodes <= 0 || *workers <= 0 || *actors < 0 {
		log.Fatal("fakeapi: -dir is required and the counts must be positive")
	}
	pki, err := fakesubstrate.NewPKI(fakesubstrate.DefaultAudience)
	if err != nil {
		log.Fatal(err)
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		log.Fatal(err)
	}
	token := hex.EncodeToString(secret)
	srv, err := fakesubstrate.Start(fakesubstrate.Options{
		Certificate:   &pki.Certificate,
		TokenReviewer: fakesubstrate.StaticTokens{token: {Principal: "bench", Audiences: []string{fakesubstrate.DefaultAudience}}},
		PageSize:      *pageSize,
		EncodeCache:   true, // the inventory only changes when the client acts
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := serve(srv, *dir, token, pki.CAPEM, *nodes, *workers, *actors); err != nil {
		srv.Stop()
		log.Fatal(err)
	}
	srv.Stop()
}

// serve seeds srv with the inventory, writes how to reach it into dir and
// serves until SIGINT or SIGTERM.
func serve(srv *fakesubstrate.Server, dir, token string, caPEM []byte, nodes, workers, actors int) error {
	// Capacity spreads the actors evenly, so every worker hosts a share.
	perWorker := (actors + workers - 1) / workers
	for i := range workers {
		w := fakesubstrate.Worker{
			Name: fmt.Sprintf("w-%05d", i), Namespace: "ate-batch", Pool: "batch", Pod: fmt.Sprintf("batch-%05d", i),
			Node: fmt.Sprintf("kwok-node-%d", i%nodes), SandboxClass: "gvisor", Capacity: perWorker + 1,
		}
		if err := srv.AddWorker(w); err != nil {
			return err
		}
	}
	for i := range actors {
		a := fakesubstrate.Actor{Atespace: fmt.Sprintf("team-%d", i%20), Name: fmt.Sprintf("actor-%06d", i)}
		switch i % 10 {
		case 0:
			a.State = atestate.ActorPaused
		case 1:
			a.State = atestate.ActorSuspended
		default:
			a.State, a.Worker = atestate.ActorRunning, fmt.Sprintf("w-%05d", i%workers)
		}
		if err := srv.AddActor(a); err != nil {
			return err
		}
	}
	srv.PrimeEncodeCache()
	// endpoint last: its presence says the server is ready.
	for _, f := range []struct{ name, content string }{{"ca.pem", string(caPEM)}, {"token", token}, {"endpoint", srv.Addr()}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.content), 0o600); err != nil {
			return err
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nil
}
