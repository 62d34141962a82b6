package deploy

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// imagePlan runs hack/image-rootfs.sh --plan (what it reads from a
// Dockerfile, without building) on dockerfile.
func imagePlan(t *testing.T, dockerfile string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "../hack/image-rootfs.sh", "--plan")
	cmd.Env = append(os.Environ(), "KPI_DOCKERFILE="+dockerfile, "KPI_CACHE="+t.TempDir(), "KPI_IMAGE_ARCH=amd64")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestImageRootfsReadsTheDockerfile: the e2e image root filesystem is built
// from the Dockerfile's runtime stage itself: its base, its RUN and COPY steps
// in order (the package list, the iptables wrapper with its mode and sha256,
// the alternatives pointing at it), and the binary's COPY destination. Its
// ARGs and OCI LABELs are recorded (make release sets them on the image) and
// are not part of the root filesystem's cache key.
func TestImageRootfsReadsTheDockerfile(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("hack/image-rootfs.sh runs on Debian (dpkg)")
	}
	out, err := imagePlan(t, "../Dockerfile")
	if err != nil {
		t.Fatalf("--plan: %v\n%s", err, out)
	}
	wrapper, err := os.ReadFile("../hack/image/iptables-wrapper")
	if err != nil {
		t.Fatal(err)
	}
	steps := []string{
		"run: apt-get update && apt-get install -y --no-install-recommends iptables ipset conntrack ipvsadm kmod nftables ca-certificates && rm -rf /var/lib/apt/lists/*\n",
		fmt.Sprintf("copy: 0755 %x hack/image/iptables-wrapper /usr/sbin/iptables-wrapper\n", sha256.Sum256(wrapper)),
		"run: for f in iptables ip6tables; do update-alternatives --install /usr/sbin/$f $f /usr/sbin/iptables-wrapper 100 --slave /usr/sbin/$f-restore $f-restore /usr/sbin/iptables-wrapper --slave /usr/sbin/$f-save $f-save /usr/sbin/iptables-wrapper && update-alternatives --set $f /usr/sbin/iptables-wrapper || exit 1; done\n",
	}
	if !strings.Contains(out, strings.Join(steps, "")) {
		t.Errorf("--plan lacks the steps, in this order:\n%s\ngot:\n%s", strings.Join(steps, ""), out)
	}
	for _, want := range []string{
		"from: debian:bookworm-slim\n",
		"binary: /usr/local/bin/kube-proxy\n",
		"entrypoint: /usr/local/bin/kube-proxy \n",
		"source: deb http://deb.debian.org/debian bookworm bookworm-updates main\n",
		"source: deb http://deb.debian.org/debian-security bookworm-security main\n",
		"arg: VERSION=v0.0.0-dev\n",
		"arg: REVISION=unknown\n",
		"arg: CREATED=1970-01-01T00:00:00Z\n",
		"label: org.opencontainers.image.title=kube-proxy-ipvs\n",
		"label: org.opencontainers.image.source=https://github.com/kube-proxy-ipvs/kube-proxy-ipvs\n",
		"label: org.opencontainers.image.licenses=Apache-2.0\n",
		"label: org.opencontainers.image.version=${VERSION}\n",
		"label: org.opencontainers.image.revision=${REVISION}\n",
		"label: org.opencontainers.image.created=${CREATED}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--plan lacks %q:\n%s", want, out)
		}
	}

	// Without its ARG and LABEL lines the stage has the same cache entry.
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	inLabel := false
	for _, line := range strings.Split(string(data), "\n") {
		if inLabel || strings.HasPrefix(line, "LABEL ") {
			inLabel = strings.HasSuffix(line, "\\")
			continue
		}
		if !strings.HasPrefix(line, "ARG ") || strings.Contains(line, "golang") {
			kept = append(kept, line)
		}
	}
	// (in a build context of its own, with the file its COPY takes)
	bareContext := t.TempDir()
	bare := filepath.Join(bareContext, "Dockerfile")
	if err := os.WriteFile(bare, []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(bareContext, "hack/image"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bareContext, "hack/image/iptables-wrapper"), wrapper, 0o644); err != nil {
		t.Fatal(err)
	}
	bareOut, err := imagePlan(t, bare)
	if err != nil {
		t.Fatalf("--plan without ARG and LABEL: %v\n%s", err, bareOut)
	}
	if strings.Contains(bareOut, "label: ") || planEntry(out) != planEntry(bareOut) {
		t.Errorf("ARG and LABEL change the cache entry or survive their removal:\n%s\n---\n%s", out, bareOut)
	}
}

