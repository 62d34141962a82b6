// Package image tests the files the Dockerfile copies into the container image.
package image

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// save is what one fake iptables-*-save does: print out and exit 0 (after
// reading its stdin with eatStdin), fail (exit 1), hang past the 5 s both give
// a save, or not exist.
type save struct {
	out      string
	fail     bool
	hang     bool
	missing  bool
	eatStdin bool
}

// node is what the four saves print on a node.
type node struct {
	legacy4, legacy6, nft4, nft6 save
}

const (
	canary = "*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"
	hint   = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
	// kubeRules: 2 rules naming KUBE-, 1 other.
	kubeRules = "*filter\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\n-A KUBE-FIREWALL -m mark --mark 0x8000 -j DROP\n-A INPUT -i lo -j ACCEPT\nCOMMIT\n"
	// otherRules: 3 rules, none of kube.
	otherRules = "*filter\n-A INPUT -i lo -j ACCEPT\n-A INPUT -p tcp --dport 22 -j ACCEPT\n-A FORWARD -j DROP\nCOMMIT\n"
)

// fakeNode writes, in a fresh folder, the four saves of n, the backends'
// iptables, -save and -restore (each logs "NAME as ARGV0 ARGS" to calls and
// prints "ran NAME as ARGV0"; a save prints its output instead), an update-alternatives
// that repoints the fake alternatives as Debian's does (or fails with
// altFails), the six commands the image has as links to the wrapper, and the
// few system tools the wrapper uses. It returns the folder, to be PATH alone:
// no real iptables of this machine can run.
func fakeNode(t *testing.T, n node, altFails bool) string {
	t.Helper()
	dir := t.TempDir()
	q := "'" + dir + "'" // quoted for the scripts (test names have spaces and brackets)
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"sh", "cat", "awk", "timeout", "readlink", "sleep", "ln"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	saves := map[string]save{"iptables-legacy-save": n.legacy4, "ip6tables-legacy-save": n.legacy6,
		"iptables-nft-save": n.nft4, "ip6tables-nft-save": n.nft6}
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, mode := range []string{"legacy", "nft"} {
			for _, suffix := range []string{"", "-save", "-restore"} {
				name := family + "-" + mode + suffix
				s, isSave := saves[name]
				// Logged as "NAME as ARGV0 ARGS": what ran, and by which name.
				script := "#!/bin/sh\necho \"" + name + " as ${0##*/} $*\" >>" + q + "/calls\n"
				switch {
				case s.missing:
					continue
				case s.hang:
					script += "exec sleep 60\n"
				case s.fail:
					script += "exit 1\n"
				case isSave:
					if s.eatStdin {
						script += "cat >/dev/null\n"
					}
					if err := os.WriteFile(filepath.Join(dir, name+".out"), []byte(s.out), 0o644); err != nil {
						t.Fatal(err)
					}
					script += "cat " + q + "/" + name + ".out\n"
				default:
					script += "echo \"ran " + name + " as ${0##*/}\"\n[ \"${1:-}\" != --exit3 ] || exit 3\n"
					if suffix == "-restore" {
						script += "cat\n" // the rules it was given
					}
				}
				write(name, script)
			}
		}
	}
	alt := "#!/bin/sh\necho \"update-alternatives $*\" >>" + q + "/calls\n"
	if altFails {
		alt += "echo 'update-alternatives: error: unable to make /etc/alternatives/iptables.dpkg-tmp: Read-only file system' >&2\nexit 2\n"
	} else {
		// --set NAME PATH: NAME and its -save, -restore point at PATH's.
		alt += "[ \"$1\" = --set ] || exit 2\nfor s in '' -save -restore; do ln -sfn \"$3$s\" " + q + "/$2$s || exit 2; done\necho \"update-alternatives: using $3 to provide /usr/sbin/$2 ($2) in manual mode\"\n"
	}
	write("update-alternatives", alt)
	wrapper, err := filepath.Abs("iptables-wrapper")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		if err := os.Symlink(wrapper, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// run runs the wrapper as name (one of its links in dir) with PATH=dir.
func run(t *testing.T, dir, name string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = append([]string{"PATH=" + dir}, env...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("%s: %v", name, err)
	}
	return o.String(), e.String(), code
}

// calls is what the fake tools logged, one call a line.
func calls(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "calls"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// daemonMode is the daemon's own choice on the fake node (PATH=dir).
func daemonMode(t *testing.T, dir string, env ...string) (iptables.Mode, error) {
	t.Helper()
	t.Setenv("PATH", dir)
	t.Setenv(iptables.EnvMode, "")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return iptables.DetectMode(context.Background(), utilexec.New())
}

// TestWrapperChoosesAsTheDaemon: on each node the image's iptables wrapper
// picks the backend the daemon's DetectMode picks (the one rule both follow),
// points both alternatives at it and runs the command there with its
// arguments, its stdout untouched.
func TestWrapperChoosesAsTheDaemon(t *testing.T) {
	empty := save{}
	for _, c := range []struct {
		name string
		node node
		want iptables.Mode
	}{
		{"empty node: nft, as upstream", node{empty, empty, empty, empty}, iptables.ModeNFT},
		{"kubelet canary in legacy", node{save{out: canary + otherRules}, empty, empty, empty}, iptables.ModeLegacy},
		{"kubelet hint in legacy ip6tables only", node{empty, save{out: hint}, empty, empty}, iptables.ModeLegacy},
		{"kubelet canary in nft", node{empty, empty, save{out: canary}, empty}, iptables.ModeNFT},
		{"hints in both: nft first", node{save{out: canary + kubeRules}, empty, save{out: hint}, empty}, iptables.ModeNFT},
		{"hint in legacy beats more rules in nft", node{save{out: hint}, empty, save{out: kubeRules + otherRules}, save{out: otherRules}}, iptables.ModeLegacy},
		{"more kube rules in legacy", node{save{out: kubeRules}, empty, save{out: otherRules + otherRules}, empty}, iptables.ModeLegacy},
		{"more kube rules in nft, more rules in legacy", node{save{out: otherRules + otherRules}, empty, save{out: kubeRules}, empty}, iptables.ModeNFT},
		{"no kube rules, more rules in legacy", node{save{out: otherRules}, save{out: otherRules}, save{out: otherRules}, empty}, iptables.ModeLegacy},
		{"no kube rules, as many in each", node{save{out: otherRules}, empty, save{out: otherRules}, empty}, iptables.ModeNFT},
		{"nft save fails (no nf_tables)", node{empty, empty, save{fail: true}, save{fail: true}}, iptables.ModeLegacy},
		{"nft iptables-save fails, its ip6tables-save holds the hint", node{empty, empty, save{fail: true}, save{out: hint}}, iptables.ModeLegacy},
		{"legacy not installed", node{save{missing: true}, save{missing: true}, save{out: otherRules}, empty}, iptables.ModeNFT},
		{"legacy not installed, nft fails", node{save{missing: true}, save{missing: true}, save{fail: true}, save{fail: true}}, iptables.ModeNFT},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := fakeNode(t, c.node, false)
			got, err := daemonMode(t, dir)
			if err != nil || got != c.want {
				t.Fatalf("the daemon's DetectMode = %q, %v; the case wants %q", got, err, c.want)
			}
			if err := os.Remove(filepath.Join(dir, "calls")); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			for _, call := range []struct {
				name string
				args []string
				ran  string
			}{
				// The first call re-runs itself once the alternatives point at
				// the backend; the second goes there straight.
				{"iptables-save", []string{"-t", "nat"}, "iptables-" + string(c.want) + "-save as iptables-save -t nat"},
				{"ip6tables", []string{"-w", "5", "-L"}, "ip6tables-" + string(c.want) + " as ip6tables -w 5 -L"},
			} {
				stdout, stderr, code := run(t, dir, call.name, nil, call.args...)
				log := calls(t, dir)
				// The command's exit status is the backend's (its save may fail).
				wantCode := 0
				if saveFails(c.node, c.want) && strings.HasSuffix(call.name, "-save") {
					wantCode = 1
				}
				if code != wantCode || stderr != "" {
					t.Errorf("%s: exit %d, stderr %q; want exit %d", call.name, code, stderr, wantCode)
				}
				if last := log[len(log)-1]; last != call.ran {
					t.Errorf("%s %v ran %q last, want %q (calls: %q)", call.name, call.args, last, call.ran, log)
				}
				if strings.HasSuffix(call.name, "-save") {
					if stdout != saveOut(c.node, c.want) {
						t.Errorf("%s printed %q, want the backend's output only", call.name, stdout)
					}
				} else if stdout != "ran "+strings.Fields(call.ran)[0]+" as "+call.name+"\n" {
					t.Errorf("%s printed %q", call.name, stdout)
				}
			}
			// The first call chose, pointed both alternatives and ran; the
			// second went straight to the backend.
			want := []string{
				"update-alternatives --set iptables " + dir + "/iptables-" + string(c.want),
				"update-alternatives --set ip6tables " + dir + "/ip6tables-" + string(c.want),
			}
			var alts []string
			for _, l := range calls(t, dir) {
				if strings.HasPrefix(l, "update-alternatives ") {
					alts = append(alts, l)
				}
			}
			if strings.Join(alts, "\n") != strings.Join(want, "\n") {
				t.Errorf("update-alternatives calls %q, want %q", alts, want)
			}
		})
	}
}

