package nodeagent

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// versionArgs is the harmless argv each image program answers with exit 0,
// so CheckImage knows it runs (its libraries are there), not only exists.
var versionArgs = map[string][]string{"ipmitool": {"-V"}}

// CheckImage checks every image requirement against the file system the
// agent runs in (the helper image, or its root filesystem under chroot):
// each program resolves on pathList to the declared path, is executable
// and answers its version flag; each file read opens. It writes one line
// per entry and fails if any is missing.
func CheckImage(ctx context.Context, w io.Writer, pathList string) error {
	seen := map[string]bool{}
	var missing []string
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range Requirements {
		if r.Where != InImage || r.Kind == KindWrite || seen[r.Name+"\x00"+r.Path] {
			continue
		}
		seen[r.Name+"\x00"+r.Path] = true
		var got string
		var err error
		if r.Kind == KindRead {
			got, err = r.Path, checkReadable(r.Path)
		} else {
			got, err = checkProgram(ctx, r, pathList)
		}
		status := "ok"
		if err != nil {
			status = "MISSING"
			missing = append(missing, fmt.Sprintf("%s (%s): %v", r.Name, orDash(r.Package), err))
			got = err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", status, r.Name, orDash(r.Package), got)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("the image lacks %d program(s) the agent runs: %s", len(missing), strings.Join(missing, "; "))
	}
	return nil
}

func checkProgram(ctx context.Context, r Requirement, pathList string) (string, error) {
	p, err := lookIn(pathList, r.Name)
	if err != nil && filepath.IsAbs(r.Path) {
		// Executed by its path (the smi source).
		p, err = lookIn(pathList, r.Path)
	}
	if err != nil {
		return "", err
	}
	if r.Path != "" && p != r.Path {
		return "", fmt.Errorf("resolves to %s, not %s", p, r.Path)
	}
	args := versionArgs[r.Name]
	if args == nil {
		args = []string{"--version"}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, args...).CombinedOutput()
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", p, strings.Join(args, " "), err, first)
	}
	return p + ": " + first, nil
}

func checkReadable(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	return f.Close()
}

// lookIn resolves name as a shell would with PATH=pathList.
func lookIn(pathList, name string) (string, error) {
	if filepath.IsAbs(name) {
		return name, executable(name)
	}
	for _, dir := range filepath.SplitList(pathList) {
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on %s", name, pathList)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// WriteRequirements prints the table as text.
func WriteRequirements(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKIND\tWHERE\tNAME\tPATH\tPACKAGE\tWHY")
	for _, r := range Requirements {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Task, r.Kind, r.Where, r.Name, orDash(r.Path), orDash(r.Package), r.Why)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
