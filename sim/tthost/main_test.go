package tthost

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rollbook/rollbook/internal/fakehost"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/nodeagent/agentcmd"
	"github.com/rollbook/rollbook/sim/helperns"
)

// The test binary is also the fake node tools (like the sim binary) and,
// invoked as kubectl-tt, the helper agent: `kubectl-tt node-agent …` is
// the real node agent, `kubectl-tt fake …` a stand-in whose exit code,
// message and duration the test chooses.
func TestMain(m *testing.M) {
	switch name := filepath.Base(os.Args[0]); {
	case len(os.Args) > 1 && os.Args[1] == helperns.Subcommand:
		os.Exit(helperns.Main(os.Args[2:]))
	case fakehost.IsTool(name):
		os.Exit(fakehost.Main(os.Args))
	case name == AgentName && len(os.Args) > 1 && os.Args[1] == "node-agent":
		cmd := agentcmd.NewCommand()
		cmd.SetArgs(os.Args[2:])
		if err := cmd.Execute(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	case name == AgentName:
		os.Exit(fakeAgent(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeAgent: fake [exit N] [sleep DURATION] [msg M | env NAME] writes "<msg> root=<FAKEHOST_ROOT>
// node=<NODE_NAME>" to the termination log and exits N.
func fakeAgent(args []string) int {
	code, msg := 0, "fake agent"
	for i := 1; i+1 < len(args); i += 2 {
		switch args[i] {
		case "exit":
			code, _ = strconv.Atoi(args[i+1])
		case "sleep":
			d, _ := time.ParseDuration(args[i+1])
			time.Sleep(d)
		case "on-term": // "ignore": SIGTERM does nothing; "finish": it ends the sleep, the agent reports
			ch := make(chan os.Signal, 1)
			signal.Notify(ch, syscall.SIGTERM)
			// Says so on the host: a SIGTERM before this would kill it.
			_ = os.WriteFile(filepath.Join(os.Getenv(envFakeRoot), "sigterm-"+args[i+1]), nil, 0o644)
			if args[i+1] == "finish" {
				d, _ := time.ParseDuration(args[i+3])
				select {
				case <-ch:
					msg = "stopped on SIGTERM"
				case <-time.After(d):
				}
				i += 2
			}
		case "msg":
			msg = args[i+1]
		case "env": // msg becomes NAME=<its value>
			msg = args[i+1] + "=" + os.Getenv(args[i+1])
		}
	}
	fmt.Println("fake agent output")
	out := fmt.Sprintf("%s root=%s node=%s", msg, os.Getenv(envFakeRoot), os.Getenv(envNodeName))
	termLog := os.Getenv(envTerminationLog) // outside the image only
	if termLog == "" {
		termLog = nodeagent.DefaultTerminationLog
	}
	if err := os.WriteFile(termLog, []byte(out), 0o644); err != nil {
		return 99
	}
	return code
}
