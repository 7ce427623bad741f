package ttflash

// Rule is one row of tt-flash's per-chip behaviour, with the upstream
// source it was read from (tenstorrent/tt-flash; read, not copied). Decide
// is held to every rule, and so is the fake tt-flash (internal/fakehost's
// contract test runs it on each), so the agent's choice of flags and the
// sim's tt-flash answer from the same reading of the source.
type Rule struct {
	Name   string
	Source string // file and function in tenstorrent/tt-flash
	// Running and SPI as tt-smi prints them ("N/A": the chip reports
	// none); SPI "" is the same as Running.
	Running, SPI string
	Bundle       string // the bundle's version, a.b.c
	Flags        Flags
	Want         Decision
}

const (
	srcStage1    = "tt_flash/flash.py flash_chip_stage1"
	srcNormalise = "tt_flash/flash.py normalize_fw_version"
	srcWHReader  = "tt_flash/chip.py get_bundle_version_v1 (0xFFFFFFFF, 0xDEAD: no version)"
)

var (
	write = Decision{Outcome: Write}
	skip  = Decision{Outcome: Skip}
)

func refuse(r Refusal) Decision { return Decision{Outcome: Refuse, Refusal: r} }

// Rules are the cases tt-flash's first stage decides, as read from its
// source.
var Rules = []Rule{
	{Name: "upgrade within a major", Source: srcStage1, Running: "19.0.0.0", Bundle: "19.9.0", Want: write},
	{Name: "upgrade across one major", Source: srcStage1 + " (one major boundary permitted)",
		Running: "18.2.0.0", Bundle: "19.0.0", Want: write},
	{Name: "80.x scheme: 80.17 to 18 is one major", Source: srcNormalise, Running: "80.17.2.0", Bundle: "18.2.0", Want: write},
	{Name: "80.x scheme: 80.18.2 is 18.2.0.0", Source: srcNormalise, Running: "80.18.2.0", Bundle: "18.2.0", Want: skip},
	{Name: "same version: nothing written", Source: srcStage1 + " (spi_version >= manifest_version)",
		Running: "19.0.0.0", Bundle: "19.0.0", Want: skip},
	{Name: "same version, --force: written", Source: srcStage1, Running: "19.0.0.0", Bundle: "19.0.0",
		Flags: Flags{Force: true}, Want: write},
	{Name: "minor downgrade: nothing written", Source: srcStage1 + " (spi_version >= manifest_version)",
		Running: "19.9.0.0", Bundle: "19.0.0", Want: skip},
	{Name: "minor downgrade, --force: written", Source: srcStage1, Running: "19.9.0.0", Bundle: "19.0.0",
		Flags: Flags{Force: true}, Want: write},
	{Name: "flashed, not reset: the SPI is ahead", Source: srcStage1 + " (spi checked before running)",
		Running: "18.2.0.0", SPI: "19.0.0.0", Bundle: "19.0.0", Want: skip},
	{Name: "major downgrade refused", Source: srcStage1, Running: "19.0.0.0", Bundle: "18.2.0",
		Want: refuse(RefuseMajorDowngrade)},
	{Name: "major downgrade refused even with --force", Source: srcStage1 + " (checked before force)",
		Running: "19.0.0.0", Bundle: "18.2.0", Flags: Flags{Force: true}, Want: refuse(RefuseMajorDowngrade)},
	{Name: "major downgrade with --allow-major-downgrades alone: the fwId check", Source: srcStage1,
		Running: "19.0.0.0", Bundle: "18.2.0", Flags: Flags{AllowMajorDowngrades: true}, Want: refuse(RefuseFwID)},
	{Name: "major downgrade with both flags", Source: srcStage1, Running: "19.0.0.0", Bundle: "18.2.0",
		Flags: Flags{Force: true, AllowMajorDowngrades: true}, Want: write},
	{Name: "upgrade across two majors refused", Source: srcStage1 + " (fwId check)",
		Running: "80.17.2.0", Bundle: "19.0.0", Want: refuse(RefuseFwID)},
	{Name: "upgrade across two majors, --force", Source: srcStage1, Running: "80.17.2.0", Bundle: "19.0.0",
		Flags: Flags{Force: true}, Want: write},
	{Name: "Galaxy's 0xffffffff is no running version", Source: srcWHReader + "; " + srcStage1,
		Running: "255.255.255.255", Bundle: "19.0.0", Want: refuse(RefuseNoRunning)},
	{Name: "no running version, --force", Source: srcStage1 + " (running is None)",
		Running: "255.255.255.255", Bundle: "19.0.0", Flags: Flags{Force: true}, Want: write},
	{Name: "unreadable running version", Source: srcStage1 + " (running is None)",
		Running: "N/A", Bundle: "19.0.0", Want: refuse(RefuseNoRunning)},
}
