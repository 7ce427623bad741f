package tt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/runbook"
)

// FirmwareRunbookName owns the cordons and timers of firmware flashes; it
// differs from tt-kmd's so neither ever lifts the other's cordon.
const FirmwareRunbookName = "tt-firmware"

// AnnFirmwareResult is the last flash result on the node (JSON).
const AnnFirmwareResult = "rollbook.dev/tt-firmware-result"

// FirmwareConfig is what `kubectl tt upgrade firmware` was asked to do.
type FirmwareConfig struct {
	Version   string
	BundleURL string
	// BundleSHA256 pins the bundle's bytes; the helper refuses to flash
	// anything else.
	BundleSHA256 string
	// Readback is what every device must report afterwards; default V.0.
	Readback     string
	Drain        bool
	DrainTimeout time.Duration
	FlashTimeout time.Duration
	DeployGates  []string
	// ForceWrite re-flashes nodes already at the readback version. A node
	// counts as done only once flashed after ForceSince, which is kept on
	// the lock's Lease so an interrupted forced run resumes, not restarts.
	ForceWrite bool
	ForceSince time.Time
	// AllowMajorDowngrade reaches tt-flash as --allow-major-downgrades;
	// without it a node with a chip on a newer major stops at its probe.
	AllowMajorDowngrade       bool
	ContinueOnReadbackFailure bool
	// MaxParallel bounds the nodes out of service at once, counted from the
	// cluster (cordoned by tt-firmware), so a failed node that stays
	// cordoned keeps its slot even when the run goes on.
	MaxParallel int
	// MaxUnavailablePer bounds, per label key, the nodes sharing a value
	// of it that are out of service at once (--max-unavailable-per).
	MaxUnavailablePer map[string]int
	// ForceUnload kills processes holding the device before the flash.
	ForceUnload bool
	// Force evicts bare pods (no controller), as kubectl drain --force;
	// DeleteEmptyDirData and GracePeriod as kubectl drain's.
	Force              bool
	DeleteEmptyDirData bool
	GracePeriod        *int64
	Helper             HelperConfig
	RunID              string
	// Operators are the firmware operator's claims on nodes, read at the
	// start of the run (ReadFirmwareOperatorClaims): a claimed node is
	// refused before its cordon.
	Operators OperatorClaims
	// Acknowledged are the nodes --acknowledge-failed-flash names: a
	// failed flash that needs a person does not stop them.
	Acknowledged []string
}

// Complete fills defaults that depend on other fields.
func (c *FirmwareConfig) Complete() {
	if c.Readback == "" {
		c.Readback = c.Version + ".0"
	}
	if c.BundleURL == "" {
		c.BundleURL = nodeagent.DefaultBundleURL(c.Version)
	}
	c.Helper.Timeout = c.FlashTimeout
}

// Validate rejects bad input before any API call.
func (c *FirmwareConfig) Validate() error {
	if err := nodeagent.ValidateVersion(c.Version); err != nil {
		return fmt.Errorf("--version: %v", err)
	}
	if err := nodeagent.ValidateReadbackVersion(c.Readback); err != nil {
		return fmt.Errorf("--readback-version: %v", err)
	}
	if err := nodeagent.ValidateSourceURL(c.BundleURL); err != nil {
		return fmt.Errorf("--bundle-url: %v", err)
	}
	if err := nodeagent.ValidateSHA256(c.BundleSHA256); err != nil {
		return fmt.Errorf("--bundle-sha256: %v", err)
	}
	if c.FlashTimeout < time.Minute {
		return fmt.Errorf("--flash-timeout %s is too short; a flash takes about 40 s and a Galaxy reset longer (minimum 1m)",
			c.FlashTimeout)
	}
	if err := ValidateUnavailablePer(c.MaxUnavailablePer); err != nil {
		return err
	}
	for _, g := range c.DeployGates {
		if errs := validateLabelKey(g); errs != "" {
			return fmt.Errorf("--deploy-gate %q: %s", g, errs)
		}
	}
	return c.Helper.validate()
}

// The Secret a presigned --bundle-url travels in. A query string is where
// presigned URLs keep their signature; the helper's command, Events, the
// journal and the Lease are readable by more people than the Secret, so
// such a URL reaches the helper only as an env var from this Secret
// (secretKeyRef; the admission policy admits exactly this reference).
const (
	BundleSecretName = "rollbook-tt-bundle-url"
	BundleSecretKey  = "url"
	// EnvBundleURL is the helper's env var holding the URL.
	EnvBundleURL = "ROLLBOOK_BUNDLE_URL"
	// SecretPurposeBundleURL labels the Secret (kube.LabelSecret).
	SecretPurposeBundleURL = "bundle-url"
)

