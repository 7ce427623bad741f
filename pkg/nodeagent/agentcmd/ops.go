package agentcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/version"
)

func newKMDCommand(c *common) *cobra.Command {
	var o nodeagent.KMDOptions
	cmd := &cobra.Command{
		Use:   "kmd --version X.Y.Z --module-sha256 HEX --module-from DIR",
		Short: "Install tt-kmd X.Y.Z: the module kubectl tt vouched for (unload, insmod, verify, persist)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.runStoppable(cmd, func(ctx context.Context, a *nodeagent.Agent) nodeagent.Result {
				if o.ModuleFrom != "" {
					o.ModuleFrom = underVolumeRoot(o.ModuleFrom)
				}
				return a.KMD(ctx, o)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Version, "version", "", "tt-kmd version (git tag ttkmd-<version>)")
	f.BoolVar(&o.ForceUnload, "force-unload", false, "SIGKILL processes holding /dev/tenstorrent (needs hostPID)")
	f.StringVar(&o.Commit, "commit", "", "commit the tag ttkmd-<version> must resolve to (40 hex digits), for the builds for "+
		"installed kernels the node does not run")
	f.StringVar(&o.GitURL, "git-url", nodeagent.DefaultKMDGitURL, "tt-kmd repository (https, or file:// for a local mirror)")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "overall deadline")
	f.DurationVar(&o.UnloadWait, "unload-wait", 10*time.Second, "how long to wait for refcnt 0 after killing holders")
	f.BoolVar(&o.SkipPersist, "no-persist", false, "do not install into /lib/modules/<kver>/updates and modules-load.d")
	f.StringVar(&o.ModuleSHA256, "module-sha256", "", "SHA-256 of the module kubectl tt vouched for: the only module loaded")
	f.StringVar(&o.ModuleFrom, "module-from", "", "directory of the shared module (a ConfigMap volume)")
	f.StringVar(&o.ModuleSigner, "module-signer", "", "SHA-256 of the certificate (DER, in --module-from) the module must be "+
		"signed with")
	return cmd
}

func newKMDBuildCommand(c *common) *cobra.Command {
	var o nodeagent.KMDBuildOptions
	cmd := &cobra.Command{
		Use:   "kmd-build --version X.Y.Z --commit SHA",
		Short: "Build tt-kmd X.Y.Z for the running kernel and print it (gzip, base64) for kubectl tt; loads nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.run(cmd, func(ctx context.Context, a *nodeagent.Agent) nodeagent.Result {
				a.Publish = cmd.OutOrStdout()
				return a.KMDBuild(ctx, o)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Version, "version", "", "tt-kmd version (git tag ttkmd-<version>)")
	f.StringVar(&o.Commit, "commit", "", "commit the tag ttkmd-<version> must resolve to (40 hex digits)")
	f.StringVar(&o.GitURL, "git-url", nodeagent.DefaultKMDGitURL, "tt-kmd repository (https, or file:// for a local mirror)")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "overall deadline")
	return cmd
}

func newCleanCacheCommand(c *common) *cobra.Command {
	return &cobra.Command{
		Use:   "clean-cache",
		Short: "Remove the module cache (/var/cache/tt-kmd) and a staged tt-smi from the host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.run(cmd, func(ctx context.Context, a *nodeagent.Agent) nodeagent.Result { return a.CleanCache(ctx) })
		},
	}
}

func newProbeCommand(c *common) *cobra.Command {
	var o nodeagent.ProbeOptions
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Measure the node (kernel, module, DKMS, headers, tt-smi, firmware, device holders) without changing it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.AgentVersion = version.Get().Version
			return c.run(cmd, func(ctx context.Context, a *nodeagent.Agent) nodeagent.Result { return a.Probe(ctx, o) })
		},
	}
	cmd.Flags().StringVar(&o.KMDVersion, "kmd-version", "", "also check the module cache for this tt-kmd version and, "+
		"unless it is loaded, its tag's commit (git ls-remote)")
	cmd.Flags().StringVar(&o.GitURL, "git-url", nodeagent.DefaultKMDGitURL, "tt-kmd repository the tag is looked up in")
	cmd.Flags().StringVar(&o.BundleURL, "bundle-url", "", "also read this firmware bundle's manifest and board images "+
		"(https or file://), as the flash would fetch it")
	cmd.Flags().StringVar(&o.BundleSHA256, "bundle-sha256", "", "SHA-256 the bundle must have (hex)")
	return cmd
}

