package ttflash

// A failed SPI write is the one failure tt-flash hands to a person. Its
// second stage (tt_flash/flash.py flash_chip_stage2) writes a chip's SPI,
// reads it back, and on a mismatch writes and reads once more; when the
// second read-back still differs it prints that the board must not be
// reset or powered off and that Tenstorrent support must be contacted,
// and counts the chip as failed. tt_flash/main.py main then sums the
// failed chips into its exit status and, when any chip failed, resets no
// chip at all: the chips whose writes verified keep running their old
// image with the new one in their SPI, loaded only by a later reset.
// (Read, not copied: tenstorrent/tt-flash 3.11.)

// NeedsPersonMarker is the phrase of tt-flash's second-verification
// failure: output that holds it (with a non-zero exit) is a chip whose
// SPI tt-flash could not write, which tt-flash says needs a person.
const NeedsPersonMarker = "do not reset or poweroff the board"

// FailureSource cites where the marker, the exit status and the skipped
// reset are read from.
const FailureSource = "tt_flash/flash.py flash_chip_stage2 (second verification); tt_flash/main.py main " +
	"(exit status = failed chips; no reset when any failed)"

// ResetSource cites the reset tt-flash gives the chips it wrote when none
// failed: a full LDS reset of every written chip (WHChipReset /
// BHChipReset full_lds_reset with reset_m3), a tray reset on a Galaxy.
const ResetSource = "tt_flash/flash.py reset_devices"