// Presigned says the bundle URL carries a query string (a presigned URL's
// signature): it goes through BundleSecretName, never a pod's argv.
func (c *FirmwareConfig) Presigned() bool {
	u, err := url.Parse(c.BundleURL)
	return err == nil && (u.RawQuery != "" || u.ForceQuery)
}

// bundleEnv is the helper's env var for a presigned URL, or none.
func (c *FirmwareConfig) bundleEnv() []corev1.EnvVar {
	if !c.Presigned() {
		return nil
	}
	return []corev1.EnvVar{{Name: EnvBundleURL, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: BundleSecretName}, Key: BundleSecretKey}}}}
}

// StoreBundleSecret puts a presigned URL into BundleSecretName in the
// helper namespace before any helper needs it; it returns the function
// that deletes it when the run ends (the helpers read it at their start).
// Without a query string it does nothing.
func (c *FirmwareConfig) StoreBundleSecret(ctx context.Context, cs kubernetes.Interface) (remove func(context.Context) error, err error) {
	if !c.Presigned() {
		return func(context.Context) error { return nil }, nil
	}
	ns := c.Helper.Namespace
	if err := kube.PutSecret(ctx, cs, ns, BundleSecretName, SecretPurposeBundleURL,
		map[string][]byte{BundleSecretKey: []byte(c.BundleURL)}); err != nil {
		return nil, fmt.Errorf("the presigned --bundle-url goes to the helpers through a Secret: %w", err)
	}
	return func(ctx context.Context) error { return kube.DeleteSecret(ctx, cs, ns, BundleSecretName) }, nil
}

// helperKey distinguishes a forced campaign's flash from earlier ones, so
// the deterministic helper name never finds a stale pod of another intent.
func (c *FirmwareConfig) helperKey() string {
	if c.ForceWrite {
		return c.Readback + "-forced-" + fmt.Sprint(c.ForceSince.Unix())
	}
	return c.Readback
}

// firmwareRecord is the flash result kept on the node.
type firmwareRecord struct {
	Readback string             `json:"readback"`
	Devices  []nodeagent.Device `json:"devices,omitempty"`
	Forced   bool               `json:"forced,omitempty"`
	Changed  bool               `json:"changed"`
	Duration int64              `json:"durationMs"`
	Run      string             `json:"run"`
	At       time.Time          `json:"at"`
}

// fwFinished: this run measured every device at the readback (its flash,
// or its probe) and the label says so; for a forced campaign, the flash
// was recorded after the campaign started.
func (c *FirmwareConfig) fwFinished(n *corev1.Node) bool {
	if n.Labels[LabelFirmware] != c.Readback {
		return false
	}
	rec, ok := firmwareRecordOf(n)
	if c.ForceWrite {
		return ok && !rec.At.Before(c.ForceSince)
	}
	if ok && rec.Readback == c.Readback && rec.Run == c.RunID {
		return true
	}
	p := probeRecordOf(n)
	return p != nil && p.Run == c.RunID && len(p.Firmware) > 0 && allAt(p.Firmware, c.Readback)
}

func allAt(vs []string, want string) bool {
	for _, v := range vs {
		if v != want {
			return false
		}
	}
	return true
}

func firmwareRecordOf(n *corev1.Node) (firmwareRecord, bool) {
	var r firmwareRecord
	raw, ok := n.Annotations[AnnFirmwareResult]
	if !ok || decodeRecord(raw, &r) != nil {
		return r, false
	}
	return r, true
}

// fwBlockers is what stops a probed node before its cordon: tt-flash needs
// the module loaded (measured, not the label).
func fwBlockers(cfg *FirmwareConfig) func(f *Facts) []string {
	return func(f *Facts) []string {
		r := f.Measured
		if r == nil {
			return []string{"no probe result"}
		}
		out := r.commonBlockers(cfg.ForceUnload)
		out = append(out, r.cardsNotServing()...)
		out = append(out, cfg.Operators[f.Node.Name]...)
		if cfg.Drain {
			out = append(out, f.holdersThatStay(cfg.DeployGates)...)
			out = append(out, barePodBlockers(f, fwEvicts, cfg.Force)...)
			out = append(out, localDataBlockers(f, fwEvicts, cfg.DeleteEmptyDirData)...)
		}
		if r.KMD == "" {
			out = append(out, "tt-kmd is not loaded on the node; tt-flash needs the kernel module — run `kubectl tt upgrade kmd` first")
		}
		if !f.Finished {
			out = append(out, flashRefusals(r, cfg)...)
			out = append(out, bundleRefusals(r, cfg)...)
		}
		return out
	}
}

