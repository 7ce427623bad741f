// Command nodeimage builds the node-agent image (internal/nodeimage): `make
// image` runs it on hack/image-rootfs.sh's root filesystem.
//
//	nodeimage build --rootfs DIR [--out DIR] [--version vX.Y.Z] [--revision SHA]
//	nodeimage ref DIR     the image of a layout by digest (repository@sha256:…)
//	nodeimage env DIR NAME     the image config's environment variable NAME
//	nodeimage label DIR NAME   the image config's label NAME
//	nodeimage unpack DIR DEST   each layer into DEST/<n> (verified); prints
//	                      the overlay's lowerdir (topmost first)
//
// build prints the image's reference by digest last.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollbook/rollbook/internal/nodeimage"
	"github.com/rollbook/rollbook/internal/ocilayout"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nodeimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: nodeimage build --rootfs DIR [--out DIR] [--version V] [--revision SHA] | nodeimage ref DIR")
	}
	switch args[0] {
	case "ref":
		if len(args) != 2 {
			return fmt.Errorf("usage: nodeimage ref DIR")
		}
		im, err := ocilayout.Open(args[1])
		if err != nil {
			return err
		}
		fmt.Println(im.Ref())
		return nil
	case "build":
		return build(args[1:])
	case "env":
		if len(args) != 3 {
			return fmt.Errorf("usage: nodeimage env DIR NAME")
		}
		im, err := ocilayout.Open(args[1])
		if err != nil {
			return err
		}
		fmt.Println(im.Env(args[2]))
		return nil
	case "label":
		if len(args) != 3 {
			return fmt.Errorf("usage: nodeimage label DIR NAME")
		}
		im, err := ocilayout.Open(args[1])
		if err != nil {
			return err
		}
		fmt.Println(im.Config.Config.Labels[args[2]])
		return nil
	case "unpack":
		if len(args) != 3 {
			return fmt.Errorf("usage: nodeimage unpack DIR DEST")
		}
		im, err := ocilayout.Open(args[1])
		if err != nil {
			return err
		}
		var lower []string
		for i, l := range im.Layers {
			d := filepath.Join(args[2], fmt.Sprint(i))
			if err := im.Unpack(l, d); err != nil {
				return err
			}
			lower = append([]string{d}, lower...)
		}
		fmt.Println(strings.Join(lower, ":"))
		return nil
	}
	return fmt.Errorf("unknown command %q (build, ref, env, label, unpack)", args[0])
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	rootfs := fs.String("rootfs", "", "the root filesystem hack/image-rootfs.sh printed")
	out := fs.String("out", ".cache/node-agent-image", "the OCI layout to write (replaced)")
	pinsFile := fs.String("pins", nodeimage.PinsFile, "the pins")
	version := fs.String("version", "", "the release version (vX.Y.Z); empty for a development image")
	revision := fs.String("revision", "", "the git commit the image is built from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rootfs == "" {
		return fmt.Errorf("--rootfs is required (bash hack/image-rootfs.sh prints it)")
	}
	start := time.Now()
	pins, err := nodeimage.ReadPins(*pinsFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	release, err := nodeimage.LockFor(*rootfs, *out)
	if err != nil {
		return err
	}
	defer release()
	tmp, err := os.MkdirTemp(filepath.Dir(*out), ".agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	agent := filepath.Join(tmp, "kubectl-tt")
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	if err := nodeimage.BuildAgent(wd, *version, *revision, agent); err != nil {
		return err
	}
	res, err := nodeimage.Build(nodeimage.Options{Rootfs: *rootfs, Agent: agent, Pins: pins, Out: *out, Version: *version,
		Revision: *revision})
	if err != nil {
		return err
	}
	if s := pins.StandIns(); len(s) > 0 {
		fmt.Fprintf(os.Stderr, "nodeimage: STAND-INS for %v (pinned unverified in %s): not a releasable image\n", s, *pinsFile)
	}
	fmt.Fprintf(os.Stderr, "nodeimage: %s (%s) in %s, built in %s\n", res.Tag, res.Digest, *out,
		time.Since(start).Round(100*time.Millisecond))
	fmt.Println(res.Ref)
	return nil
}
