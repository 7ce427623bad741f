package lease

import (
	"strings"
	"testing"
)

func TestRedactArgsDropsURLQueriesAndCredentials(t *testing.T) {
	in := []string{"kubectl-tt", "upgrade", "firmware", "--bundle-url", "https://b.example/fw.tar?X-Amz-Signature=s3cr3t",
		"--bundle-url=https://u:pw@b.example/fw.tar?sig=s3cr3t", "--token", "s3cr3t", "--git-url=https://g.example/k.git"}
	got := strings.Join(RedactArgs(in), " ")
	if strings.Contains(got, "s3cr3t") || strings.Contains(got, "pw@") {
		t.Fatalf("a secret survived: %s", got)
	}
	for _, want := range []string{"--bundle-url https://b.example/fw.tar?REDACTED", "--bundle-url=https://b.example/fw.tar?REDACTED",
		"--token REDACTED", "--git-url=https://g.example/k.git"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q missing from %s", want, got)
		}
	}
}
