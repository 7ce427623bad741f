//go:build e2e

// Package clustertest proves ateapi.Dial's real paths against the sim's
// ate-fleet scenario: port-forward to svc/api through the Kubernetes API,
// the CA from the live ClusterTrustBundles, a TokenRequest token checked by
// TokenReview; and the --ate-endpoint/--ate-ca-file path. It is test-only.
package clustertest

import (
	"testing"

	"github.com/rollbook/rollbook/internal/simtest"
)

func TestMain(m *testing.M) {
	simtest.Main(m, simtest.Options{Nodes: 3, Scenario: "ate-fleet"})
}
