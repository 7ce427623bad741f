package tt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

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
	// Readback is what every device must report afterwards; default V.0.
	Readback     string
	Drain        bool
	DrainTimeout time.Duration
	FlashTimeout time.Duration
	DeployGates  []string
	// ForceWrite re-flashes nodes already at the readback version. A node
	// counts as done only once flashed after ForceSince, which is kept on
	// the lock's Lease so an interrupted forced run resumes, not restarts.
	ForceWrite                bool
	ForceSince                time.Time
	ContinueOnReadbackFailure bool
	Helper                    HelperConfig
	RunID                     string
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
	if c.FlashTimeout < time.Minute {
		return fmt.Errorf("--flash-timeout %s is too short; a flash takes about 40 s and a Galaxy reset longer (minimum 1m)", c.FlashTimeout)
	}
	for _, g := range c.DeployGates {
		if errs := validateLabelKey(g); errs != "" {
			return fmt.Errorf("--deploy-gate %q: %s", g, errs)
		}
	}
	return c.Helper.validate()
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

type fwFacts struct {
	work
	cfg *FirmwareConfig
}

func (f fwFacts) base() *work { return &f.work }

// finished: the node's measured readback is recorded, and for a forced
// campaign it was recorded after the campaign started.
func (f fwFacts) finished() bool {
	if f.node.Labels[LabelFirmware] != f.cfg.Readback {
		return false
	}
	if !f.cfg.ForceWrite {
		return true
	}
	rec, ok := firmwareRecordOf(f.node)
	return ok && !rec.At.Before(f.cfg.ForceSince)
}

func firmwareRecordOf(n *corev1.Node) (firmwareRecord, bool) {
	var r firmwareRecord
	raw, ok := n.Annotations[AnnFirmwareResult]
	if !ok || json.Unmarshal([]byte(raw), &r) != nil {
		return r, false
	}
	return r, true
}

// kmdLoaded guards the flash, and already the cordon, so a node that cannot
// be flashed is never taken out of service for nothing.
var kmdLoaded = runbook.Guard[fwFacts]{Name: "tt-kmd is loaded on the node", Check: func(f fwFacts) (bool, string) {
	l := f.node.Labels
	return l[LabelKMDVersion] != "" || l[LabelInstallMode] == InstallModeHost,
		"the node has no " + LabelKMDVersion + " label (and is not host-managed); tt-flash needs the kernel module loaded — run `kubectl tt upgrade kmd` first"
}}

func flashSucceeded(h helperFacts) bool { return h.finished() && h.Result != nil && h.Result.Success }

