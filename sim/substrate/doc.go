// Package substrate runs the simulated Agent Substrate inside the sim
// process: the fake control API (internal/fakesubstrate) reachable through
// `kubectl -n ate-system port-forward svc/api` (a kwok ClusterPortForward
// sends the api pod's container port to it), its CA published as a
// ClusterTrustBundle, bearer tokens checked with the API server's
// TokenReview, the WorkerPool CRD with a pool controller (WorkerPool →
// Deployment), a worker syncer (worker pods → Workers, with the eviction
// window), a traffic simulator, and ate-setup-like helpers (versioned atelet
// DaemonSets, node version labels).
//
// Names and labels follow a real install (ate-setup's manifests and the
// upgrade runbook), so rollbook's runbooks meet the same objects.
package substrate

// Names, labels and defaults shared with the real install.
const (
	Namespace   = "ate-system"
	ServiceName = "api"
	// APIDeployment is the API server's Deployment, named as ate-setup's
	// `deploy apiserver` names it (ate-api-server.yaml); its Service is api.
	APIDeployment = "ate-api-server"
	// ControllerName is ate-controller's Deployment (ate-controller.yaml).
	ControllerName = "ate-controller"
	ClientSA       = "ate-client"
	Audience       = "api.ate-system.svc"
	ServerName     = "api.ate-system.svc"
	ClientUsername = "system:serviceaccount:" + Namespace + ":" + ClientSA

	// VersionLabel is on nodes, atelet DaemonSets and their pods, and is the
	// pool pin key in spec.template.nodeSelector.
	VersionLabel = "ate.dev/substrate-version"
	// PoolLabel is on every rendered Deployment and its worker pods.
	PoolLabel = "ate.dev/worker-pool"
	// AppLabel=atelet marks atelet DaemonSets and pods.
	AppLabel  = "app"
	AteletApp = "atelet"

	TrustBundleLabelKey   = "podcert.ate.dev/canarying"
	TrustBundleLabelValue = "live"
	TrustBundleSigner     = "servicedns.podcert.ate.dev/identity"

	// APIContainerPort is the api pod's container port named "grpc"; the
	// Service maps 443 to it and kwok forwards it to the fake server.
	APIContainerPort = 8443
)
