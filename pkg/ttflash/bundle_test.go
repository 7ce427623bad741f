package ttflash_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/ttflash"
)

func TestReadBundle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.fwbundle")
	if err := fakehost.WriteBundleFor(path, "19.9.0", "n150", "p150"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := ttflash.ReadBundle(f)
	if err != nil {
		t.Fatal(err)
	}
	if b.Version != "19.9.0.0" || strings.Join(b.Boards, ",") != "NEBULA_X1,P150A-1" {
		t.Fatalf("bundle %+v", b)
	}
	for card, want := range map[string][2]bool{
		"n150": {true, true}, "p150a": {true, true}, "p150": {true, true}, "n300": {false, true},
		"galaxy-wormhole": {false, true}, "unknown": {false, false},
	} {
		if has, known := b.HasImageFor(card); has != want[0] || known != want[1] {
			t.Errorf("HasImageFor(%s) = %v, %v; want %v", card, has, known, want)
		}
	}
}

func TestReadBundleRefusesWhatTTFlashRefuses(t *testing.T) {
	tarOf := func(files map[string]string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for name, body := range files {
			_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))})
			_, _ = tw.Write([]byte(body))
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	for name, in := range map[string][]byte{
		"not a tar":         []byte("<html>404</html>"),
		"no manifest":       tarOf(map[string]string{"./NEBULA_X1/image.bin": "x"}),
		"no schema version": tarOf(map[string]string{"./manifest.json": `{"bundle_version":{"fwId":19}}`}),
		"schema 2 below 19": tarOf(map[string]string{"./manifest.json": `{"version":"2.0.0","bundle_version":{"fwId":18}}`}),
		"unknown schema":    tarOf(map[string]string{"./manifest.json": `{"version":"3.0.0","bundle_version":{"fwId":19}}`}),
	} {
		if b, err := ttflash.ReadBundle(bytes.NewReader(in)); err == nil {
			t.Errorf("%s: read as %+v", name, b)
		}
	}
}