// TestImageRootfsKeysCopiedFiles: a file the runtime stage COPYs from the
// build context keys the cache entry by its content and mode (a changed
// wrapper rebuilds the root filesystem), and only one regular file inside the
// context, to a file path, is taken.
func TestImageRootfsKeysCopiedFiles(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("hack/image-rootfs.sh runs on Debian (dpkg)")
	}
	ctx := t.TempDir()
	dockerfile := filepath.Join(ctx, "Dockerfile")
	stage := func(copyLine string) {
		t.Helper()
		text := "FROM golang AS build\nRUN go build\nFROM debian:bookworm\nRUN true\n" + copyLine + "\nRUN true\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n"
		if err := os.WriteFile(dockerfile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := func(text string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(ctx, "tool")
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	entry := func() string {
		t.Helper()
		out, err := imagePlan(t, dockerfile)
		if err != nil {
			t.Fatalf("--plan: %v\n%s", err, out)
		}
		return planEntry(out)
	}
	stage("COPY tool /usr/sbin/tool")
	file("a", 0o755)
	a := entry()
	file("b", 0o755)
	b := entry()
	file("a", 0o644)
	a644 := entry()
	stage("COPY --chmod=0755 tool /usr/sbin/tool")
	aChmod := entry()
	file("a", 0o755)
	if a == b || a == a644 || aChmod != a {
		t.Errorf("entries: content a %s, b %s; mode 0644 %s; --chmod=0755 over 0644 %s: want the content and the resulting mode to key it", a, b, a644, aChmod)
	}
	if err := os.Mkdir(filepath.Join(ctx, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"COPY dir /usr/sbin/dir",
		"COPY ../outside /usr/sbin/tool",
		"COPY /etc/passwd /usr/sbin/tool",
		"COPY tool /usr/sbin/",
		"COPY tool usr/sbin/tool",
		"COPY --chown=1:1 tool /usr/sbin/tool",
		"COPY tool other /usr/sbin/",
		"COPY missing /usr/sbin/tool",
	} {
		stage(bad)
		if out, err := imagePlan(t, dockerfile); err == nil || !strings.Contains(out, "[image] FAIL") {
			t.Errorf("%s: --plan = %v, want a FAIL line:\n%s", bad, err, out)
		}
	}
}

// planEntry is the cache entry's name in a --plan output.
func planEntry(plan string) string {
	for _, line := range strings.Split(plan, "\n") {
		if e, ok := strings.CutPrefix(line, "entry: "); ok {
			return filepath.Base(e)
		}
	}
	return ""
}

// TestImageRootfsRefusesWhatItCannotReplay: an instruction of the runtime
// stage the script does not replay, or a base that is not Debian, stops it
// instead of building a different image.
func TestImageRootfsRefusesWhatItCannotReplay(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("hack/image-rootfs.sh runs on Debian (dpkg)")
	}
	for name, stage := range map[string]string{
		"ENV":        "FROM debian:bookworm-slim\nENV A=1\nRUN true\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n",
		"not debian": "FROM alpine:3.20\nRUN true\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n",
		"no COPY":    "FROM debian:bookworm\nRUN true\n",
		"exec RUN":   "FROM debian:bookworm\nRUN [\"true\"]\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n",
		"other COPY": "FROM debian:bookworm\nRUN true\nCOPY kube-proxy /usr/local/bin/kube-proxy\n",
		"no RUN":     "FROM debian:bookworm\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n",
		// LABEL KEY VALUE (the legacy form) and escapes in quoted values are not parsed.
		"legacy LABEL":  "FROM debian:bookworm\nLABEL a b\nRUN true\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n",
		"escaped LABEL": "FROM debian:bookworm\nLABEL a=\"x\\\"y\"\nRUN true\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n",
		"ARG list":      "FROM debian:bookworm\nARG A B\nRUN true\nCOPY --from=build /out/kube-proxy /usr/local/bin/kube-proxy\n",
	} {
		path := filepath.Join(t.TempDir(), "Dockerfile")
		if err := os.WriteFile(path, []byte("FROM golang AS build\nRUN go build\n"+stage), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := imagePlan(t, path); err == nil || !strings.Contains(out, "[image] FAIL") {
			t.Errorf("%s: --plan = %v, want a FAIL line:\n%s", name, err, out)
		}
	}
}
