//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Migration between upstream kube-proxy v1.37.2 and ours on one node, under
// load (issue 14 item 3). Each scenario starts from a node only upstream
// programmed (ours stopped, `--cleanup`, upstream started), hands over while
// a client on the node connects to a ClusterIP every 20 ms, and ends with our
// daemon running on the standard config (framework.KubeProxyConfig("")), as
// the scenarios after it expect. The file sorts before the cleanup scenarios
// (scenarios_test.go), which stop the daemon.
//
// Pod addresses 10.244.0.2-9.

const (
	migrationInterval = 20 * time.Millisecond
	// migrationTimeout is each connection's timeout: one lost SYN costs 1 s
	// (its retransmission) and a TCG VM sharing a busy host stalls for
	// seconds; an outage lasts longer.
	migrationTimeout = "5s"
	// migrationMinSamples is the fewest samples each handover-watch.sh loop must
	// take during one handover (under TCG on a busy host: one every 1-6 s).
	migrationMinSamples = 10
	// migrationGapBound bounds the time without service when ours replaces
	// upstream's iptables or nftables mode: from the last answered connection
	// before the first failed one to the first answered one after the last.
	// From the iptables mode, our first sync rewrites nat KUBE-SERVICES (the
	// iptables mode's DNAT jumps go) before it creates the virtual servers, and
	// connections to the bound ClusterIP are refused in between: 7.0, 8.1, 18.3 s
	// measured under TCG on a busy 2-core host. From the nftables mode nothing fails (its
	// table keeps serving until our first sync is done).
	migrationGapBound = 20 * time.Second
)

// upstreamConfig is our daemon's config file with another mode.
func upstreamConfig(mode string) string {
	return strings.Replace(framework.KubeProxyConfig(""), "\nmode: ipvs\n", "\nmode: "+mode+"\n", 1)
}

// switchToUpstream stops our daemon, cleans the node (`kube-proxy --cleanup`)
// and starts upstream kube-proxy in mode with our config file (only mode
// differs, and not for ipvs). When the test ends, upstream is stopped if it
// still runs, and ours started again if it does not run.
func switchToUpstream(t *testing.T, ctx context.Context, mode string) *vmKubeProxy {
	t.Helper()
	up := &vmKubeProxy{name: "upstream", bin: upstreamKubeProxyBin, log: "/tmp/kube-proxy-upstream-" + mode + ".log"}
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() && up.pid != 0 {
			t.Logf("upstream kube-proxy (%s mode) log tail:\n%s", mode, up.logTail(ctx, 30))
		}
		if err := up.stop(ctx); err != nil {
			t.Errorf("stopping upstream kube-proxy: %v", err)
		}
		if node.KubeProxyRunning(ctx) {
			return
		}
		if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
			t.Errorf("starting our kube-proxy after the scenario: %v", err)
			return
		}
		if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
			t.Errorf("our kube-proxy after the scenario: %v", err)
		}
	})
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	runCleanup(t, ctx)
	if err := up.start(ctx, upstreamConfig(mode)); err != nil {
		t.Fatal(err)
	}
	return up
}

