package installcmd

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/pkg/cli"
	"github.com/rollbook/rollbook/pkg/install"
	"github.com/rollbook/rollbook/pkg/tt"
	"github.com/rollbook/rollbook/pkg/version"
)

// Skew is one object `install` would apply whose installed copy is missing
// or was installed by another version.
type Skew struct {
	Object string `json:"object"`
	// Installed is the installed copy's version label; empty when the
	// object is not installed.
	Installed string `json:"installed,omitempty"`
}

// SkewReport is what preflight reports about the cluster's install.
type SkewReport struct {
	Version string `json:"version"` // this binary's
	Checked int    `json:"checked"` // the objects compared
	Skews   []Skew `json:"skews,omitempty"`
	// Unreadable counts the objects the caller may not read: their version
	// is not known (an operator role is not granted to read the cluster's
	// admission policies).
	Unreadable int `json:"unreadable,omitempty"`
}

// Summary is one line: what differs and the command that fixes it.
func (r SkewReport) Summary(plugin string) (detail, fix string) {
	var missing, other []string
	for _, s := range r.Skews {
		if s.Installed == "" {
			missing = append(missing, s.Object)
		} else {
			other = append(other, fmt.Sprintf("%s (%s)", s.Object, s.Installed))
		}
	}
	var parts []string
	if len(other) > 0 {
		parts = append(parts, "from another version: "+listed(other))
	}
	switch {
	case len(missing) > 0 && len(missing) == r.Checked-len(other):
		parts = append(parts, fmt.Sprintf("not installed: none of the %d objects is (%s)", len(missing), listed(missing)))
	case len(missing) > 0:
		parts = append(parts, "not installed: "+listed(missing))
	}
	return fmt.Sprintf("this plugin is %s; %s", r.Version, strings.Join(parts, "; ")),
		fmt.Sprintf("a cluster admin runs `kubectl %s install --apply` with this plugin's version", plugin)
}

// listed names up to five, then how many more.
func listed(names []string) string {
	const most = 5
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}

// CheckInstalled compares what `kubectl <plugin> install` would apply with
// what the cluster holds: each object's version label against this
// binary's. The admission policies and roles a run relies on come from
// install; a copy from another version may refuse what this version
// renders, or allow what it no longer needs. Objects made per cluster (ate's
// per-WorkerPool Roles) are not checked.
func CheckInstalled(ctx context.Context, g *cli.Globals, plugin string) (SkewReport, error) {
	v := version.Get().Version
	rep := SkewReport{Version: v}
	objs, err := install.Objects(install.Options{Plugin: plugin, Version: v, Params: tt.DefaultAdminParams()})
	if err != nil {
		return rep, err
	}
	dyn, mapper, err := clients(g)
	if err != nil {
		return rep, err
	}
	rep.Checked = len(objs)
	for _, u := range objs {
		want := u.GetLabels()[install.LabelVersion]
		ri, err := resourceFor(dyn, mapper, u)
		if err != nil { // the cluster does not serve the kind: it is not installed
			rep.Skews = append(rep.Skews, Skew{Object: strings.ToLower(u.GetKind()) + "/" + key(u)})
			continue
		}
		got, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			rep.Skews = append(rep.Skews, Skew{Object: strings.ToLower(u.GetKind()) + "/" + key(u)})
		case apierrors.IsForbidden(err):
			rep.Unreadable++
		case err != nil:
			return rep, err
		default:
			if have := got.GetLabels()[install.LabelVersion]; have != want {
				if have == "" {
					have = "no version label"
				}
				rep.Skews = append(rep.Skews, Skew{Object: strings.ToLower(u.GetKind()) + "/" + key(u), Installed: have})
			}
		}
	}
	return rep, nil
}
