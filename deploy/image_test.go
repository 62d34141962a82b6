package deploy

import (
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
// from the Dockerfile's runtime stage itself: its base, its one RUN (comment
// lines inside the continuation dropped, as docker does) with the package list
// and the nft alternatives, and the binary's COPY destination.
func TestImageRootfsReadsTheDockerfile(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("hack/image-rootfs.sh runs on Debian (dpkg)")
	}
	out, err := imagePlan(t, "../Dockerfile")
	if err != nil {
		t.Fatalf("--plan: %v\n%s", err, out)
	}
	for _, want := range []string{
		"from: debian:bookworm-slim\n",
		"run: apt-get update && apt-get install -y --no-install-recommends iptables ipset conntrack ipvsadm kmod nftables ca-certificates && rm -rf /var/lib/apt/lists/* && update-alternatives --set iptables /usr/sbin/iptables-nft && update-alternatives --set ip6tables /usr/sbin/ip6tables-nft\n",
		"binary: /usr/local/bin/kube-proxy\n",
		"entrypoint: /usr/local/bin/kube-proxy \n",
		"source: deb http://deb.debian.org/debian bookworm bookworm-updates main\n",
		"source: deb http://deb.debian.org/debian-security bookworm-security main\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--plan lacks %q:\n%s", want, out)
		}
	}
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