// saveOut is what the node's iptables-save of mode prints.
func saveOut(n node, mode iptables.Mode) string {
	if mode == iptables.ModeLegacy {
		return n.legacy4.out
	}
	return n.nft4.out
}

// saveFails: the node's iptables-save of mode fails.
func saveFails(n node, mode iptables.Mode) bool {
	if mode == iptables.ModeLegacy {
		return n.legacy4.fail
	}
	return n.nft4.fail
}

// TestWrapperEnvironmentOverride: KUBE_PROXY_IPTABLES_MODE decides for both;
// a wrong value stops both.
func TestWrapperEnvironmentOverride(t *testing.T) {
	n := node{save{}, save{}, save{out: canary}, save{}}
	dir := fakeNode(t, n, false)
	if got, err := daemonMode(t, dir, iptables.EnvMode+"=legacy"); err != nil || got != iptables.ModeLegacy {
		t.Fatalf("DetectMode with %s=legacy: %q, %v", iptables.EnvMode, got, err)
	}
	if out, stderr, code := run(t, dir, "iptables", []string{iptables.EnvMode + "=legacy"}, "-V"); code != 0 || out != "ran iptables-legacy as iptables\n" || stderr != "" {
		t.Errorf("iptables with %s=legacy: exit %d, %q, %q", iptables.EnvMode, code, out, stderr)
	}
	if log := calls(t, dir); log[0] != "update-alternatives --set iptables "+dir+"/iptables-legacy" || len(log) != 3 || log[2] != "iptables-legacy as iptables -V" {
		t.Errorf("calls %q: want the legacy alternatives set, no save run, iptables-legacy run", log)
	}

	dir = fakeNode(t, n, false)
	if _, err := daemonMode(t, dir, iptables.EnvMode+"=nftables"); err == nil {
		t.Error("DetectMode accepted nftables")
	}
	if _, stderr, code := run(t, dir, "iptables", []string{iptables.EnvMode + "=nftables"}, "-V"); code != 2 || !strings.Contains(stderr, "want legacy or nft") {
		t.Errorf("iptables with %s=nftables: exit %d, %q; want 2 and the reason", iptables.EnvMode, code, stderr)
	}
	if log := calls(t, dir); len(log) != 1 || log[0] != "" {
		t.Errorf("calls %q, want none", log)
	}
}

