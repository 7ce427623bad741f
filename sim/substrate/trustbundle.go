package substrate

import (
	"context"
	"fmt"
	"strings"

	certv1 "k8s.io/api/certificates/v1"
	certv1beta1 "k8s.io/api/certificates/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// trustBundleName is the CTB's name: a bundle linked to a signer must be
// named "<signer with / replaced by :>:<suffix>" (ValidateClusterTrustBundleName).
func trustBundleName(signer, suffix string) string {
	return strings.ReplaceAll(signer, "/", ":") + ":" + suffix
}

// publishTrustBundle creates or updates the ClusterTrustBundle carrying
// caPEM through whichever version the API server serves (v1 from 1.37,
// v1beta1 when only the beta is enabled). It returns the version used.
func publishTrustBundle(ctx context.Context, cs kubernetes.Interface, caPEM []byte) (string, error) {
	meta := metav1.ObjectMeta{
		Name:   trustBundleName(TrustBundleSigner, "sim"),
		Labels: map[string]string{TrustBundleLabelKey: TrustBundleLabelValue},
	}
	version, err := servedTrustBundleVersion(cs)
	if err != nil {
		return "", err
	}
	switch version {
	case "v1":
		c := cs.CertificatesV1().ClusterTrustBundles()
		want := &certv1.ClusterTrustBundle{ObjectMeta: meta,
			Spec: certv1.ClusterTrustBundleSpec{SignerName: TrustBundleSigner, TrustBundle: string(caPEM)}}
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *certv1.ClusterTrustBundle
			if cur, err = c.Get(ctx, meta.Name, metav1.GetOptions{}); err == nil {
				cur.Labels, cur.Spec.TrustBundle = meta.Labels, want.Spec.TrustBundle
				_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
			}
		}
	default:
		c := cs.CertificatesV1beta1().ClusterTrustBundles()
		want := &certv1beta1.ClusterTrustBundle{ObjectMeta: meta,
			Spec: certv1beta1.ClusterTrustBundleSpec{SignerName: TrustBundleSigner, TrustBundle: string(caPEM)}}
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *certv1beta1.ClusterTrustBundle
			if cur, err = c.Get(ctx, meta.Name, metav1.GetOptions{}); err == nil {
				cur.Labels, cur.Spec.TrustBundle = meta.Labels, want.Spec.TrustBundle
				_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("ClusterTrustBundle %s (%s): %w", meta.Name, version, err)
	}
	return version, nil
}

func servedTrustBundleVersion(cs kubernetes.Interface) (string, error) {
	for _, v := range []string{"v1", "v1beta1"} {
		rl, err := cs.Discovery().ServerResourcesForGroupVersion("certificates.k8s.io/" + v)
		if err != nil {
			continue
		}
		for _, r := range rl.APIResources {
			if r.Name == "clustertrustbundles" {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("the API server serves no ClusterTrustBundle API (certificates.k8s.io v1 or v1beta1)")
}
