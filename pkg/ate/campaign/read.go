package campaign

import (
	"context"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/rollbook/rollbook/pkg/ate/fleet"
	"github.com/rollbook/rollbook/pkg/ateapi"
	"github.com/rollbook/rollbook/pkg/kube"
)

// APIReader is the part of the substrate client status and preflight read.
type APIReader interface {
	fleet.Inventorier
	Capabilities() ateapi.Capabilities
}

// APIView is what the control API said, or why it could not be asked.
type APIView struct {
	Caps *ateapi.Capabilities
	Inv  *ateapi.Inventory
	Err  error
}

// ReadAPI asks api (nil when dialing failed with dialErr) for its
// capabilities and inventory. A failure is kept in the view, not returned:
// status and preflight still show the Kubernetes facts.
func ReadAPI(ctx context.Context, api APIReader, dialErr error) APIView {
	if api == nil {
		return APIView{Err: dialErr}
	}
	caps := api.Capabilities()
	inv, err := api.Inventory(ctx)
	return APIView{Caps: &caps, Inv: inv, Err: err}
}

// ReadStatus says where the roll stands, from the cluster (nodes read as
// metadata through md) and the view of the control API that readAPI returns
// (nil: the API is not asked). The two are independent, so they are read
// together. gke is where the kube
// context says the cluster is, for the commands status prints.
func ReadStatus(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, md metadata.Interface,
	readAPI func(context.Context) APIView, gke fleet.GKELocation) (*Status, error) {
	var c *fleet.Cluster
	var v APIView
	var notReady map[string]string
	var g errgroup.Group
	g.Go(func() (err error) {
		c, err = fleet.ObserveClusterMeta(ctx, cs, dyn, md)
		return err
	})
	if readAPI != nil {
		// Which nodes' workers cannot serve: only the status column, as
		// the metadata list carries no conditions. Without the API there
		// are no workers to mark, and status stays one node list.
		g.Go(func() (err error) {
			notReady, err = kube.NodesNotReady(ctx, cs, "")
			return err
		})
		g.Go(func() error {
			v = readAPI(ctx)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	c.GKE = gke
	s, err := ObserveStatus(ctx, cs, c, v.Inv, notReady)
	if err != nil {
		return nil, err
	}
	s.Capabilities = v.Caps
	if v.Err != nil {
		s.APIError = v.Err.Error()
	}
	return s, nil
}

// ReadPreflight runs the preflight checks on the cluster as it is now.
func ReadPreflight(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, v APIView,
	o PreflightOptions) ([]fleet.Check, error) {
	c, err := fleet.ObserveCluster(ctx, cs, dyn)
	if err != nil {
		return nil, err
	}
	if o.Deployments, err = fleet.Deployments(ctx, cs); err != nil {
		return nil, err
	}
	if o.Deployments.Nodes, err = c.FullNodes(ctx, cs); err != nil {
		return nil, err
	}
	return Preflight(ctx, cs, c, v.Caps, v.Err, o), nil
}
