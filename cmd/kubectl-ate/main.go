// kubectl-ate is the `kubectl ate` plugin.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/pkg/ate/atecmd"
	"github.com/rollbook/rollbook/pkg/cli"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	root := atecmd.NewRootCommand(streams)
	os.Exit(cli.Execute(root, cli.ArgsForInvocation("ate", os.Args[0], os.Args[1:]), os.Stderr))
}
