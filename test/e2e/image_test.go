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
	"syscall"
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
// nft backend of this node and its rules are there, the image's own iptables
// (the wrapper, hack/image/iptables-wrapper) picks nft here too, and while the
// daemon programs a new Service (ipset restore, a full sync) it runs none of
// the VM root's own copies of ipset, iptables, conntrack or nft (a tripwire on
// them records callers). Traffic flows through the Service. Then, on a node
// whose rules are in iptables-legacy and on one whose rules are in nft (a
// network namespace each, kubelet's chains made there in that backend), a
// container's iptables and the daemon both pick that node's backend.
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
	// (iptables itself is the wrapper, which picks a backend: below.)
	for _, tool := range []string{"iptables-legacy --version", "iptables-nft --version", "ipset --version", "conntrack --version", "nft --version", "kmod --version"} {
		v := strings.SplitN(inImage(strings.Fields(tool)...), "\n", 2)[0]
		if !strings.Contains(header, tool+": "+v+"\n") {
			t.Errorf("in the image %s prints %q, not what the manifest recorded", tool, v)
		}
		vmRoot, _ := vm.Sh(ctx, tool+" 2>&1 | head -1")
		versions = append(versions, fmt.Sprintf("%-26s image: %-45s VM root: %s", tool, v, strings.TrimSpace(vmRoot)))
	}
	versions = append(versions, fmt.Sprintf("%-26s image: %s", "ipvsadm --version", inImage("ipvsadm", "--version")))
	t.Logf("tool versions:\n%s", strings.Join(versions, "\n"))

	// The iptables backend: the image's iptables and ip6tables are the
	// wrapper until a container's first call; on this node (the daemon's rules
	// are in nf_tables, none in the legacy tables) that call picks nft, as the
	// daemon did; the daemon itself only ever runs iptables-nft-* by name.
	wrapped := strings.Fields(guest(t, ctx, "cd "+framework.ImageRoot+"/etc/alternatives && for f in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do readlink $f; done"))
	if strings.Join(wrapped, " ") != strings.TrimSpace(strings.Repeat("/usr/sbin/iptables-wrapper ", 6)) {
		t.Errorf("the image's iptables alternatives are %q, want the wrapper", wrapped)
	}
	logged := guest(t, ctx, "grep -h 'Using iptables backend' "+node.ProxyLogPath+" || true")
	if !strings.Contains(logged, `"Using iptables backend" mode="nft"`) || strings.Contains(logged, `mode="legacy"`) {
		t.Errorf("the daemon's backend lines: %q, want only mode=\"nft\"", logged)
	}
	checkFirstIPTablesCall(t, ctx, "", "nft")
	if alt := strings.TrimSpace(guest(t, ctx, fmt.Sprintf("readlink /proc/%d/root/etc/alternatives/iptables", pid))); alt != "/usr/sbin/iptables-wrapper" {
		t.Errorf("in the daemon's container the iptables alternative is %q: something ran the wrapper there", alt)
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

	for _, mode := range []string{"legacy", "nft"} {
		t.Run(mode+" node", func(t *testing.T) { checkNodeBackend(t, ctx, mode) })
	}
}

// backendVersion is what iptables --version ends with for a backend.
var backendVersion = map[string]string{"legacy": "(legacy)", "nft": "(nf_tables)"}

