//go:build e2e

// Package notify tests --notify-url on the sim: a local webhook receiver
// gets each event kind of real rolls, in order, with no credential.
package notify

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/internal/simtest"
	"github.com/rollbook/rollbook/internal/tttest"
	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/journal"
	"github.com/rollbook/rollbook/pkg/tt"
)

// With 5 nodes the awkward fleet has plain kwok-node-0 and -1, then DKMS,
// skip-labelled and, last, a node whose host process holds the device.
func TestMain(m *testing.M) { simtest.Main(m, simtest.Options{Nodes: 5, Scenario: "tt-fleet-awkward"}) }

const (
	newKMD   = "2.8.0"
	stubborn = "kwok-node-4"
	// secret stands for the part of a webhook URL that is its credential.
	secret = "T0000/B0000/XXXXSECRETXXXX"
)

type event struct {
	Text, Event, Plugin, Run, Context, Node, Outcome, Reason string
	Done, Total                                              int
}

type receiver struct {
	mu     sync.Mutex
	events []event
	raw    []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var e event
	if req.Method != http.MethodPost || req.URL.Path != "/services/"+secret || json.Unmarshal(b, &e) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.events, r.raw = append(r.events, e), append(r.raw, string(b))
	r.mu.Unlock()
}

func (r *receiver) take() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

// Each event kind of the roll reaches the webhook when it happens: a
// pause, the resume after it with the node done, a node blocked by a
// host process, a node that fails its verification. Each carries
// Slack's text, the run and the node; none carries the webhook's secret
// path, a kubeconfig credential or a presigned query, and neither the
// Lease nor the history keeps the URL.
func TestWebhookGetsEveryEventKind(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, 8*time.Minute)
	rec := &receiver{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	hook := srv.URL + "/services/" + secret
	roll := func(node string, extra ...string) (string, int) {
		return tttest.Run(t, ctx, append([]string{"upgrade", "kmd", "--version", newKMD, "--nodes", node, "--notify-url", hook},
			extra...)...)
	}
	expect := func(step string, kinds ...string) []event {
		t.Helper()
		got := rec.take()
		var names []string
		for _, e := range got {
			names = append(names, e.Event)
		}
		if strings.Join(names, ",") != strings.Join(kinds, ",") {
			t.Errorf("%s: the webhook got %v, want %v", step, names, kinds)
		}
		for _, e := range got {
			if e.Plugin != "tt" || e.Run == "" || e.Context != "rollbook-sim" || !strings.Contains(e.Text, e.Run) {
				t.Errorf("%s: %s lacks its plugin, run, context or text: %+v", step, e.Event, e)
			}
		}
		return got
	}

	if _, code := tttest.Run(t, ctx, "pause", "--reason", "change freeze"); code != 0 {
		t.Fatalf("pause: exit %d", code)
	}
	if _, code := roll("kwok-node-0"); code != 0 {
		t.Fatalf("a paused roll: exit %d, want 0", code)
	}
	if ev := expect("paused roll", "paused"); len(ev) == 1 && !strings.Contains(ev[0].Reason, "change freeze") {
		t.Errorf("the paused event does not say why: %+v", ev[0])
	}
	if _, code := tttest.Run(t, ctx, "resume"); code != 0 {
		t.Fatalf("resume: exit %d", code)
	}
	if _, code := roll("kwok-node-0"); code != 0 {
		t.Fatalf("the resumed roll: exit %d", code)
	}
	if ev := expect("resumed roll", "resumed", "done"); len(ev) == 2 && (ev[1].Done != 1 || ev[1].Total != 1) {
		t.Errorf("the done event: %+v, want 1 of 1", ev[1])
	}

	if _, code := roll(stubborn); code != cli.ExitBlocked {
		t.Fatalf("the stubborn node: exit %d, want 3", code)
	}
	if ev := expect("blocked node", "node_blocked"); len(ev) == 1 && (ev[0].Node != "node/"+stubborn || !strings.Contains(ev[0].Reason, "7777")) {
		t.Errorf("the blocked event does not name the node and the holder: %+v", ev[0])
	}

	if err := fakehost.FailProbe(tttest.HostRoot(t, "kwok-node-1"), 0, newKMD); err != nil {
		t.Fatal(err)
	}
	if _, code := roll("kwok-node-1"); code != cli.ExitFailed {
		t.Fatalf("the node failing its probe: exit %d, want 1", code)
	}
	if ev := expect("failed node", "node_failed"); len(ev) == 1 && ev[0].Node != "node/kwok-node-1" {
		t.Errorf("the failed event does not name the node: %+v", ev[0])
	}

	for _, b := range rec.raw {
		for _, leak := range []string{secret, "token", "password", "BEGIN", "client-key"} {
			if strings.Contains(b, leak) {
				t.Errorf("a posted body contains %q: %s", leak, b)
			}
		}
	}
	l, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, tt.LockName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, journal.Name("tt"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for where, v := range map[string]any{"the Lease": l.Annotations, "the history": cm.Data} {
		if b, _ := json.Marshal(v); strings.Contains(string(b), secret) {
			t.Errorf("%s keeps the webhook's secret path", where)
		}
	}
}