// flashRefusals names the boards whose chips tt-flash would refuse with
// the flags this run may pass: a newer major version (without
// --allow-major-downgrade), an upgrade across more than one major or no
// running version (tt-flash wants --force for them; without --force-write
// kubectl tt does not pass it).
func flashRefusals(r *ProbeRecord, cfg *FirmwareConfig) []string {
	target := cfg.Readback
	var major, force []string
	for i, v := range r.Firmware {
		dev := fmt.Sprintf("device %d (%s) runs %s", i, orUnknown(at(r.Boards, i)), orUnknown(v))
		switch c := nodeagent.ClassifyFirmware(v, target); {
		case c == nodeagent.CaseMajorDowngrade && !cfg.AllowMajorDowngrade:
			major = append(major, dev)
		case nodeagent.NeedsForceConsent(c) && !cfg.ForceWrite:
			force = append(force, dev+" ("+string(c)+")")
		}
	}
	var out []string
	if len(major) > 0 {
		out = append(out, fmt.Sprintf("major downgrade to %s: %s; tt-flash refuses it without --allow-major-downgrades — re-run "+
			"with --allow-major-downgrade if this bundle is really wanted (%s)", target, strings.Join(major, ", "),
			firmwareCases(r, target)))
	}
	if len(force) > 0 {
		out = append(out, fmt.Sprintf("flash to %s: %s; tt-flash refuses these without --force, which also skips its board "+
			"checks — re-run with --force-write if this bundle is really wanted on them (across majors, flashing each "+
			"major's bundle in turn needs no --force) (%s)", target, strings.Join(force, ", "), firmwareCases(r, target)))
	}
	return out
}

