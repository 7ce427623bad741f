package ttflash

// Outcome is tt-flash's per-chip decision before it writes anything.
type Outcome string

// The outcomes of tt-flash's first stage for one chip.
const (
	// Write: the chip is written (and later reset).
	Write Outcome = "write"
	// Skip: nothing is written and the chip is not reset; tt-flash goes on
	// with the others and exits 0.
	Skip Outcome = "skip"
	// Refuse: tt-flash stops before writing any chip.
	Refuse Outcome = "refuse"
)

// Refusal is why tt-flash refused, and the flag that would have let it on.
type Refusal string

// The refusals of tt-flash's first stage.
const (
	RefuseNoRunning      Refusal = "no running version (needs --force)"
	RefuseMajorDowngrade Refusal = "major downgrade (needs --allow-major-downgrades)"
	RefuseFwID           Refusal = "bundle fwId neither the running major nor the next (needs --force)"
)

// Decision is Decide's answer for one chip.
type Decision struct {
	Outcome Outcome
	Refusal Refusal // set when Outcome is Refuse
}

// Decide is tt-flash's first stage for one chip: what it runs, what its
// SPI holds (the zero Version when unreadable), the bundle's version and
// the flags given. It follows flash_chip_stage1 in tt_flash/flash.py: no
// running version needs --force; a newer running major needs
// --allow-major-downgrades; a running major other than the bundle's or the
// one before it needs --force (so a major downgrade needs both); --force
// writes; otherwise an SPI at or above the bundle — or, with no SPI
// version, a running version at or above it — is skipped.
func Decide(running, spi, bundle Version, f Flags) Decision {
	if !running.known {
		if !f.Force {
			return Decision{Outcome: Refuse, Refusal: RefuseNoRunning}
		}
	} else {
		if running.Major() > bundle.Major() && !f.AllowMajorDowngrades {
			return Decision{Outcome: Refuse, Refusal: RefuseMajorDowngrade}
		}
		if running.Major() != bundle.Major()-1 && running.Major() != bundle.Major() && !f.Force {
			return Decision{Outcome: Refuse, Refusal: RefuseFwID}
		}
	}
	switch {
	case f.Force:
		return Decision{Outcome: Write}
	case spi.known:
		if spi.Compare(bundle) >= 0 {
			return Decision{Outcome: Skip}
		}
	case running.known:
		if running.Compare(bundle) >= 0 {
			return Decision{Outcome: Skip}
		}
	}
	return Decision{Outcome: Write}
}