// TestWrapperReadOnlyRoot: alternatives that cannot change (a read-only root
// filesystem) leave every call to decide again and run the backend directly,
// with a warning on stderr, the exit status the backend's.
func TestWrapperReadOnlyRoot(t *testing.T) {
	dir := fakeNode(t, node{save{out: canary}, save{}, save{}, save{}}, true)
	for i := 0; i < 2; i++ {
		out, stderr, code := run(t, dir, "iptables-restore", nil, "--exit3")
		if code != 3 || out != "ran iptables-legacy-restore as iptables-legacy-restore\n" || !strings.Contains(stderr, "cannot point the iptables alternatives at legacy") || !strings.Contains(stderr, "Read-only file system") {
			t.Errorf("call %d: exit %d, stdout %q, stderr %q", i+1, code, out, stderr)
		}
	}
	saves := 0
	for _, l := range calls(t, dir) {
		if strings.HasPrefix(l, "iptables-legacy-save") {
			saves++
		}
	}
	if saves != 2 {
		t.Errorf("iptables-legacy-save ran %d times over two calls, want 2 (calls %q)", saves, calls(t, dir))
	}
}

// TestWrapperHungSave: a save that hangs counts as failed after 5 s, for both.
func TestWrapperHungSave(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test waits 10 s")
	}
	dir := fakeNode(t, node{save{}, save{}, save{hang: true}, save{}}, false)
	start := time.Now()
	if got, err := daemonMode(t, dir); err != nil || got != iptables.ModeLegacy {
		t.Errorf("DetectMode with a hung iptables-nft-save: %q, %v; want legacy", got, err)
	}
	t.Logf("DetectMode took %s", time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	if out, stderr, code := run(t, dir, "iptables", nil, "-V"); code != 0 || out != "ran iptables-legacy as iptables\n" || stderr != "" {
		t.Errorf("iptables: exit %d, %q, %q", code, out, stderr)
	}
	if d := time.Since(start); d < 5*time.Second || d > 30*time.Second {
		t.Errorf("the wrapper took %s, want its 5 s bound (the save hangs 60 s)", d)
	}
	if log := calls(t, dir); !strings.Contains(strings.Join(log, "\n"), "update-alternatives --set iptables "+dir+"/iptables-legacy") {
		t.Errorf("calls %q: want legacy", log)
	}
}

