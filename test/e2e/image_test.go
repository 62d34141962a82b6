//go:build e2e

package e2e

// Addresses: pods 10.244.0.231-232.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// tripwireTools are the VM root's copies of the tools the daemon runs (or
// could run); the image has its own.
var tripwireTools = []string{"ipset", "xtables-nft-multi", "xtables-legacy-multi", "conntrack", "nft"}

// setTripwire bind-mounts, over each of the VM root's tripwireTools, a
// wrapper that records "PPID PARENT-COMM ARGV0 ARGS" in /kpi/tripwire/calls
// and runs the real tool; the cleanup unmounts them. A process chrooted into
// the image never reaches these files.
func setTripwire(t *testing.T, ctx context.Context) {
	t.Helper()
	script := `set -e
mkdir -p /kpi/tripwire/real
: >/kpi/tripwire/calls
for tool in ` + strings.Join(tripwireTools, " ") + `; do
	path=$(command -v "$tool")
	path=$(readlink -f "$path")
	cp "$path" /kpi/tripwire/real/$tool
	cat >/kpi/tripwire/$tool <<EOF
#!/bin/bash
echo "\$PPID \$(cat /proc/\$PPID/comm) \$0 \$*" >>/kpi/tripwire/calls
exec -a "\$0" /kpi/tripwire/real/$tool "\$@"
EOF
	chmod 0755 /kpi/tripwire/$tool
	mount --bind /kpi/tripwire/$tool "$path"
	echo "$path"
done`
	paths := strings.Fields(guest(t, ctx, script))
	t.Cleanup(func() {
		for _, p := range paths {
			if _, err := vm.Sh(context.Background(), "umount "+p); err != nil {
				t.Errorf("removing the tripwire on %s: %v", p, err)
			}
		}
	})
	t.Logf("tripwire on the VM root's %v", paths)
}

