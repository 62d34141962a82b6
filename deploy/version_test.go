package deploy

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersionStampedFromGit: hack/version.sh names the tree's version after git
// (`git describe` past a v* tag, v0.0.0-<commits>-g<hash> before the first), and
// the binary built with its ldflags (as `make build` builds it) prints that version
// in --version.
func TestVersionStampedFromGit(t *testing.T) {
	out, err := exec.Command("../hack/version.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("hack/version.sh: %v\n%s", err, out)
	}
	v := strings.TrimSpace(string(out))
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-\d+-g[0-9a-f]{7,})?(-dirty)?$`).MatchString(v) {
		t.Fatalf("version %q is not git describe's form", v)
	}
	head, err := exec.Command("git", "rev-parse", "--short=7", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	if h := strings.TrimSpace(string(head)); !strings.Contains(v, "-g"+h) && !regexp.MustCompile(`^v\d+\.\d+\.\d+(-dirty)?$`).MatchString(v) {
		t.Errorf("version %q does not name HEAD %s", v, h)
	}
	ldflags, err := exec.Command("../hack/version.sh", "ldflags").Output()
	if err != nil {
		t.Fatalf("hack/version.sh ldflags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "kube-proxy")
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, "../cmd/kube-proxy")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("kube-proxy --version: %v\n%s", err, got)
	}
	if want := "kube-proxy-ipvs " + v + " (compatible with kube-proxy v1.37.2)\n"; string(got) != want {
		t.Errorf("--version = %q, want %q", got, want)
	}
}