// syncCount reads a histogram's count from the /metrics of whichever
// kube-proxy runs (both listen on 127.0.0.1:10249).
func syncCount(ctx context.Context, histogram string) (float64, error) {
	page, err := vm.Sh(ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics")
	if err != nil {
		return 0, err
	}
	n, _, _ := framework.HistogramSummary(page, histogram)
	return n, nil
}

// waitSyncs waits until histogram counts at least n syncs.
func waitSyncs(t *testing.T, ctx context.Context, who, histogram string, n float64, alive func(context.Context) bool) {
	t.Helper()
	err := framework.Eventually(ctx, 180*time.Second, time.Second, func(ctx context.Context) error {
		if !alive(ctx) {
			return framework.StopTrying(fmt.Errorf("%s kube-proxy exited", who))
		}
		got, err := syncCount(ctx, histogram)
		if err != nil {
			return err
		}
		if got < n {
			return fmt.Errorf("%s kube-proxy: %s counts %v syncs, want %v", who, histogram, got, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ourSyncs waits until our daemon made n full syncs: the first sync after a
// start is full, the next full one comes syncPeriod (10 s) later and reads the
// kernel again (it would repair or remove anything it disagreed with).
func ourSyncs(t *testing.T, ctx context.Context, n float64) {
	t.Helper()
	waitSyncs(t, ctx, "our", "kubeproxy_sync_full_proxy_rules_duration_seconds", n, node.KubeProxyRunning)
}

// upstreamSynced waits until upstream made its first sync, then for more than
// a syncPeriod (10 s) so that a periodic sync runs too, and logs what its
// metrics say about its syncs.
func upstreamSynced(t *testing.T, ctx context.Context, up *vmKubeProxy) {
	t.Helper()
	waitSyncs(t, ctx, "upstream", "kubeproxy_sync_proxy_rules_duration_seconds", 1, up.running)
	time.Sleep(12 * time.Second)
	out, _ := vm.Sh(ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics | grep -E '^kubeproxy_sync_proxy_rules_(duration_seconds_count|last_timestamp_seconds)'")
	t.Logf("upstream kube-proxy's syncs:\n%s", out)
}

// handover is what one switch from one kube-proxy to the other did.
type handover struct {
	name            string
	from, to        int64 // guest ms: the old one stopped, the new one done with its checks
	before, after   int   // the virtual server's connection counter
	samples         string
	missing         []string // lines of the first sample absent from a later one
	missingSamples  int
	failed, started int // connection attempts in [from, to] that failed / were made
}

// watchHandover samples the ipsets and IPVS in the guest
// (vm/guest/handover-watch.sh) while do switches kube-proxies, and records
// the VS connection counter of vip around it.
func watchHandover(t *testing.T, ctx context.Context, name, vip string, do func()) *handover {
	t.Helper()
	h := &handover{name: name}
	dir := "/tmp/handover-" + name
	pid, err := vm.Start(ctx, dir+".log", "bash", "/kpi/scripts/handover-watch.sh", dir)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_, _ = vm.Sh(context.Background(), "touch "+dir+"/stop")
		}
	}
	t.Cleanup(stop)
	err = framework.Eventually(ctx, 120*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		_, err := vm.Sh(ctx, "test -e "+dir+"/ready")
		return err
	})
	if err != nil {
		out, _ := vm.Sh(ctx, "cat "+dir+".log")
		t.Fatalf("handover-watch.sh (pid %d) did not start sampling: %v\n%s", pid, err, out)
	}
	h.before = vsConnections(t, ctx, vip)
	h.from = guestMillis(t, ctx)
	do()
	h.to = guestMillis(t, ctx)
	h.after = vsConnections(t, ctx, vip)
	stop()
	err = framework.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		out, err := vm.Sh(ctx, "cat "+dir+"/summary")
		h.samples = strings.Join(strings.Split(strings.TrimSpace(out), "\n"), "; ")
		return err
	})
	if err != nil {
		t.Fatalf("handover-watch.sh did not finish: %v", err)
	}
	// Each line is "NAME samples N ms M failed F": a loop with almost no
	// samples would make the check below vacuous.
	for _, line := range strings.Split(h.samples, "; ") {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("handover-watch.sh summary %q", h.samples)
		}
		if n, err := strconv.Atoi(f[2]); err != nil || n < migrationMinSamples {
			t.Errorf("%s: the %s sampler took %s samples, want at least %d", name, f[0], f[2], migrationMinSamples)
		}
	}
	missing := guest(t, ctx, "cat "+dir+"/missing")
	seen := map[string]bool{}
	at := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(missing), "\n") {
		ms, what, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at[ms] = true
		if !seen[what] {
			seen[what] = true
			h.missing = append(h.missing, what)
		}
	}
	h.missingSamples = len(at)
	sort.Strings(h.missing)
	first := guest(t, ctx, "wc -l < "+dir+"/first-ipsets; wc -l < "+dir+"/first-ipvs")
	t.Logf("%s: watched %s ipset members and %s IPVS lines (%s); VS %s connections %d -> %d",
		name, strings.Fields(first)[0], strings.Fields(first)[1], h.samples, vip, h.before, h.after)
	return h
}