func newSMICommand(c *common) *cobra.Command {
	var o nodeagent.SMIOptions
	cmd := &cobra.Command{
		Use:   "smi --version X.Y.Z",
		Short: "Atomically replace the host's /usr/local/bin/tt-smi",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.run(cmd, func(ctx context.Context, a *nodeagent.Agent) nodeagent.Result { return a.SMI(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Version, "version", "", "tt-smi version the source binary must report")
	f.StringVar(&o.Source, "source", envOr(EnvSMISource, nodeagent.DefaultSMISource),
		"tt-smi binary inside the helper image (env "+EnvSMISource+")")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "overall deadline")
	return cmd
}

func newFlashCommand(c *common) *cobra.Command {
	var o nodeagent.FlashOptions
	var urlEnv, urlBase string
	cmd := &cobra.Command{
		Use:   "flash --version X.Y.Z",
		Short: "Flash firmware bundle X.Y.Z onto every Tenstorrent device of the node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if urlEnv != "" {
				// A presigned URL comes from a Secret through the env, never argv.
				if o.BundleURL != "" {
					return fmt.Errorf("--bundle-url and --bundle-url-env are exclusive")
				}
				if o.BundleURL = os.Getenv(urlEnv); o.BundleURL == "" {
					return fmt.Errorf("--bundle-url-env %s: the variable is empty or unset", urlEnv)
				}
				// The admission policy vouched for the base in argv, not for
				// the Secret's URL: only a query may be added to it.
				if base, _, _ := strings.Cut(o.BundleURL, "?"); urlBase == "" || base != urlBase {
					return fmt.Errorf("--bundle-url-env %s: the URL is not --bundle-url-base %q with a query (refused: the "+
						"admission policy checked only the base)", urlEnv, urlBase)
				}
			}
			return c.runStoppable(cmd, func(ctx context.Context, a *nodeagent.Agent) nodeagent.Result { return a.Flash(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&urlEnv, "bundle-url-env", "", "read the bundle URL from this env var (a presigned URL, from a Secret)")
	f.StringVar(&urlBase, "bundle-url-base", "", "with --bundle-url-env: the URL without its query, which the env's URL must be")
	f.StringVar(&o.Version, "version", "", "firmware bundle version")
	f.StringVar(&o.BundleURL, "bundle-url", "", "bundle URL (https or file://); default the tt-system-firmware release asset")
	f.StringVar(&o.BundleSHA256, "bundle-sha256", "", "SHA-256 the bundle must have (hex); a mismatch refuses before flashing")
	f.StringVar(&o.ReadbackVersion, "readback-version", "", "version every device must report afterwards (default <version>.0)")
	f.BoolVar(&o.ForceWrite, "force-write", false,
		"flash even if already at the readback version, with tt-flash --force; also the consent to --force "+
			"where tt-flash refuses without it (an upgrade across more than one major, no running version)")
	f.BoolVar(&o.ContinueOnReadbackFailure, "continue-on-readback-failure", false,
		"flash even if the pre-flash readback fails after one reset")
	f.BoolVar(&o.AllowMajorDowngrade, "allow-major-downgrade", false,
		"flash a bundle of an older major version than a chip runs (tt-flash --allow-major-downgrades --force)")
	f.BoolVar(&o.Homogenize, "homogenize", true, "kept for compatibility: chips that disagree get the flags their cases need, no more")
	f.StringVar(&o.WorkDir, "work-dir", "", "where to download the bundle (default $TMPDIR)")
	f.BoolVar(&o.ForceUnload, "force-unload", false, "SIGKILL processes holding /dev/tenstorrent before the flash (needs hostPID)")
	f.DurationVar(&o.ResetSettle, "reset-settle", 5*time.Second, "pause after a healing reset")
	f.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "overall deadline")
	return cmd
}

func newRequirementsCommand() *cobra.Command {
	var output string
	var check bool
	cmd := &cobra.Command{
		Use:   "requirements [-o text|json] [--check-image]",
		Short: "Print every program and path the agent executes or reads, per task; --check-image checks the image's programs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			if check {
				return nodeagent.CheckImage(cmd.Context(), w, envOr("PATH", nodeagent.ImagePATH))
			}
			switch output {
			case "json":
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(nodeagent.Requirements)
			case "text", "":
				return nodeagent.WriteRequirements(w)
			}
			return fmt.Errorf("-o %s: want text or json", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().BoolVar(&check, "check-image", false, "check that every image program resolves on $PATH where declared and runs")
	return cmd
}