// TestDaemonRunsFromImage: the suite's daemon runs from the container image's
// root filesystem (hack/image-rootfs.sh: the Dockerfile's runtime stage from
// Debian packages), and what it runs is the image's: it is chrooted into the
// image with the image's PATH, the binary there is ours, the image's package
// and tool versions are the ones hack/image-rootfs.sh recorded, it picked the
// nft backend (the one the image's iptables alternative selects) and its rules
// are there, and while it programs a new Service (ipset restore, a full sync)
// it runs none of the VM root's own copies of ipset, iptables, conntrack or
// nft (a tripwire on them records callers). Traffic flows through the Service.
func TestDaemonRunsFromImage(t *testing.T) {
	defaultBackendOnly(t)
	img := vm.Image()
	if img == nil {
		t.Fatal("FAIL LOUDLY: the VM has no image root filesystem (KPI_E2E_IMAGE_ROOTFS=0); this scenario proves the image works and cannot run without it")
	}
	ctx, ns := scenario(t, "e2e-image")
	manifest, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	header, packages, _ := strings.Cut(manifest, "# packages\n")
	t.Logf("image %s (binary %s):\n%s", img.Dir, img.BinaryPath, header)

	// The daemon is chrooted into the image and runs our binary with the
	// image's PATH: every tool it executes resolves inside the image.
	pid := node.KubeProxyPID()
	got := strings.Fields(guest(t, ctx, fmt.Sprintf("readlink /proc/%d/root; readlink /proc/%d/exe; tr '\\0' '\\n' </proc/%d/environ | grep '^PATH='; sha256sum %s%s", pid, pid, pid, framework.ImageRoot, img.BinaryPath)))
	bin, err := os.ReadFile(img.Binary)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{framework.ImageRoot, framework.ImageRoot + img.BinaryPath, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", fmt.Sprintf("%x", sha256.Sum256(bin))}
	if len(got) < 4 || strings.Join(got[:4], " ") != strings.Join(want, " ") {
		t.Fatalf("daemon (pid %d) root, exe, PATH, binary sha256 = %q, want %q", pid, got, want)
	}
	t.Logf("daemon pid %d: root %s, exe %s, %s, binary = %s", pid, got[0], got[1], got[2], img.Binary)

	// The image in the VM is the one built: its dpkg database and its tools
	// say what hack/image-rootfs.sh recorded.
	inImage := func(argv ...string) string {
		t.Helper()
		r, err := vm.Exec(ctx, vm.InImage(nil, argv...)...)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("in the image: %q: exit %d, %v\n%s%s", argv, r.ExitCode, err, r.Stdout, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout + r.Stderr)
	}
	for _, line := range strings.Split(inImage("dpkg-query", "-W", "-f", "${Package} ${Version}\\n", "iptables", "ipset", "conntrack", "ipvsadm", "kmod", "nftables", "libc6"), "\n") {
		if !strings.Contains("\n"+packages, "\n"+line+"\n") {
			t.Errorf("image package %q is not in the manifest of %s", line, img.Dir)
		}
	}
	var versions []string
	for _, tool := range []string{"iptables --version", "ipset --version", "conntrack --version", "nft --version", "kmod --version"} {
		v := strings.SplitN(inImage(strings.Fields(tool)...), "\n", 2)[0]
		if !strings.Contains(header, tool+": "+v+"\n") {
			t.Errorf("in the image %s prints %q, not what the manifest recorded", tool, v)
		}
		vmRoot, _ := vm.Sh(ctx, tool+" 2>&1 | head -1")
		versions = append(versions, fmt.Sprintf("%-20s image: %-45s VM root: %s", tool, v, strings.TrimSpace(vmRoot)))
	}
	versions = append(versions, fmt.Sprintf("%-20s image: %s", "ipvsadm --version", inImage("ipvsadm", "--version")))
	t.Logf("tool versions:\n%s", strings.Join(versions, "\n"))

	// The iptables backend: the image's alternative selects nft, the daemon
	// detected nft and its rules are in nf_tables, none in the legacy tables.
	if alt := strings.TrimSpace(guest(t, ctx, "readlink "+framework.ImageRoot+"/etc/alternatives/iptables")); alt != "/usr/sbin/iptables-nft" {
		t.Errorf("the image's iptables alternative is %q, want /usr/sbin/iptables-nft", alt)
	}
	if v := inImage("iptables", "--version"); !strings.Contains(v, "(nf_tables)") {
		t.Errorf("the image's iptables is %q, want the nf_tables backend", v)
	}
	logged := guest(t, ctx, "grep -h 'Using iptables backend' "+node.ProxyLogPath+" || true")
	if !strings.Contains(logged, `"Using iptables backend" mode="nft"`) || strings.Contains(logged, `mode="legacy"`) {
		t.Errorf("the daemon's backend lines: %q, want only mode=\"nft\"", logged)
	}

	pods := addPods(t, ctx, "img", 231, 2)
	setTripwire(t, ctx)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))
	member := svc.Spec.ClusterIP + ",tcp:80"
	if err := framework.Eventually(ctx, 30*time.Second, time.Second, func(ctx context.Context) error {
		// The VM root's ipset, under the tripwire: the harness's own call is recorded.
		if _, err := vm.Sh(ctx, "ipset list KUBE-CLUSTER-IP | grep -qx '"+member+"'"); err != nil {
			return fmt.Errorf("KUBE-CLUSTER-IP has no %s yet", member)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Past a syncPeriod (10 s): a full sync ran under the tripwire too.
	time.Sleep(12 * time.Second)
	calls := guest(t, ctx, "cat /kpi/tripwire/calls")
	var byDaemon []string
	for _, c := range strings.Split(strings.TrimSpace(calls), "\n") {
		if f := strings.Fields(c); len(f) > 1 && (f[0] == fmt.Sprint(pid) || f[1] == "kube-proxy") {
			byDaemon = append(byDaemon, c)
		}
	}
	if len(byDaemon) > 0 {
		t.Errorf("the daemon ran the VM root's tools instead of the image's:\n%s", strings.Join(byDaemon, "\n"))
	}
	if !strings.Contains(calls, "ipset list KUBE-CLUSTER-IP") {
		t.Errorf("the tripwire did not record the harness's own ipset call; calls:\n%s", calls)
	}
	t.Logf("tripwire: %d calls of the VM root's tools, none by the daemon (pid %d), which programmed %s meanwhile", len(strings.Split(strings.TrimSpace(calls), "\n")), pid, member)

	nat := inImage("iptables-save", "-t", "nat")
	for _, w := range []*regexp.Regexp{regexp.MustCompile(`(?m)^:KUBE-SERVICES `), regexp.MustCompile(`(?m)^-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst`)} {
		if !w.MatchString(nat) {
			t.Errorf("the image's iptables-save -t nat (nft) has no line matching %s:\n%s", w, nat)
		}
	}
	if legacy := inImage("iptables-legacy-save", "-t", "nat"); strings.Contains(legacy, "KUBE-") {
		t.Errorf("KUBE- rules in the legacy backend:\n%s", legacy)
	}
	guest(t, ctx, "nft list chain ip nat KUBE-SERVICES >/dev/null")

	expectAnswers(t, ctx, "", "tcp", vip, 4, map[string]int{"img-a": 2, "img-b": 2})
}