// firmwareCases counts the devices per case (upgrade, same, minor or major
// downgrade), "upgrade ×1, major downgrade ×1".
func firmwareCases(r *ProbeRecord, target string) string {
	var s []string
	for _, c := range nodeagent.CountFirmwareCases(r.Firmware, target) {
		s = append(s, fmt.Sprintf("%s ×%d", c.Case, c.N))
	}
	return strings.Join(s, ", ")
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// FirmwareRunbook builds the firmware flash runbook.
func FirmwareRunbook(cs kubernetes.Interface, rec kube.Recorder, cfg *FirmwareConfig) *runbook.Runbook[Facts] {
	cs = kube.RememberNodeWrites(cs)
	helperName := func(node string) string { return kube.HelperName(flashTask, node, cfg.helperKey()) }
	obs := observer{cs: cs, owner: FirmwareRunbookName, helperNS: cfg.Helper.Namespace, helper: helperName,
		probe:    func(node string) string { return probeHelperName(node, cfg.RunID) },
		finished: cfg.fwFinished, skip: FirmwareSkipReason, countOut: cfg.MaxParallel > 0, run: cfg.RunID, daemonSets: &templateCache{}}
	if cfg.Drain {
		obs.evicts = fwEvicts
	}
	pdb := pdbGuards(cs, "tt-firmware", cfg.Drain, fwEvicts, cfg.DrainTimeout)
	b := newBuilder(cs, rec, cfg.RunID, cfg.Helper)
	blockers := fwBlockers(cfg)
	return &runbook.Runbook[Facts]{
		Name:  FirmwareRunbookName,
		Title: "Flash Tenstorrent device firmware",
		Doc: `Per node: Pending → Probing → Cordoning → Draining → Flashing → Uncordoning → Done (or Failed).
Up to --max-parallel nodes are out of service at once — counted from cordon to uncordon, not
just while a flash runs. A node is done when every device's measured readback is recorded on
it (label firmware.tenstorrent.com/fw-version plus the result annotation), not when a Job
happens to exist. The flash never runs while a process holds the device (unless
--force-unload). A failed node keeps its cordon and, with --halt-on-failure, stops new nodes.`,
		Observe:      func(ctx context.Context, t runbook.Target) (Facts, error) { return obs.observe(ctx, t.Name()) },
		ObserveParts: obs.observePartsOf,
		Notes:        workNotes,
		Annotation:   annotationOf,
		// A node that stops cordoned by this runbook keeps its --max-parallel slot.
		OutOfService: func(f Facts) bool { return f.ourCordon() },
		Steps: []runbook.Step[Facts]{
			b.probe("tt.fw.probe", fwProbeCommand(cfg), blockers),
			b.cordon("tt.fw.cordon", cfg.DeployGates, cordonGuards(probeClear("tt-firmware", cfg.RunID, blockers), pdb,
				append([]runbook.Guard[Facts]{outOfServiceBudget(cfg.MaxParallel)}, perLabelBudget(cfg.MaxUnavailablePer)...)...)...),
			b.closeGates("tt.fw.close-gates", cfg.DeployGates),
			b.evictDevicePods("tt.fw.evict-device-pods", cfg.Drain, cfg.drainFlags(), cfg.DrainTimeout,
				"firmware "+cfg.Version+" flash"),
			b.helperTask(task{
				id: "tt.fw.flash", title: "Flash the firmware", name: flashTask, key: cfg.helperKey(), command: flashCommand(cfg),
				env: cfg.bundleEnv(),
				doc: "Run the flash helper pod: refuse while any process holds the device (unless --force-unload), read every " +
					"device's version (tt-smi -s, sysfs fallback, one reset-and-retry heal), skip when all already report the " +
					"readback version unless --force-write, pass tt-flash the flags the chips' cases need (pkg/ttflash), " +
					"run tt-flash, treat \"Config space " +
					"reset not completed\" as a failure even on exit 0, and verify every device reads back the target.",
				hostPID: cfg.ForceUnload, timeout: cfg.FlashTimeout,
				guards: []runbook.Guard[Facts]{{Name: "the node is cordoned by tt-firmware", Check: func(f Facts) (bool, string) {
					return f.ourCordon(), "a flash resets the chips; the node must be cordoned by rollbook tt-firmware first"
				}}, noFlashNeedsPerson(cfg)},
				succeeded: func(h helperFacts) bool { return h.ok() },
				describe:  describeFlash,
				failed: func(ctx context.Context, f Facts, h helperFacts) error {
					if h.Result != nil && h.Result.Error != nil && h.Result.Error.Reason == nodeagent.ReasonFlashNeedsPerson {
						return flashNeedsPerson(ctx, cs, rec, f.Node, cfg, h)
					}
					rec.Record(ctx, kube.NodeRef(f.Node), true, "FlashFailed", helperError(h))
					err := errors.New(helperError(h) + describeDevices(h.Result))
					if h.Result != nil && h.Result.Error != nil && h.Result.Error.Reason == nodeagent.ReasonDeviceSilent {
						return runbook.Blocked(fmt.Errorf("%w\nThe node stays cordoned until the card answers", err))
					}
					if h.Result != nil && h.Result.Error != nil && h.Result.Error.Reason == nodeagent.ReasonDeviceInUse {
						pods, _ := kube.PodsOnNode(ctx, cs, f.Node.Name)
						return runbook.Blocked(fmt.Errorf("%w\n%s\nStop those processes or drain their pods, or re-run with "+
							"--force-unload to kill them (their in-flight work is lost)", err, describeHolders(h.Result.Holders, pods)))
					}
					return err
				},
				waiting: func(f Facts) string { return "firmware at " + orUnknown(f.Node.Labels[LabelFirmware]) },
			}),
			{
				ID: "tt.fw.record", Title: "Record the measured firmware", Reads: readNode | readPods,
				// The observation after it serves the cleanup: the gates and
				// uncordon steps between have nothing left to write (giveBack).
				DoneReads: readNode | readPods,
				Doc: "Label firmware.tenstorrent.com/fw-version with the version every device read back and keep the " +
					"per-device result in an annotation. The same write reopens the deploy gates and lifts the cordon (the next " +
					"two steps), so those have nothing left to write.",
				Done: func(f Facts) (bool, string) {
					return f.Finished, LabelFirmware + "=" + orUnknown(f.Node.Labels[LabelFirmware])
				},
				Guards: []runbook.Guard[Facts]{{Name: "the flash helper succeeded", Check: func(f Facts) (bool, string) {
					return f.Helper.ok(), "no successful flash result"
				}}},
				Plan: func(f Facts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.Node.Name, Action: "label", Detail: LabelFirmware + "=" + cfg.Readback}}
				},
				Act: func(ctx context.Context, f Facts) error {
					change, msg, err := firmwareResultChange(f.Node, cfg, f.Helper.Result)
					if err != nil {
						return err
					}
					return giveBack(ctx, cs, rec, f.Node, f.Owner, change, "FirmwareFlashed", msg, cfg.fwFinished)
				},
			},
			b.openGates("tt.fw.open-gates"),
			b.uncordon("tt.fw.uncordon"),
			b.cleanup("tt.fw.cleanup", helperName),
		},
	}
}

