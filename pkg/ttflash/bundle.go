package ttflash

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Bundle is what tt-flash reads from a .fwbundle before it flashes: the
// manifest's firmware version and the boards it has an image for.
type Bundle struct {
	// Version is the manifest's bundle_version, four parts as printed
	// (fwId.releaseId.patch.debug).
	Version string
	// Boards are the directories holding an image.bin (tt-flash's board
	// names: NEBULA_X1, P150A-1, WH_UBB, …), sorted.
	Boards []string
}

// ReadBundle reads a bundle as tt-flash does (tt_flash/flash.py
// verify_package, the extractfile of ./<board>/image.bin): a tar with
// ./manifest.json — "version" the manifest schema, "bundle_version"
// {fwId, releaseId, patch, debug} — and an image per board. Schema 2.0.0
// needs fwId 19 or later; a schema other than 1.x or 2.0.0 is refused, as
// tt-flash refuses it. The whole stream is read (a digest over it can be
// checked at its end).
func ReadBundle(r io.Reader) (Bundle, error) {
	var b Bundle
	tr := tar.NewReader(r)
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return b, fmt.Errorf("not a firmware bundle (a tar): %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if dir, ok := strings.CutSuffix(name, "/image.bin"); ok && !strings.Contains(dir, "/") {
			b.Boards = append(b.Boards, dir)
			continue
		}
		if name != "manifest.json" {
			continue
		}
		var m struct {
			Version       string         `json:"version"`
			BundleVersion map[string]int `json:"bundle_version"`
		}
		if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil {
			return b, fmt.Errorf("manifest.json: %w", err)
		}
		bv := m.BundleVersion
		switch {
		case m.Version == "":
			return b, errors.New("manifest.json has no version")
		case m.Version == "2.0.0" && bv["fwId"] < 19:
			return b, fmt.Errorf("manifest 2.0.0 with fwId %d: tt-flash requires 19 or later", bv["fwId"])
		case m.Version != "2.0.0" && !strings.HasPrefix(m.Version, "1."):
			return b, fmt.Errorf("manifest version %q, which tt-flash does not support", m.Version)
		}
		b.Version = fmt.Sprintf("%d.%d.%d.%d", bv["fwId"], bv["releaseId"], bv["patch"], bv["debug"])
		found = true
	}
	if !found {
		return b, errors.New("no ./manifest.json: not a firmware bundle")
	}
	sort.Strings(b.Boards)
	return b, nil
}

// boardDirs maps a card type, as tt-kmd's sysfs tt_card_type names it
// (tt-kmd telemetry.c tt_sysfs_show_card_type) and as the sim's hosts name
// it (tt-smi's board_type), to the bundle directories tt-flash would take
// its image from (tt_flash/utility.py get_board_type, by the same UPI; a
// Blackhole Galaxy's depends on its revision).
var boardDirs = map[string][]string{
	"n150": {"NEBULA_X1"}, "n300": {"NEBULA_X2"}, "galaxy-wormhole": {"WH_UBB"}, "tt-galaxy-wh": {"WH_UBB"},
	"p100": {"P100-1"}, "p100a": {"P100A-1"}, "p150": {"P150A-1"}, "p150a": {"P150A-1"}, "p150b": {"P150B-1"},
	"p150c": {"P150C-1"}, "p300": {"P300A-1"}, "p300a": {"P300A-1"}, "p300b": {"P300B-1"}, "p300c": {"P300C-1"},
	"galaxy-blackhole": {"GALAXY-1", "GALAXY-3"}, "tt-galaxy-bh": {"GALAXY-1", "GALAXY-3"},
}

// HasImageFor reports whether the bundle has an image for a card of this
// type; known is false for a card type tt-flash's names do not cover.
func (b Bundle) HasImageFor(cardType string) (has, known bool) {
	dirs, ok := boardDirs[strings.TrimSpace(cardType)]
	if !ok {
		return false, false
	}
	for _, d := range dirs {
		for _, have := range b.Boards {
			if have == d {
				return true, true
			}
		}
	}
	return false, true
}

// ImageDirs are the directories a card type's image may be in.
func ImageDirs(cardType string) []string { return boardDirs[strings.TrimSpace(cardType)] }
