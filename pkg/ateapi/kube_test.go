package ateapi

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rollbook/rollbook/internal/fakesubstrate"
)

func ctb(name, signer, bundle string) unstructured.Unstructured {
	return unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"signerName": signer, "trustBundle": bundle},
	}}
}

func TestSelectTrustBundles(t *testing.T) {
	a, _ := fakesubstrate.NewPKI()
	b, _ := fakesubstrate.NewPKI()
	other, _ := fakesubstrate.NewPKI()
	items := []unstructured.Unstructured{
		ctb("z-live", TrustBundleSigner, string(b.CAPEM)),
		ctb("other-signer", "example.com/other", string(other.CAPEM)),
		ctb("a-live", TrustBundleSigner, "junk before\n"+string(a.CAPEM)+"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END "+
			"CERTIFICATE-----\n"),
	}
	got, err := SelectTrustBundles(items, TrustBundleSigner)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(a.CAPEM) + string(b.CAPEM); string(got) != want {
		t.Errorf("bundle = %q, want a then b", got)
	}
	if strings.Contains(string(got), string(other.CAPEM)) {
		t.Error("took another signer's CA")
	}
	if _, err := SelectTrustBundles(items[1:2], TrustBundleSigner); err == nil || !strings.Contains(err.Error(), "--ate-ca-file") {
		t.Errorf("no match = %v", err)
	}
}

// The newest served version is listed; one not served answers NotFound
// (no discovery request); any other error stops at once.
func TestListTrustBundlesAtTheNewestServedVersion(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}, "")
	for _, tc := range []struct {
		served  []string
		other   error // the answer for a version served but failing
		want    string
		wantErr string
	}{
		{served: []string{"v1beta1"}, want: "v1beta1"},
		{served: []string{"v1beta1", "v1"}, want: "v1"},
		{served: nil, wantErr: "--ate-ca-file"},
		{served: []string{"v1"}, other: errors.New("forbidden"), wantErr: "forbidden"},
	} {
		var asked []string
		items, err := listTrustBundles(func(v string) (*unstructured.UnstructuredList, error) {
			asked = append(asked, v)
			if !slices.Contains(tc.served, v) {
				return nil, notFound
			}
			if tc.other != nil {
				return nil, tc.other
			}
			return &unstructured.UnstructuredList{Items: []unstructured.Unstructured{ctb("at-"+v, TrustBundleSigner, "")}}, nil
		})
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("served %v: err %v, want one naming %q", tc.served, err, tc.wantErr)
			}
		case err != nil || len(items) != 1 || items[0].GetName() != "at-"+tc.want:
			t.Errorf("served %v: got %v, %v; want the list at %s (asked %v)", tc.served, items, err, tc.want, asked)
		}
	}
}

func pod(name string, phase corev1.PodPhase, ready bool, age time.Duration) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ate-system", CreationTimestamp: metav1.NewTime(time.Now().Add(-age))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "api", Ports: []corev1.ContainerPort{
			{Name: "metrics", ContainerPort: 9090}, {Name: "grpc", ContainerPort: 8443}}}}},
		Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func TestChoosePod(t *testing.T) {
	deleting := pod("deleting", corev1.PodRunning, true, time.Second)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	pods := []corev1.Pod{
		pod("old", corev1.PodRunning, true, time.Hour),
		pod("pending", corev1.PodPending, false, 0),
		pod("notready", corev1.PodRunning, false, time.Minute),
		deleting,
		pod("new", corev1.PodRunning, true, 2*time.Minute),
	}
	p, err := ChoosePod(pods)
	if err != nil || p.Name != "new" {
		t.Fatalf("chose %v, %v; want the newest Ready pod", p, err)
	}
	if _, err := ChoosePod(pods[1:4]); err == nil {
		t.Error("chose a pod that is not Running+Ready")
	}
}

func TestResolveTargetPort(t *testing.T) {
	p := pod("api", corev1.PodRunning, true, 0)
	for _, tc := range []struct {
		sp   corev1.ServicePort
		want int32
		err  bool
	}{
		{corev1.ServicePort{Port: 443, TargetPort: intstr.FromString("grpc")}, 8443, false},
		{corev1.ServicePort{Port: 443, TargetPort: intstr.FromInt32(9443)}, 9443, false},
		{corev1.ServicePort{Port: 443}, 443, false},
		{corev1.ServicePort{Port: 443, TargetPort: intstr.FromString("nope")}, 0, true},
	} {
		got, err := ResolveTargetPort(tc.sp, &p)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%v: got %d, %v", tc.sp.TargetPort, got, err)
		}
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "metrics", Port: 9090}, {Name: "grpc", Port: 443}}}}
	if sp, err := APIServicePort(svc); err != nil || sp.Name != "grpc" {
		t.Errorf("service port = %v, %v", sp, err)
	}
}

func TestTokenRequestSource(t *testing.T) {
	cs := fake.NewClientset()
	var calls int
	var gotAud []string
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		calls++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest)
		gotAud = tr.Spec.Audiences
		tr.Status = authenticationv1.TokenRequestStatus{Token: "minted", ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}
		return true, tr, nil
	})
	src := tokenRequestSource(cs, "ate-system", "ate-client", DefaultAudience)
	for range 3 {
		tok, err := src(context.Background())
		if err != nil || tok != "minted" {
			t.Fatalf("token = %q, %v", tok, err)
		}
	}
	if calls != 1 || len(gotAud) != 1 || gotAud[0] != DefaultAudience {
		t.Errorf("calls=%d audiences=%v; want one request for %s", calls, gotAud, DefaultAudience)
	}
	now := time.Now()
	if needsRefresh(now, now.Add(-time.Minute), now.Add(time.Hour)) || !needsRefresh(now, now.Add(-50*time.Minute),
		now.Add(10*time.Minute)) {
		t.Error("needsRefresh is not at 80% of the lifetime")
	}
}
