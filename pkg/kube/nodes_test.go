package kube

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/rollbook/rollbook/internal/httpcount"
	"github.com/rollbook/rollbook/internal/simtest"
)

// A node page after the first holds as many nodes as the first page's
// weigh nodePageBytes: light nodes (no records) in fewer round trips, heavy
// ones no more than nodeListPage, and never an unbounded page.
func TestNextNodePageFollowsTheFirstPagesWeight(t *testing.T) {
	page := func(n, annotationBytes int) []metav1.PartialObjectMetadata {
		items := make([]metav1.PartialObjectMetadata, n)
		for i := range items {
			items[i].Name = "kwok-node-" + strings.Repeat("0", 4)
			items[i].Annotations = map[string]string{"rollbook.dev/tt-probe": strings.Repeat("x", annotationBytes)}
		}
		return items
	}
	light, heavy, huge := nextNodePage(page(1000, 100)), nextNodePage(page(1000, 3600)), nextNodePage(page(1000, 1<<20))
	if light <= nodeListPage || light > 10*nodeListPage {
		t.Errorf("next page after light nodes: %d, want more than %d and at most %d", light, nodeListPage, 10*nodeListPage)
	}
	if heavy < nodeListPage || heavy > 2*nodeListPage {
		t.Errorf("next page after nodes carrying records: %d, want about %d", heavy, nodeListPage)
	}
	if huge != nodeListPage || nextNodePage(nil) != nodeListPage {
		t.Errorf("next page after huge nodes %d, after none %d: want %d", huge, nextNodePage(nil), nodeListPage)
	}
}

// The metadata list reads every node across pages, and after a light
// first page asks for the rest at once.
func TestListNodeMetasSizesItsPagesByTheFirst(t *testing.T) {
	c := simtest.Get(t)
	ctx := simtest.Context(t, time.Minute)
	var lists atomic.Int32
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return httpcount.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			lists.Add(1)
			return rt.RoundTrip(r)
		})
	})
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metas, err := listNodeMetas(ctx, md, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var got, names []string
	for _, m := range metas {
		got = append(got, m.Name)
		if m.ManagedFields != nil {
			t.Errorf("node %s kept its managedFields", m.Name)
		}
	}
	for _, n := range want.Items {
		names = append(names, n.Name)
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) || len(names) < 3 {
		t.Fatalf("listed %v, want %v", got, names)
	}
	if n := lists.Load(); n != 2 {
		t.Errorf("%d list requests for %d nodes from a first page of 1, want 2 (the rest in the second)", n, len(names))
	}
}
