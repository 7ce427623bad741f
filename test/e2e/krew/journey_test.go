//go:build e2e

package krew

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollbook/rollbook/internal/ocilayout"
	"github.com/rollbook/rollbook/internal/simtest"
)

// The first run, as README's Install section tells it, from the release's
// own files: both plugins installed with krew from the snapshot archives;
// a cluster admin applies what `kubectl tt install` prints; a user bound
// only to those roles upgrades tt-kmd and the firmware with no
// --helper-image, and the helpers run from the image the release built
// and stamped into the plugins (the sim pulls exactly that digest). The
// same for kubectl ate, to its preflight. make rehearse runs it, with the
// image it pushed.
func TestFirstRunJourney(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two simulated clusters (-short runs none)")
	}
	layout, stamped := os.Getenv("ROLLBOOK_RELEASE_IMAGE_LAYOUT"), os.Getenv("ROLLBOOK_EXPECT_HELPER_IMAGE")
	if layout == "" || stamped == "" {
		t.Skip("no release image: the journey runs in make rehearse, which builds, pushes and stamps one " +
			"(ROLLBOOK_RELEASE_IMAGE_LAYOUT, ROLLBOOK_EXPECT_HELPER_IMAGE)")
	}
	im, err := ocilayout.Open(layout)
	if err != nil {
		t.Fatal(err)
	}
	repo, digest, _ := strings.Cut(stamped, "@")
	if digest != im.Digest {
		t.Fatalf("the plugins carry %s, the release's image is %s", stamped, im.Ref())
	}
	dist := distDir(t)
	root, err := simtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	m := readMeta(t, dist)
	krewRoot, manifests := t.TempDir(), t.TempDir()
	// The user's environment: no ROLLBOOK_HELPER_IMAGE, so the plugins run
	// the image they were released with.
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ROLLBOOK_HELPER_IMAGE=") {
			env = append(env, e)
		}
	}
	env = append(env, "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1",
		"PATH="+filepath.Join(krewRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, name := range []string{"tt", "ate"} {
		ours := render(t, root, dist, name, "v"+m.Version)
		krewInstall(t, env, dist, manifests, name, parse(t, "plugins/"+name+".yaml", ours), ours)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("tt", func(t *testing.T) {
		// The sim's nodes pull the release repository (through a mirror)
		// and run only the release's image.
		t.Setenv("ROLLBOOK_TT_IMAGE", layout)
		c := start(t, simtest.Options{Nodes: 2, Scenario: "tt-fleet", Env: []string{"ROLLBOOK_TT_IMAGE_MIRROR=" + repo}})
		run := plugin(t, kubectl, env, c)
		bundles := "file://" + filepath.Join(c.Dir, "bundles") + "/"
		run(0, "", "tt", "install", "--apply", "--bundle-url-prefix", bundles)
		bind(t, c, "tt-operator")
		run(0, user, "tt", "upgrade", "kmd", "--version", "2.8.0")
		// The helpers ran from the stamped digest: the sim pulls no other
		// image, so a roll that finished ran it.
		run(0, user, "tt", "upgrade", "firmware", "--version", "19.0.0", "--bundle-url", bundles+"fw_pack-19.0.0.fwbundle",
			"--bundle-sha256", fileSHA256(t, filepath.Join(c.Dir, "bundles", "fw_pack-19.0.0.fwbundle")))
	})

	t.Run("ate", func(t *testing.T) {
		c := start(t, simtest.Options{Nodes: 2, Scenario: "ate-fleet"})
		run := plugin(t, kubectl, env, c)
		run(0, "", "ate", "install", "--apply")
		bind(t, c, "ate-operator")
		run(0, user, "ate", "status")
	})
}

const user = "dana@example.com"

func start(t *testing.T, o simtest.Options) *simtest.Cluster {
	t.Helper()
	c, err := simtest.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	c.ExpectNoViolations(t)
	return c
}

// plugin runs `kubectl ARGS` as the krew-installed plugin does, as user
// (none: the cluster admin), wanting exit code want; it returns the output.
func plugin(t *testing.T, kubectl string, env []string, c *simtest.Cluster) func(want int, as string, args ...string) string {
	return func(want int, as string, args ...string) string {
		t.Helper()
		args = append(args, "--kubeconfig", c.Kubeconfig)
		if as != "" {
			args = append(args, "--as", as)
		}
		cmd := exec.Command(kubectl, args...)
		cmd.Env = env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl %s (%s) → exit %d\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), code, out)
		if code != want {
			t.Fatalf("kubectl %s: exit %d, want %d", strings.Join(args[:2], " "), code, want)
		}
		return string(out)
	}
}

// bind binds user to ClusterRole role and to every Role of that name, as
// the roles' own comments say.
func bind(t *testing.T, c *simtest.Cluster, role string) {
	t.Helper()
	ctx := t.Context()
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + ":dana"}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	roles, err := c.Client.RbacV1().Roles(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + role})
	if err != nil || len(roles.Items) == 0 {
		t.Fatalf("install applied no Role %s: %v", role, err)
	}
	for _, r := range roles.Items {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + ":dana", Namespace: r.Namespace}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}}
		if _, err := c.Client.RbacV1().RoleBindings(r.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// fileSHA256 is the hex SHA-256 of a file, as a release's checksum lists it.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