// check fails t unless the handover re-created nothing, removed nothing and
// changed no weight.
func (h *handover) check(t *testing.T, vip string) {
	t.Helper()
	if h.after <= h.before {
		t.Errorf("%s: the connection counter of %s went from %d to %d: the virtual server was re-created", h.name, vip, h.before, h.after)
	}
	if len(h.missing) > 0 {
		t.Errorf("%s: in %d samples, lines of the first sample were missing (ipset members removed, virtual servers re-created or edited, real servers removed or re-weighted):\n%s",
			h.name, h.missingSamples, strings.Join(h.missing, "\n"))
	}
}

// stampedAttempt is one line of `e2e-agent client --stamp`.
type stampedAttempt struct {
	at int64 // guest ms when the attempt ended
	ok bool
}

func parseStamped(out string) []stampedAttempt {
	var r []stampedAttempt
	for _, line := range strings.Split(out, "\n") {
		i := strings.LastIndex(line, " at=")
		if i < 0 {
			continue
		}
		ms, err := strconv.ParseInt(line[i+4:], 10, 64)
		if err != nil {
			continue
		}
		r = append(r, stampedAttempt{at: ms, ok: !strings.HasPrefix(line, "ERROR")})
	}
	return r
}

// countIn counts the attempts that ended in [from, to] and the failed ones.
func countIn(as []stampedAttempt, from, to int64) (started, failed int) {
	for _, a := range as {
		if a.at >= from && a.at <= to {
			started++
			if !a.ok {
				failed++
			}
		}
	}
	return started, failed
}

// outage is the time without service: from the last answered attempt before
// the first failed one to the first answered attempt after the last failed
// one (0 when nothing failed).
func outage(as []stampedAttempt) (time.Duration, int) {
	first, last, failed := -1, -1, 0
	for i, a := range as {
		if !a.ok {
			failed++
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return 0, 0
	}
	from, to := as[first].at, as[last].at
	for i := first - 1; i >= 0; i-- {
		if as[i].ok {
			from = as[i].at
			break
		}
	}
	for i := last + 1; i < len(as); i++ {
		if as[i].ok {
			to = as[i].at
			break
		}
	}
	return time.Duration(to-from) * time.Millisecond, failed
}

// ourKernelOps reads kubeproxy_ipvs_kernel_operations_total of our daemon,
// by "subsystem/operation".
func ourKernelOps(t *testing.T, ctx context.Context) map[string]float64 {
	t.Helper()
	page := guest(t, ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics | grep '^kubeproxy_ipvs_kernel_operations_total{'")
	ops := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(page), "\n") {
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "kubeproxy_ipvs_kernel_operations_total{"), "} ")
		if !ok {
			continue
		}
		var op, sub string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "operation":
				op = v
			case "subsystem":
				sub = v
			}
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		ops[sub+"/"+op] = n
	}
	return ops
}