// FirmwareRunbook builds the firmware flash runbook.
func FirmwareRunbook(cs kubernetes.Interface, rec kube.Recorder, cfg *FirmwareConfig) *runbook.Runbook[fwFacts] {
	helperName := func(node string) string { return kube.HelperName("flash", node, cfg.helperKey()) }
	return &runbook.Runbook[fwFacts]{
		Name:  FirmwareRunbookName,
		Title: "Flash Tenstorrent device firmware",
		Doc: `Per node: Pending → Cordoning → Draining → Flashing → Uncordoning → Done (or Failed).
Up to --max-parallel nodes are out of service at once — counted from cordon to uncordon, not
just while a flash runs. A node is done when every device's measured readback is recorded on
it (label firmware.tenstorrent.com/fw-version plus the result annotation), not when a Job
happens to exist. A failed node keeps its cordon and, with --halt-on-failure, stops new nodes.`,
		Observe: func(ctx context.Context, t runbook.Target) (fwFacts, error) {
			name := strings.TrimPrefix(t.Name(), "node/")
			w, err := observeWork(ctx, cs, FirmwareRunbookName, name, cfg.Helper.Namespace, helperName(name),
				func(n *corev1.Node) bool { return fwFacts{work: work{node: n}, cfg: cfg}.finished() })
			return fwFacts{work: w, cfg: cfg}, err
		},
		Notes:      func(f fwFacts) []string { return workNotes(&f.work) },
		Annotation: func(f fwFacts, key string) (string, bool) { v, ok := f.node.Annotations[key]; return v, ok },
		Steps: []runbook.Step[fwFacts]{
			withGuard(cordonStep[fwFacts]("tt.fw.cordon", cs, rec, cfg.RunID), kmdLoaded),
			closeGatesStep[fwFacts]("tt.fw.close-gates", cfg.DeployGates, cs, rec),
			evictDevicePodsStep[fwFacts]("tt.fw.evict-device-pods", cfg.Drain, cfg.DrainTimeout, "firmware "+cfg.Version+" flash", cs, rec),
			{
				ID: "tt.fw.flash", Title: "Flash the firmware",
				Doc:     "Run the flash helper pod: read every device's version (tt-smi -s, sysfs fallback, one reset-and-retry heal), skip when all already report the readback version unless --force-write, pass --force when chips disagree, run tt-flash, treat \"Config space reset not completed\" as a failure even on exit 0, and verify every device reads back the target.",
				Timeout: cfg.FlashTimeout,
				Done: func(f fwFacts) (bool, string) {
					switch {
					case f.finished():
						return true, LabelFirmware + "=" + cfg.Readback
					case flashSucceeded(f.helper):
						return true, describeFlash(f.helper.Result)
					case f.helper.finished():
						return false, "last flash failed: " + helperError(f.helper)
					case f.helper.Pod != nil:
						return false, "helper " + f.helper.Pod.Name + " is " + string(f.helper.Pod.Status.Phase)
					}
					return false, "firmware at " + orUnknown(f.node.Labels[LabelFirmware])
				},
				Guards: []runbook.Guard[fwFacts]{
					{Name: "the node is cordoned by tt-firmware", Check: func(f fwFacts) (bool, string) {
						return f.ourCordon(), "a flash resets the chips; the node must be cordoned by rollbook tt-firmware first"
					}},
					kmdLoaded,
				},
				Plan: func(f fwFacts) []runbook.Change {
					return []runbook.Change{{Object: "pod/" + cfg.Helper.Namespace + "/" + helperName(f.node.Name), Action: "create",
						Detail: strings.Join(flashCommand(cfg)[1:], " ")}}
				},
				Act: func(ctx context.Context, f fwFacts) error {
					if f.helper.finished() {
						if err := deleteHelper(ctx, cs, rec, f.helper.Pod); err != nil {
							return err
						}
					}
					spec := helperSpec(cfg.Helper, "flash", f.node.Name, cfg.helperKey(), flashCommand(cfg), false, cfg.RunID)
					_, _, err := kube.EnsureHelper(ctx, cs, rec, spec)
					return err
				},
				Wait: func(ctx context.Context, f fwFacts) error {
					name := helperName(f.node.Name)
					p, err := kube.WaitForHelper(ctx, cs, cfg.Helper.Namespace, name)
					if err != nil {
						return err
					}
					h := helperOf(p)
					if flashSucceeded(h) {
						return nil
					}
					rec.Record(ctx, kube.NodeRef(f.node), true, "FlashFailed", helperError(h))
					return errors.New(helperError(h) + describeDevices(h.Result))
				},
			},
			{
				ID: "tt.fw.record", Title: "Record the measured firmware",
				Doc: "Label firmware.tenstorrent.com/fw-version with the version every device read back and keep the per-device result in an annotation.",
				Done: func(f fwFacts) (bool, string) {
					return f.finished(), LabelFirmware + "=" + orUnknown(f.node.Labels[LabelFirmware])
				},
				Guards: []runbook.Guard[fwFacts]{{Name: "the flash helper succeeded", Check: func(f fwFacts) (bool, string) {
					return flashSucceeded(f.helper), "no successful flash result"
				}}},
				Plan: func(f fwFacts) []runbook.Change {
					return []runbook.Change{{Object: "node/" + f.node.Name, Action: "label", Detail: LabelFirmware + "=" + cfg.Readback}}
				},
				Act: func(ctx context.Context, f fwFacts) error {
					return recordFirmware(ctx, cs, rec, f.node, cfg, f.helper.Result)
				},
			},
			openGatesStep[fwFacts]("tt.fw.open-gates", cs, rec),
			uncordonStep[fwFacts]("tt.fw.uncordon", cs, rec),
			cleanupStep[fwFacts]("tt.fw.cleanup", cfg.Helper.Namespace, helperName, cs, rec),
		},
	}
}

func flashCommand(cfg *FirmwareConfig) []string {
	cmd := []string{"kubectl-tt", "node-agent", "flash", "--version", cfg.Version,
		"--readback-version", cfg.Readback, "--bundle-url", cfg.BundleURL,
		"--timeout", (cfg.FlashTimeout - 30*time.Second).String()}
	if cfg.ForceWrite {
		cmd = append(cmd, "--force-write")
	}
	if cfg.ContinueOnReadbackFailure {
		cmd = append(cmd, "--continue-on-readback-failure")
	}
	return cmd
}

func recordFirmware(ctx context.Context, cs kubernetes.Interface, rec kube.Recorder, node *corev1.Node, cfg *FirmwareConfig, r *nodeagent.Result) error {
	measured := cfg.Readback
	for _, d := range r.Devices {
		if d.After != "" && d.After != cfg.Readback {
			return fmt.Errorf("device %d reads back %s, want %s", d.Index, d.After, cfg.Readback)
		}
	}
	b, _ := json.Marshal(firmwareRecord{Readback: measured, Devices: r.Devices, Forced: cfg.ForceWrite, Changed: r.Changed,
		Duration: r.DurationMS, Run: cfg.RunID, At: time.Now().UTC()})
	n, err := kube.SetNodeKeys(ctx, cs, node.Name, kube.NodeChange{Labels: map[string]*string{LabelFirmware: &measured},
		Annotations: map[string]*string{AnnFirmwareResult: ptr.To(string(b))}})
	if err != nil {
		return err
	}
	rec.Record(ctx, kube.NodeRef(n), false, "FirmwareFlashed", fmt.Sprintf("%s=%s (%s)", LabelFirmware, measured, describeFlash(r)))
	return nil
}

func describeFlash(r *nodeagent.Result) string {
	if !r.Changed {
		return fmt.Sprintf("%d device(s) already at the readback version; not flashed", len(r.Devices))
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