// checkFirstIPTablesCall: in a new container from the image in network
// namespace netns ("": the VM's root), the first iptables call picks mode:
// iptables and ip6tables say that backend, and the container's alternatives
// (its own: vm/guest/image-exec.sh) now point at it. The image as built, which
// the next container starts from, still holds the wrapper.
func checkFirstIPTablesCall(t *testing.T, ctx context.Context, netns, mode string) {
	t.Helper()
	// (/bin/sh by path: the VM's chroot is busybox's, which runs a bare "sh"
	// as its own ash applet, and that shell's readlink as an applet too.)
	argv := vm.InImage(nil, "/bin/sh", "-c", "iptables --version && ip6tables --version && cd /etc/alternatives && readlink iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore")
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	r, err := vm.Exec(ctx, argv...)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("%q: exit %d, %v\n%s%s", argv, r.ExitCode, err, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var want []string
	for _, f := range []string{"iptables", "ip6tables"} {
		for _, s := range []string{"", "-save", "-restore"} {
			want = append(want, "/usr/sbin/"+f+"-"+mode+s)
		}
	}
	if len(lines) != 8 || !strings.HasPrefix(lines[0], "iptables v") || !strings.HasSuffix(lines[0], backendVersion[mode]) ||
		!strings.HasPrefix(lines[1], "ip6tables v") || !strings.HasSuffix(lines[1], backendVersion[mode]) ||
		strings.Join(lines[2:], " ") != strings.Join(want, " ") || strings.TrimSpace(r.Stderr) != "" {
		t.Errorf("a new container's first iptables call: stdout\n%s\nstderr %q\nwant iptables and ip6tables %s and the alternatives %v", r.Stdout, r.Stderr, backendVersion[mode], want)
	}
	t.Logf("a new container's iptables on this node: %s; its alternatives: %s", lines[0], strings.Join(lines[2:], " "))
	if alt := strings.TrimSpace(guest(t, ctx, "readlink "+framework.ImageRoot+"/etc/alternatives/iptables")); alt != "/usr/sbin/iptables-wrapper" {
		t.Errorf("the image's own iptables alternative is %q after a container's first call, want the wrapper still", alt)
	}
}

// checkNodeBackend: a node (network namespace imgnode-MODE) whose rules are
// in the MODE backend, made as kubelet makes them (KUBE-IPTABLES-HINT and
// KUBE-KUBELET-CANARY in mangle, the canary in nat and filter, both
// families) with a few filter rules. A container's first iptables call picks
// MODE; a daemon run there from the image (DaemonMounts, its own relay to
// the apiserver) logs MODE, its rules land in MODE's tables and none in the
// other backend's, and a container's iptables-save shows them.
func checkNodeBackend(t *testing.T, ctx context.Context, mode string) {
	other := map[string]string{"legacy": "nft", "nft": "legacy"}[mode]
	netns := "imgnode-" + mode
	dir := "/kpi/" + netns
	sock := "/run/kpi-" + netns + "-apiserver.sock"
	guest(t, ctx, fmt.Sprintf(`set -e
ip netns add %[1]s
ip -n %[1]s link set lo up
mkdir -p %[3]s
ip netns exec %[1]s bash -ec '
for f in iptables ip6tables; do
	$f-%[2]s -w -t mangle -N KUBE-IPTABLES-HINT
	for table in mangle nat filter; do $f-%[2]s -w -t $table -N KUBE-KUBELET-CANARY; done
done
iptables-%[2]s -w -A INPUT -i lo -j ACCEPT
iptables-%[2]s -w -N KUBE-FIREWALL
iptables-%[2]s -w -A INPUT -j KUBE-FIREWALL
iptables-%[2]s -w -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
'`, netns, mode, dir))
	t.Cleanup(func() {
		if _, err := vm.Sh(context.Background(), "ip netns del "+netns+"; rm -rf "+dir+" "+sock); err != nil {
			t.Errorf("removing %s: %v", netns, err)
		}
	})
	t.Logf("node %s: kubelet's chains and 3 filter rules in iptables-%s:\n%s", netns, mode,
		guest(t, ctx, "ip netns exec "+netns+" iptables-"+mode+"-save | grep -v '^#'"))

	checkFirstIPTablesCall(t, ctx, netns, mode)

	// The apiserver through two relays, as node2 reaches it (framework.SetupTwoNode).
	var pids []int
	t.Cleanup(func() {
		for _, p := range pids {
			_ = vm.Signal(context.Background(), p, syscall.SIGKILL)
		}
	})
	for _, argv := range [][]string{
		{"/kpi/bin/e2e-agent", "relay", "--listen", "unix:" + sock, "--to", "tcp:" + framework.VMAPIServerAddress},
		{"ip", "netns", "exec", netns, "/kpi/bin/e2e-agent", "relay", "--listen", "tcp:127.0.0.1:6443", "--to", "unix:" + sock},
	} {
		p, err := vm.Start(ctx, "/tmp/relay-"+netns+".log", argv...)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p)
	}
	kubeconfig := strings.Replace(string(cp.ProxyKubeconfig()), "https://"+framework.VMAPIServerAddress, "https://127.0.0.1:6443", 1)
	if err := vm.WriteFile(ctx, dir+"/kubeconfig", []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	config := `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
clientConnection:
  kubeconfig: ` + dir + `/kubeconfig
hostnameOverride: ` + framework.NodeName + `
clusterCIDR: 10.244.0.0/16
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 0.0.0.0:10256
conntrack:
  maxPerCore: 0
ipvs:
  scheduler: rr
  syncPeriod: 10s
  minSyncPeriod: 0s
`
	if err := vm.WriteFile(ctx, dir+"/config.yaml", []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := "/tmp/kube-proxy-" + netns + ".log"
	pid, err := vm.Start(ctx, logPath, append([]string{"ip", "netns", "exec", netns},
		vm.KubeProxyCommand("--config="+dir+"/config.yaml", "--kubeconfig="+dir+"/kubeconfig", "--v=2")...)...)
	if err != nil {
		t.Fatal(err)
	}
	pids = append(pids, pid)
	t.Cleanup(func() {
		// SIGTERM first (pids' SIGKILL follows): the namespace goes anyway.
		_ = vm.Signal(context.Background(), pid, syscall.SIGTERM)
		time.Sleep(2 * time.Second)
	})
	clusterIPRule := regexp.MustCompile(`(?m)^-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst`)
	start := time.Now()
	var nat string
	err = framework.Eventually(ctx, 150*time.Second, 2*time.Second, func(ctx context.Context) error {
		if r, err := vm.Exec(ctx, "test", "-d", fmt.Sprintf("/proc/%d", pid)); err != nil || r.ExitCode != 0 {
			return framework.StopTrying(fmt.Errorf("the daemon on %s exited", netns))
		}
		nat, _ = vm.Sh(ctx, "ip netns exec "+netns+" iptables-"+mode+"-save -t nat")
		if !clusterIPRule.MatchString(nat) {
			return fmt.Errorf("no KUBE-CLUSTER-IP rule in iptables-%s's nat of %s yet", mode, netns)
		}
		return nil
	})
	logTail, _ := vm.Sh(ctx, "tail -n 30 "+logPath)
	if err != nil {
		t.Fatalf("%v\ndaemon log tail:\n%s", err, logTail)
	}
	t.Logf("the daemon on %s (pid %d) programmed iptables-%s's nat in %s", netns, pid, mode, time.Since(start).Round(time.Second))

	logged := guest(t, ctx, "grep -h 'Using iptables backend' "+logPath+" || true")
	if !strings.Contains(logged, `"Using iptables backend" mode="`+mode+`"`) || strings.Contains(logged, `mode="`+other+`"`) {
		t.Errorf("the daemon's backend lines on %s: %q, want only mode=%q", netns, logged, mode)
	}
	for _, f := range []string{"iptables", "ip6tables"} {
		if out := guest(t, ctx, "ip netns exec "+netns+" "+f+"-"+other+"-save"); strings.Contains(out, "KUBE-") {
			t.Errorf("KUBE- chains or rules in %s-%s-save on %s, a %s node:\n%s", f, other, netns, mode, out)
		}
	}
	if alt := strings.TrimSpace(guest(t, ctx, fmt.Sprintf("readlink /proc/%d/root/etc/alternatives/iptables", pid))); alt != "/usr/sbin/iptables-wrapper" {
		t.Errorf("in the daemon's container the iptables alternative is %q: something ran the wrapper there", alt)
	}
	// What an operator's kubectl exec into the pod shows: the daemon's rules.
	r, err := vm.Exec(ctx, append([]string{"ip", "netns", "exec", netns}, vm.InImage(nil, "iptables-save", "-t", "nat")...)...)
	if err != nil || r.ExitCode != 0 || !clusterIPRule.MatchString(r.Stdout) || !strings.Contains(r.Stdout, ":KUBE-KUBELET-CANARY ") {
		t.Errorf("a new container's iptables-save -t nat on %s: exit %d, %v, want the daemon's KUBE-SERVICES rule and kubelet's canary:\n%s%s", netns, r.ExitCode, err, r.Stdout, r.Stderr)
	}
}