// checkAdopted fails t if our daemon wrote anything to IPVS or kube-ipvs0
// since it started: it adopted what upstream programmed as it was.
func checkAdopted(t *testing.T, ctx context.Context) {
	t.Helper()
	ops := ourKernelOps(t, ctx)
	var all, writes []string
	for k, v := range ops {
		all = append(all, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(all)
	t.Logf("our kernel operations since the start (two full syncs): %s", strings.Join(all, " "))
	for _, op := range []string{
		"ipvs/add_virtual_server", "ipvs/update_virtual_server", "ipvs/delete_virtual_server",
		"ipvs/add_real_server", "ipvs/update_real_server", "ipvs/delete_real_server",
		"netlink/bind_address", "netlink/unbind_address",
	} {
		if ops[op] != 0 {
			writes = append(writes, fmt.Sprintf("%s=%v", op, ops[op]))
		}
	}
	if len(writes) > 0 {
		t.Errorf("our kube-proxy changed what upstream programmed: %s", strings.Join(writes, " "))
	}
}

// TestMigrationUpstreamIPVSBothWays: upstream kube-proxy in ipvs mode with our
// config file programs the node; under a client connecting to a NodePort
// Service's ClusterIP every 20 ms it is replaced by ours (SIGTERM, then ours
// started), ours by upstream, and upstream by ours again. Across each
// handover: not one connection fails, the virtual server's connection counter
// keeps growing (never re-created), and a guest-side sampler of every ipset
// member and of the IPVS table (virtual servers with their flags, real
// servers with their weights) never misses a line of its first sample. Our
// daemon, after two full syncs, has sent IPVS and kube-ipvs0 no write at all.
func TestMigrationUpstreamIPVSBothWays(t *testing.T) {
	defaultBackendOnly(t)
	ctx, ns := scenario(t, "e2e-migration")
	pods := addPods(t, ctx, "mig", 2, 2)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeNodePort, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))

	up := switchToUpstream(t, ctx, "ipvs")
	upstreamSynced(t, ctx, up)
	waitRealServers(t, ctx, "TCP", vip, masq(pods))
	t.Logf("upstream kube-proxy (ipvs mode) programmed the node:\n%s", guest(t, ctx, "ipvsadm -Ln | head -20; ipset list -t | grep -E '^(Name|Number of entries)' | paste - - | awk '$NF>0'"))

	l := startLoad(t, ctx, "", "tcp", vip, migrationInterval, "--stamp", "--timeout", migrationTimeout)
	time.Sleep(5 * time.Second)
	var hs []*handover
	toOurs := func() {
		if err := up.stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
			t.Fatal(err)
		}
		if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		ourSyncs(t, ctx, 2)
		checkAdopted(t, ctx)
	}
	toUpstream := func() {
		if err := node.StopKubeProxy(ctx); err != nil {
			t.Fatal(err)
		}
		if err := up.start(ctx, upstreamConfig("ipvs")); err != nil {
			t.Fatal(err)
		}
		upstreamSynced(t, ctx, up)
	}
	hs = append(hs, watchHandover(t, ctx, "upstream-to-ours", vip, toOurs))
	hs = append(hs, watchHandover(t, ctx, "ours-to-upstream", vip, toUpstream))
	hs = append(hs, watchHandover(t, ctx, "upstream-to-ours-again", vip, toOurs))
	time.Sleep(time.Second)
	got, errs, errLines := l.stop(t, ctx)
	as := parseStamped(l.out)
	for _, h := range hs {
		h.started, h.failed = countIn(as, h.from, h.to)
		t.Logf("MIGRATION %s: %d connections during the handover (%.1f s), %d failed; VS connections %d -> %d; sampler %s; %d lines missing",
			h.name, h.started, float64(h.to-h.from)/1000, h.failed, h.before, h.after, h.samples, len(h.missing))
		h.check(t, vip)
	}
	if errs != 0 {
		t.Errorf("%d connections failed:\n%s", errs, strings.Join(errLines, "\n"))
	}
	if got["mig-a"] == 0 || got["mig-b"] == 0 {
		t.Errorf("both pods must answer: %v", got)
	}
}

// otherModeLeftovers lists, in the guest, what upstream's iptables and
// nftables modes program and the ipvs mode never uses: their own chains (by
// name, and the per-Service KUBE-SVC/SVL/EXT/FW/SEP hash chains) in every
// table of both families, and the "ip/ip6 kube-proxy" nftables tables.
const otherModeLeftovers = `for f in iptables ip6tables; do
  for t in nat filter mangle; do
    $f-save -t $t | awk -v f=$f -v t=$t '/^:KUBE-(SVC|SVL|EXT|FW|SEP)-[A-Z2-7]{16} / || /^:KUBE-(NODEPORTS|PROXY-CANARY|EXTERNAL-SERVICES) / || (t == "filter" && /^:KUBE-SERVICES /) {print f, t, substr($1, 2)}'
  done
done
nft list tables | grep -w kube-proxy || true`

