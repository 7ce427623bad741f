package nodeimage

import (
	"bufio"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/tt"
)

// The repository's pins parse, pin every package build/packages.txt asks
// for, and put the tools where the node agent's requirements table looks.
func TestRepositoryPins(t *testing.T) {
	p, err := ReadPins("../../" + PinsFile)
	require.NoError(t, err)
	f, err := os.Open("../../build/packages.txt")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		_, ok := p.Debs[name]
		assert.True(t, ok, "build/packages.txt asks for %s, which %s does not pin", name, PinsFile)
	}
	smi, ok := p.Tool("tt-smi")
	require.True(t, ok)
	assert.Equal(t, nodeagent.DefaultSMISource, smi.Path)
	flash, ok := p.Tool("tt-flash")
	require.True(t, ok)
	assert.Equal(t, nodeagent.TTFlashPath, flash.Path)
	// Helpers run the agent by the absolute path the image puts it at.
	assert.Equal(t, tt.AgentPath, AgentPath)
	first, _, _ := strings.Cut(nodeagent.ImagePATH, ":")
	assert.Equal(t, path.Dir(flash.Path), first, "tt-flash's virtualenv comes first on the image's PATH")
}

// Every field of every record is validated: a pin reaches a shell, a URL
// fetch and a file path.
func TestPinsRefuseBadRecords(t *testing.T) {
	good := map[string]string{
		"epoch":    "epoch 1796515200",
		"suite":    "suite bookworm",
		"snapshot": "snapshot 20261206T022400Z",
		"deb":      "deb python3 3.11.2-1+b1 amd64",
		"tool":     "tool tt-smi 6.2.1 /usr/local/bin/tt-smi https://example.com/tt-smi unverified",
	}
	parse := func(replace, with string) error {
		var lines []string
		for _, k := range []string{"epoch", "suite", "snapshot", "deb", "tool"} {
			if k == replace {
				if with != "" {
					lines = append(lines, with)
				}
				continue
			}
			lines = append(lines, good[k])
		}
		_, err := ParsePins(strings.NewReader(strings.Join(lines, "\n")))
		return err
	}
	require.NoError(t, parse("", ""))
	bad := map[string][]string{
		"epoch":    {"", "epoch 0", "epoch -1", "epoch 1e9", "epoch 1 2"},
		"suite":    {"", "suite Bookworm", "suite book/worm", "suite bookworm;rm"},
		"snapshot": {"", "snapshot 2026-12-06", "snapshot 20261206T022400"},
		"deb": {"deb python3 3.11 arm64", "deb Python3 3.11 amd64", "deb python3 3.11;x amd64", "deb python3 $(id) amd64",
			"deb python3 3.11"},
		"tool": {
			"tool tt-smi 6.2 /usr/local/bin/tt-smi https://e.com/x unverified",
			"tool tt-smi 6.2.1 usr/local/bin/tt-smi https://e.com/x unverified",
			"tool tt-smi 6.2.1 /usr/local/../bin/tt-smi https://e.com/x unverified",
			"tool tt-smi 6.2.1 /usr/local/bin/tt-smi http://e.com/x unverified",
			"tool tt-smi 6.2.1 /usr/local/bin/tt-smi https://e.com/$(id) unverified",
			"tool tt-smi 6.2.1 /usr/local/bin/tt-smi https://e.com/x sha256:" + strings.Repeat("a", 64),
			"tool tt-smi 6.2.1 /usr/local/bin/tt-smi https://e.com/x " + strings.Repeat("A", 64),
			"tool tt-smi 6.2.1 /usr/local/bin/tt-smi https://e.com/x",
			"tool TT 6.2.1 /usr/local/bin/tt-smi https://e.com/x unverified",
		},
	}
	for k, lines := range bad {
		for _, l := range lines {
			assert.Error(t, parse(k, l), "%q was accepted", l)
		}
	}
	_, err := ParsePins(strings.NewReader(strings.Join([]string{good["epoch"], good["suite"], good["snapshot"], good["deb"],
		good["deb"]}, "\n")))
	assert.ErrorContains(t, err, "twice")
	_, err = ParsePins(strings.NewReader(good["epoch"] + "\nfrom debian\n"))
	assert.ErrorContains(t, err, "unknown record")
}
