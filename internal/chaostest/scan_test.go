package chaostest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The scanner must find what it looks for, or its zero hits prove nothing.
func TestScanFindsPlantedSecrets(t *testing.T) {
	key := "-----BEGIN EC PRIVATE KEY-----\n" + strings.Repeat("A", 20) + strings.Repeat("k", 44) + "\n" +
		strings.Repeat("Q", 64) + "\n-----END EC PRIVATE KEY-----\n"
	kc := clientcmdapi.NewConfig()
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientKeyData: []byte(key), Token: "s3cr3t-static-token-value"}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	sec, err := KubeconfigSecrets(path)
	if err != nil {
		t.Fatal(err)
	}
	token := "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJhdWQiOlsiYXRlIl0sInN1YiI6ImF0ZS1jbGllbnQifQ.c2lnbmF0dXJlc2lnbmF0dXJlc2ln"
	for _, c := range []struct{ text, want string }{
		{"Authorization: Bearer " + token, "bearer token"},
		{"fetching https://user:hunter2@example.com/fw.tar", "credentials in a URL"},
		{"oops " + strings.Repeat("Q", 64), "client key of admin"},
		{"token s3cr3t-static-token-value", "token of admin"},
		{`"--bundle-url","https://b.s3.amazonaws.com/fw.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=0badc0de"`,
			"presigned URL's query"},
		{"GET https://acct.blob.core.windows.net/fw/fw.tar?sv=2022-11-02&sig=abc%2Bdef", "presigned URL's query"},
		{"https://storage.googleapis.com/b/fw.tar?X-Goog-Credential=sa%40p&x=1", "presigned URL's query"},
	} {
		var s Scan
		s.Text("planted", c.text, sec)
		if len(s.Hits) != 1 || !strings.Contains(s.Hits[0], c.want) {
			t.Errorf("%q: hits %v, want one naming %q", c.text, s.Hits, c.want)
		}
	}
	var s Scan
	s.Text("clean", "fetching https://example.com/fw.tar as user admin; node kwok-node-0 cordoned; "+
		"downloaded https://b.example/fw.tar?REDACTED; ?page=2&limit=10", sec)
	if len(s.Hits) != 0 {
		t.Errorf("false positives: %v", s.Hits)
	}
	_ = os.Remove(path)
}