// fwProbeCommand is the probe of upgrade firmware: it reads the bundle
// the flash would use, unless the URL is presigned (the probe carries no
// Secret; the flash helper reads that one).
func fwProbeCommand(cfg *FirmwareConfig) []string {
	if cfg.BundleURL == "" || cfg.Presigned() {
		return agentCommand("probe")
	}
	args := []string{"--bundle-url", cfg.BundleURL}
	if cfg.BundleSHA256 != "" {
		args = append(args, "--bundle-sha256", strings.ToLower(cfg.BundleSHA256))
	}
	return agentCommand("probe", args...)
}

func flashCommand(cfg *FirmwareConfig) []string {
	src := []string{"--bundle-url", cfg.BundleURL}
	if cfg.Presigned() {
		base, _, _ := strings.Cut(cfg.BundleURL, "?")
		src = []string{"--bundle-url-env", EnvBundleURL, "--bundle-url-base", base}
	}
	cmd := append([]string{"--version", cfg.Version, "--readback-version", cfg.Readback}, src...)
	cmd = append(cmd, "--timeout", helperWorkTimeout(cfg.FlashTimeout).String())
	if cfg.BundleSHA256 != "" {
		cmd = append(cmd, "--bundle-sha256", strings.ToLower(cfg.BundleSHA256))
	}
	if cfg.ForceWrite {
		cmd = append(cmd, "--force-write")
	}
	if cfg.AllowMajorDowngrade {
		cmd = append(cmd, "--allow-major-downgrade")
	}
	if cfg.ContinueOnReadbackFailure {
		cmd = append(cmd, "--continue-on-readback-failure")
	}
	if cfg.ForceUnload {
		cmd = append(cmd, "--force-unload")
	}
	return agentCommand(flashTask, cmd...)
}

// firmwareResultChange is the write that records flash result r on node,
// and the FirmwareFlashed Event's message; an error when a device does not
// read back the target.
func firmwareResultChange(node *corev1.Node, cfg *FirmwareConfig, r *nodeagent.Result) (
	kube.NodeChange, string, error) {
	measured := cfg.Readback
	for _, d := range r.Devices {
		if d.After != "" && d.After != cfg.Readback {
			return kube.NodeChange{}, "", fmt.Errorf("device %d reads back %s, want %s", d.Index, d.After, cfg.Readback)
		}
	}
	b, _ := json.Marshal(firmwareRecord{Readback: measured, Devices: r.Devices, Forced: cfg.ForceWrite, Changed: r.Changed,
		Duration: r.DurationMS, Run: cfg.RunID, At: kube.ServerNow().UTC()})
	// A flash that succeeds ends a failure a person acknowledged.
	result := map[string]*string{AnnFirmwareResult: ptr.To(string(b)), AnnFlashNeedsPerson: nil}
	return kube.NodeChange{Labels: map[string]*string{LabelFirmware: &measured},
			Annotations: withClockTakenAlong(node, FirmwareRunbookName, result)},
		fmt.Sprintf("%s=%s (%s)", LabelFirmware, measured, describeFlash(r)), nil
}

func describeFlash(r *nodeagent.Result) string {
	if !r.Changed {
		return fmt.Sprintf("%d device(s) already at the readback version; not flashed", len(r.Devices))
	}
	for _, st := range r.Steps {
		if st.Name == "reset-to-load" && st.OK {
			// tt-flash found the bundle in the SPI already (an earlier flash
			// was never reset): the reset alone loaded it.
			return fmt.Sprintf("%d device(s) at the readback after a reset loaded their SPI (written by an earlier flash) in %.1fs",
				len(r.Devices), float64(r.DurationMS)/1000)
		}
	}
	return fmt.Sprintf("%d device(s) flashed in %.1fs", len(r.Devices), float64(r.DurationMS)/1000)
}

func describeDevices(r *nodeagent.Result) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for _, d := range r.Devices {
		mark := "ok"
		if !d.OK {
			mark = "NOT at target"
		}
		fmt.Fprintf(&b, "\n  device %d (%s %s): %s → %s %s", d.Index, d.Board, d.BusID, orUnknown(d.Before), orUnknown(d.After), mark)
	}
	return b.String()
}

func (c *FirmwareConfig) drainFlags() drainFlags {
	return drainFlags{force: c.Force, deleteEmptyDirData: c.DeleteEmptyDirData, gracePeriod: c.GracePeriod}
}
