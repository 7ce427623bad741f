package install_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rollbook/rollbook/deploy"
	"github.com/rollbook/rollbook/pkg/install"
)

// The shipped policy file is the renderer's: make docs writes it.
func TestShippedAdmissionIsGenerated(t *testing.T) {
	want, err := install.ShippedAdmission()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "deploy", deploy.HelperPolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("deploy/%s is not what pkg/install renders: run make docs", deploy.HelperPolicyFile)
	}
}