// testMigrationFromMode: upstream in mode (iptables or nftables) programs the
// node, with a Service answering and a second one without endpoints (which
// upstream rejects); under a client connecting every 20 ms it is replaced by
// ours. Its leftovers (otherModeLeftovers) are gone once ours synced, the time
// without service is under migrationGapBound, and the second Service answers
// once it gets an endpoint (no leftover reject rule). The client is a pod:
// the node has no route to ClusterIPs but the ones on kube-ipvs0.
func testMigrationFromMode(t *testing.T, mode, prefix string, firstPod int) {
	ctx, ns := scenario(t, "e2e-migration-"+mode)
	pods := addPods(t, ctx, prefix, firstPod, 3)
	client := pods[2].Name
	pods = pods[:2]
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeNodePort, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	empty := createService(t, ctx, ns, "empty", corev1.ServiceTypeClusterIP, nil, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	emptyVIP := empty.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))

	up := switchToUpstream(t, ctx, mode)
	upstreamSynced(t, ctx, up)
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		left, err := vm.Sh(ctx, otherModeLeftovers)
		if err != nil || strings.TrimSpace(left) == "" {
			return fmt.Errorf("upstream's %s mode has not programmed the node yet (%v)", mode, err)
		}
		out, err := node.ClientFrom(ctx, client, "tcp", vip, 2)
		if err != nil {
			return err
		}
		if _, errs := framework.CountAnswers(out); errs != 0 {
			return fmt.Errorf("%s through upstream's %s mode: %s", vip, mode, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	left := guest(t, ctx, otherModeLeftovers)
	t.Logf("upstream %s mode left %d chains/tables:\n%s", mode, len(strings.Split(strings.TrimSpace(left), "\n")), left)
	if out, _ := node.ClientFrom(ctx, client, "tcp", emptyVIP, 1); !strings.HasPrefix(out, "ERROR") {
		t.Fatalf("%s (no endpoints) answered through upstream's %s mode: %q", emptyVIP, mode, out)
	}

	l := startLoad(t, ctx, client, "tcp", vip, migrationInterval, "--stamp", "--timeout", migrationTimeout)
	time.Sleep(3 * time.Second)
	from := guestMillis(t, ctx)
	if err := up.stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
		t.Fatal(err)
	}
	var cleaned int64
	err = framework.Eventually(ctx, 180*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		if !node.KubeProxyRunning(ctx) {
			return framework.StopTrying(fmt.Errorf("our kube-proxy exited"))
		}
		left, err := vm.Sh(ctx, otherModeLeftovers)
		if err != nil {
			return err
		}
		if strings.TrimSpace(left) != "" {
			return fmt.Errorf("upstream %s-mode leftovers still there:\n%s", mode, left)
		}
		cleaned = guestMillis(t, ctx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	waitRealServers(t, ctx, "TCP", vip, masq(pods))
	time.Sleep(3 * time.Second)
	_, _, errLines := l.stop(t, ctx)
	as := parseStamped(l.out)
	gap, failed := outage(as)
	started, _ := countIn(as, from, cleaned)
	t.Logf("MIGRATION %s-to-ours: leftovers gone %.1f s after upstream was stopped; %d connections in that time; %d failed; time without service %s (bound %s)",
		mode, float64(cleaned-from)/1000, started, failed, gap, migrationGapBound)
	if gap > migrationGapBound {
		t.Errorf("%s: no service for %s, over the bound %s; failed attempts:\n%s", mode, gap, migrationGapBound, strings.Join(errLines, "\n"))
	}

	if err := framework.SetEndpoints(ctx, cp.Client, empty, endpoints(pods[:1])...); err != nil {
		t.Fatal(err)
	}
	waitRealServers(t, ctx, "TCP", emptyVIP, masq(pods[:1]))
	expectAnswers(t, ctx, client, "tcp", emptyVIP, 3, map[string]int{pods[0].Name: 3})
}

// TestMigrationFromUpstreamIPTablesMode: see testMigrationFromMode.
func TestMigrationFromUpstreamIPTablesMode(t *testing.T) {
	defaultBackendOnly(t)
	testMigrationFromMode(t, "iptables", "mipt", 4)
}

// TestMigrationFromUpstreamNFTablesMode: see testMigrationFromMode.
func TestMigrationFromUpstreamNFTablesMode(t *testing.T) {
	defaultBackendOnly(t)
	testMigrationFromMode(t, "nftables", "mnft", 7)
}
