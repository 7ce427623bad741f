package chaostest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// jwt matches a signed JSON Web Token: every ServiceAccount token the
// plugins mint (TokenRequest) is one, so no minted bearer token can hide
// behind a value the test never saw.
var jwt = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}`)

// urlCreds matches credentials put in a URL (scheme://user:password@host).
var urlCreds = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@"']+:[^/\s@"']+@`)

// presigned matches the signing parameters of a presigned URL's query (S3,
// GCS, Azure SAS, CloudFront, a bare token): whoever holds them can fetch
// the object. The redacted form ("?REDACTED") does not match.
var presigned = regexp.MustCompile(`(?i)[?&](X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|X-Goog-Signature|` +
	`X-Goog-Credential|sig|Signature|Key-Pair-Id|Policy|token|access_token)=[^&\s"'\\]+`)

// Secrets are what must never appear in output or in cluster objects.
type Secrets struct {
	// Literals are exact secret values (kubeconfig keys, tokens).
	Literals map[string]string // value → what it is
}

// KubeconfigSecrets returns the credentials of the kubeconfig at path: the
// client key (as PEM lines and as the base64 a kubeconfig stores), a
// bearer token or a password. The client certificate is public (its lines
// also match the CA's, which every namespace's kube-root-ca.crt holds).
func KubeconfigSecrets(path string) (Secrets, error) {
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return Secrets{}, err
	}
	s := Secrets{Literals: map[string]string{}}
	for name, a := range kc.AuthInfos {
		if len(a.ClientKeyData) > 0 {
			for _, l := range pemBody(a.ClientKeyData) {
				s.Literals[l] = "client key of " + name
			}
			s.Literals[base64.StdEncoding.EncodeToString(a.ClientKeyData)[40:100]] = "client key of " + name + " (base64)"
		}
		if a.Token != "" {
			s.Literals[a.Token] = "token of " + name
		}
		if a.Password != "" {
			s.Literals[a.Password] = "password of " + name
		}
	}
	return s, nil
}

// pemBody returns the full 64-character lines of a PEM block: long enough
// to be unique, and what a leak would show.
func pemBody(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if len(l) == 64 && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// Scan counts what it read and lists every secret it found, naming where.
type Scan struct {
	Texts, Bytes               int
	Events, Leases, ConfigMaps int
	Pods                       int
	Literals                   int // kubeconfig secrets looked for
	Hits                       []string
}

// Text scans one text from where.
func (s *Scan) Text(where, text string, sec Secrets) {
	s.Texts++
	s.Bytes += len(text)
	s.Literals = len(sec.Literals)
	if m := jwt.FindString(text); m != "" {
		s.Hits = append(s.Hits, fmt.Sprintf("%s: a bearer token (%s…)", where, m[:12]))
	}
	if m := urlCreds.FindString(text); m != "" {
		s.Hits = append(s.Hits, fmt.Sprintf("%s: credentials in a URL (%s…)", where, m[:strings.Index(m, "://")+3]))
	}
	if m := presigned.FindString(text); m != "" {
		s.Hits = append(s.Hits, fmt.Sprintf("%s: a presigned URL's query (%s…)", where, m[:strings.Index(m, "=")+1]))
	}
	for v, what := range sec.Literals {
		if strings.Contains(text, v) {
			s.Hits = append(s.Hits, fmt.Sprintf("%s: %s", where, what))
		}
	}
}

// Cluster scans every Event, Lease, ConfigMap and Pod in the cluster (a
// pod's command and env are readable by whoever may get pods).
func (s *Scan) Cluster(ctx context.Context, cs kubernetes.Interface, sec Secrets) error {
	evs, err := cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, e := range evs.Items {
		b, _ := json.Marshal(e)
		s.Events++
		s.Text("event "+e.Namespace+"/"+e.Name, string(b), sec)
	}
	leases, err := cs.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, l := range leases.Items {
		b, _ := json.Marshal(l)
		s.Leases++
		s.Text("lease "+l.Namespace+"/"+l.Name, string(b), sec)
	}
	cms, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, cm := range cms.Items {
		b, _ := json.Marshal(cm)
		s.ConfigMaps++
		s.Text("configmap "+cm.Namespace+"/"+cm.Name, string(b), sec)
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		b, _ := json.Marshal(p.Spec)
		s.Pods++
		s.Text("pod "+p.Namespace+"/"+p.Name, string(b), sec)
	}
	return nil
}

func (s *Scan) String() string {
	return fmt.Sprintf("%d texts (%d bytes): %d events, %d leases, %d configmaps, %d pod specs, the rest CLI output; "+
		"checked for bearer tokens (JWT), credentials in URLs, presigned URL queries and %d kubeconfig secrets: %d hit(s)",
		s.Texts, s.Bytes, s.Events, s.Leases, s.ConfigMaps, s.Pods, s.Literals, len(s.Hits))
}

// ExpectNoSecrets scans everything the package's runs printed (outs) and
// every Event, Lease, ConfigMap and Pod in the cluster for the kubeconfig's
// credentials, fails t on each hit, and returns the scan for its figures.
func ExpectNoSecrets(t *testing.T, ctx context.Context, kubeconfig string, cs kubernetes.Interface, outs []string) *Scan {
	t.Helper()
	sec, err := KubeconfigSecrets(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) == 0 {
		t.Fatal("no output recorded: run the whole package")
	}
	s := &Scan{}
	for i, o := range outs {
		s.Text(fmt.Sprintf("output of run %d", i+1), o, sec)
	}
	if err := s.Cluster(ctx, cs, sec); err != nil {
		t.Fatal(err)
	}
	for _, h := range s.Hits {
		t.Errorf("secret found: %s", h)
	}
	return s
}
