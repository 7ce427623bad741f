package ateapi

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The API server's serving CA is published as ClusterTrustBundles.
const (
	TrustBundleLabel  = "podcert.ate.dev/canarying=live"
	TrustBundleSigner = "servicedns.podcert.ate.dev/identity"
)

// ClusterTrustBundle is GA (v1) from Kubernetes 1.37; 1.33–1.36 serve only
// v1beta1 when enabled. Newest first.
var trustBundleVersions = []string{"v1", "v1beta1"}

// fetchTrustBundle reads the live CTBs through whichever version is served.
func fetchTrustBundle(ctx context.Context, cfg *rest.Config) ([]byte, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("ateapi: dynamic client: %w", err)
	}
	items, err := listTrustBundles(func(version string) (*unstructured.UnstructuredList, error) {
		gvr := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: version, Resource: "clustertrustbundles"}
		return dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: TrustBundleLabel})
	})
	if err != nil {
		return nil, err
	}
	return SelectTrustBundles(items, TrustBundleSigner)
}

// listTrustBundles lists the live CTBs at the newest version served. A
// version not served answers the list itself with NotFound, so no
// discovery request is spent on finding it (one request fewer per run).
func listTrustBundles(list func(version string) (*unstructured.UnstructuredList, error)) ([]unstructured.Unstructured, error) {
	for _, v := range trustBundleVersions {
		l, err := list(v)
		if apierrors.IsNotFound(err) {
			continue // not served at this version; try the next
		}
		if err != nil {
			return nil, fmt.Errorf("ateapi: list ClusterTrustBundles (%s): %w", v, err)
		}
		return l.Items, nil
	}
	return nil, fmt.Errorf("ateapi: the cluster serves no ClusterTrustBundle API (certificates.k8s.io %v); pass "+
		"--ate-ca-file", trustBundleVersions)
}

// SelectTrustBundles concatenates spec.trustBundle of the bundles for
// signer, in name order, keeping only PEM certificates that parse. It fails
// when none remain, so a caller never ends up trusting nothing (or all).
func SelectTrustBundles(items []unstructured.Unstructured, signer string) ([]byte, error) {
	sorted := append([]unstructured.Unstructured(nil), items...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].GetName() < sorted[j].GetName() })
	var out bytes.Buffer
	n := 0
	for _, it := range sorted {
		if s, _, _ := unstructured.NestedString(it.Object, "spec", "signerName"); s != signer {
			continue
		}
		bundle, _, _ := unstructured.NestedString(it.Object, "spec", "trustBundle")
		rest := []byte(bundle)
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				continue
			}
			_ = pem.Encode(&out, block)
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("ateapi: no ClusterTrustBundle labelled %s with signer %s holds a certificate; pass "+
			"--ate-ca-file", TrustBundleLabel, signer)
	}
	return out.Bytes(), nil
}
