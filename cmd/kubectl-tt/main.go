// kubectl-tt is the `kubectl tt` plugin.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/tt/ttcmd"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	root := ttcmd.NewRootCommand(streams)
	os.Exit(cli.Execute(root, cli.ArgsForInvocation("tt", os.Args[0], os.Args[1:]), os.Stderr))
}
