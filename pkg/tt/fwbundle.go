package tt

import (
	"fmt"
	"strings"

	"github.com/rollbook/rollbook/pkg/ttflash"
)

// bundleRefusals are what the bundle, read by the probe on the node, says
// against the request, before anything is cordoned: it could not be read
// (a typo'd path, a checksum that is not the pin), it holds another
// version than --version asks for (every chip would be written with
// firmware nobody asked for, then fail the readback), or it has no image
// for one of the node's boards (tt-flash stops on it).
func bundleRefusals(r *ProbeRecord, cfg *FirmwareConfig) []string {
	b := r.Bundle
	if b == nil {
		return nil
	}
	if b.Error != "" {
		return []string{fmt.Sprintf("the firmware bundle %s cannot be used: %s — fix --bundle-url (or --bundle-sha256)", b.URL, b.Error)}
	}
	var out []string
	if ttflash.Classify(b.Version, cfg.Readback) != ttflash.CaseSame {
		out = append(out, fmt.Sprintf("the firmware bundle %s is version %s, but --version %s expects %s: give the bundle of %s "+
			"in --bundle-url, or --version for the bundle's", b.URL, b.Version, cfg.Version, cfg.Readback, cfg.Version))
	}
	bundle := ttflash.Bundle{Version: b.Version, Boards: b.Boards}
	var missing []string
	seen := map[string]bool{}
	for i, card := range r.Boards {
		if has, known := bundle.HasImageFor(card); known && !has && !seen[card] {
			seen[card] = true
			missing = append(missing, fmt.Sprintf("%s (device %d; tt-flash looks for %s/image.bin)", card, i,
				strings.Join(ttflash.ImageDirs(card), "/image.bin or ")))
		}
	}
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("the firmware bundle %s has no image for %s; it has %s: give a bundle for these boards",
			b.URL, strings.Join(missing, ", "), orNone(b.Boards)))
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