// TestWrapperKeepsStdin: iptables-restore gets all of its stdin, even from
// the first call, whose saves might read theirs.
func TestWrapperKeepsStdin(t *testing.T) {
	dir := fakeNode(t, node{save{out: canary, eatStdin: true}, save{eatStdin: true}, save{eatStdin: true}, save{eatStdin: true}}, false)
	rules := "*filter\n-A INPUT -j ACCEPT\nCOMMIT\n"
	cmd := exec.Command(filepath.Join(dir, "iptables-restore"), "--noflush")
	cmd.Env = []string{"PATH=" + dir}
	cmd.Stdin = strings.NewReader(rules)
	out, err := cmd.Output()
	if want := "ran iptables-legacy-restore as iptables-restore\n" + rules; err != nil || string(out) != want {
		t.Errorf("iptables-restore: %v, printed %q, want %q", err, out, want)
	}
}

// TestWrapperRefusesOtherNames: run by another name it does nothing.
func TestWrapperRefusesOtherNames(t *testing.T) {
	dir := fakeNode(t, node{}, false)
	wrapper, _ := filepath.Abs("iptables-wrapper")
	if err := os.Symlink(wrapper, filepath.Join(dir, "iptables-wrapper")); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, dir, "iptables-wrapper", nil, "-V"); code != 2 || !strings.Contains(stderr, "not as iptables-wrapper") {
		t.Errorf("exit %d, %q", code, stderr)
	}
	if log := calls(t, dir); len(log) != 1 || log[0] != "" {
		t.Errorf("calls %q, want none", log)
	}
}
