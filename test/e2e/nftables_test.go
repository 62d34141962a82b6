//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// The nftables rules backend (--ipvs-rules-backend=nftables, issue 16) end to
// end on one node: the suite's daemon switched to it and back in place under
// load, and real traffic through the table `inet kube-proxy-ipvs` meanwhile.
// The scenario ends with the daemon on the default (iptables) backend, as the
// scenarios after it expect. The two-node scenario of the backend (traffic
// from outside, the translations that are not one to one, `--cleanup`) is in
// twonodenft_test.go; the helpers here serve both.
//
// Pod addresses (10.244.0.X): 55-58.

// nftChains and nftSets are every chain and set the backend writes for one
// family, named without the family's prefix (pkg/proxy/ipvs/nftprogramme.go);
// the first six chains are the base chains hooked into the kernel.
var (
	nftChains = []string{"nat-prerouting", "nat-output", "nat-postrouting", "filter-forward", "filter-input", "filter-output",
		"services", "postrouting", "node-port", "load-balancer", "mark-masq", "forward", "node-port-filter",
		"proxy-firewall", "source-ranges-firewall", "ipvs-filter", "ipvs-out-filter"}
	nftSets = []string{"loop-back", "cluster-ip", "external-ip", "external-ip-local", "load-balancer", "load-balancer-fw",
		"load-balancer-local", "load-balancer-source", "node-port", "node-port-local", "node-port-sctp",
		"node-port-local-sctp", "health-check-node-port", "ipvs-ips", "quiet", "alive"}
)

// shell runs a bash script on a node: vm.Sh for the suite's node,
// ClusterNode.Sh for a node of the two-node testbed.
type shell func(context.Context, string) (string, error)

// nftTable returns the backend's table in nftables.ParseListing's canonical
// form ("table ...", "chain NAME ...", "rule CHAIN ...", "set NAME ...",
// "element SET ..." lines), "" when the table does not exist.
func nftTable(ctx context.Context, sh shell) (string, error) {
	out, err := sh(ctx, `if out=$(nft list table `+framework.NFTablesTable+` 2>&1); then printf '%s\n' "$out"
elif grep -q 'No such file or directory' <<<"$out"; then echo NO-TABLE
else printf '%s\n' "$out" >&2; exit 1; fi`)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(out) == "NO-TABLE" {
		return "", nil
	}
	canon, err := nftables.ParseListing(out)
	if err != nil {
		return "", fmt.Errorf("%w\nthe listing:\n%s", err, out)
	}
	return canon, nil
}

// nftIncomplete lists what the table lacks for the families with the given
// prefixes ("ip-", "ip6-"): a chain (a base chain without its hook), a set,
// or the rules every programme has (the jump into services, the masquerade).
func nftIncomplete(canon string, prefixes ...string) []string {
	lines := map[string]bool{}
	heads := map[string]string{} // "chain X" / "set X" -> the rest of its line
	for _, l := range strings.Split(canon, "\n") {
		lines[l] = true
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "chain" || f[0] == "set") {
			heads[f[0]+" "+f[1]] = l
		}
	}
	var missing []string
	for _, p := range prefixes {
		for i, c := range nftChains {
			h, ok := heads["chain "+p+c]
			if !ok || (i < 6) != strings.Contains(h, " hook ") {
				missing = append(missing, "chain "+p+c)
			}
		}
		for _, s := range nftSets {
			if _, ok := heads["set "+p+s]; !ok {
				missing = append(missing, "set "+p+s)
			}
		}
		v := map[string]string{"ip-": "ipv4", "ip6-": "ipv6"}[p]
		for _, r := range []string{
			"rule " + p + "nat-prerouting meta nfproto != @" + p + "alive return comment \"nothing below applies unless kube-proxy-ipvs is running\"",
			"rule " + p + "nat-prerouting meta nfproto " + v + " jump " + p + "services",
			"rule " + p + "nat-output meta nfproto " + v + " jump " + p + "services",
			"rule " + p + "nat-postrouting meta nfproto " + v + " jump " + p + "postrouting",
			"rule " + p + "postrouting masquerade fully-random comment \"kubernetes service traffic requiring SNAT\"",
		} {
			if !lines[r] {
				missing = append(missing, r)
			}
		}
	}
	return missing
}

// tablePrefixes is "ip-" and, when the table holds any ip6- object, "ip6-".
func tablePrefixes(canon string) []string {
	p := []string{"ip-"}
	if strings.Contains(canon, "\nchain ip6-") || strings.Contains(canon, "\nset ip6-") {
		p = append(p, "ip6-")
	}
	return p
}

// iptablesLeftovers is a guest script printing the iptables backend's state:
// KUBE-* ipsets and our KUBE- chains and jumps (kubeProxyChains).
const iptablesLeftovers = "ipset list -n | grep '^KUBE-' || true\n" + kubeProxyChains

// waitNFTablesOnly waits until a node runs on the nftables backend alone: the
// table is complete for every family in it (IPv6 required when ipv6 is set)
// and holds the elements want, and no KUBE-* ipset or KUBE- chain is left. It
// returns the table.
func waitNFTablesOnly(t *testing.T, ctx context.Context, who string, sh shell, ipv6 bool, want ...string) string {
	t.Helper()
	var canon string
	err := framework.Eventually(ctx, 120*time.Second, time.Second, func(ctx context.Context) error {
		var err error
		if canon, err = nftTable(ctx, sh); err != nil {
			return err
		}
		if canon == "" {
			return fmt.Errorf("%s: no table %s", who, framework.NFTablesTable)
		}
		prefixes := tablePrefixes(canon)
		if ipv6 && len(prefixes) == 1 {
			prefixes = append(prefixes, "ip6-")
		}
		if m := nftIncomplete(canon, prefixes...); len(m) > 0 {
			return fmt.Errorf("%s: the table lacks %s", who, strings.Join(m, "; "))
		}
		for _, w := range want {
			if !strings.Contains(canon, "\n"+w+"\n") {
				return fmt.Errorf("%s: the table lacks %q", who, w)
			}
		}
		left, err := sh(ctx, iptablesLeftovers)
		if err != nil {
			return err
		}
		if strings.TrimSpace(left) != "" {
			return fmt.Errorf("%s: the iptables backend's state is still there:\n%s", who, left)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return canon
}

// waitTableGone waits until a node has no nftables backend table.
func waitTableGone(ctx context.Context, who string, sh shell) error {
	return framework.Eventually(ctx, 90*time.Second, time.Second, func(ctx context.Context) error {
		canon, err := nftTable(ctx, sh)
		if err != nil {
			return err
		}
		if canon != "" {
			return fmt.Errorf("%s: table %s still there:\n%s", who, framework.NFTablesTable, canon)
		}
		return nil
	})
}

// runsNFTables reports whether the daemon with pid was started with the
// nftables backend flag.
func runsNFTables(ctx context.Context, pid int) bool {
	out, err := vm.Sh(ctx, fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/cmdline", pid))
	return err == nil && strings.Contains("\n"+out+"\n", "\n"+framework.NFTablesBackend+"\n")
}

// restartOurDaemon stops the suite's daemon and starts it again with the
// standard config and flags (framework.NFTablesBackend or none), waiting
// until it is ready.
func restartOurDaemon(t *testing.T, ctx context.Context, flags ...string) {
	t.Helper()
	start := time.Now()
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig(""), flags...); err != nil {
		t.Fatal(err)
	}
	if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-proxy restarted with flags %q in %s", flags, time.Since(start).Round(100*time.Millisecond))
}

// restoreIPTablesBackend (a cleanup) puts the suite's daemon back on the
// default backend, restarting it when it runs on nftables or not at all, and
// waits until the table is gone.
func restoreIPTablesBackend(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if !node.KubeProxyRunning(ctx) || runsNFTables(ctx, node.KubeProxyPID()) {
		if err := node.StopKubeProxy(ctx); err != nil {
			t.Errorf("stopping kube-proxy: %v", err)
		}
		if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
			t.Errorf("starting kube-proxy on the iptables backend again: %v", err)
			return
		}
		if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
			t.Errorf("kube-proxy on the iptables backend again: %v", err)
			return
		}
	}
	if err := waitTableGone(ctx, framework.NodeName, vm.Sh); err != nil {
		t.Errorf("back on the iptables backend: %v", err)
	}
}

// metricSum adds up every sample of one metric (all label sets) on a
// /metrics page.
func metricSum(page, name string) float64 {
	var sum float64
	for _, line := range strings.Split(page, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || (f[0] != name && !strings.HasPrefix(f[0], name+"{")) {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// fullSyncsByFamily reads the full-sync count of each family from a
// /metrics page.
func fullSyncsByFamily(page string) map[string]float64 {
	out := map[string]float64{}
	for _, fam := range []string{"IPv4", "IPv6"} {
		if n, _, ok := framework.HistogramSummaryOf(page, "kubeproxy_sync_full_proxy_rules_duration_seconds", `ip_family="`+fam+`"`); ok {
			out[fam] = n
		}
	}
	return out
}

// waitFullSyncs waits until every family of the suite's daemon (IPv4 at
// least) has made n full syncs, and returns the /metrics page then.
func waitFullSyncs(t *testing.T, ctx context.Context, n float64) string {
	t.Helper()
	return waitFullSyncsBeyond(t, ctx, map[string]float64{"IPv4": n - 1}, n)
}

// waitFullSyncsAfter waits until every family of the suite's daemon has made
// a full sync since the /metrics page was read, and returns the page then.
func waitFullSyncsAfter(t *testing.T, ctx context.Context, page string) string {
	t.Helper()
	return waitFullSyncsBeyond(t, ctx, fullSyncsByFamily(page), 0)
}

// waitFullSyncsBeyond waits until each family's full-sync count is above
// base[family] and at least least (IPv4 must be there), and returns the
// /metrics page then.
func waitFullSyncsBeyond(t *testing.T, ctx context.Context, base map[string]float64, least float64) string {
	t.Helper()
	var page string
	err := framework.Eventually(ctx, 120*time.Second, time.Second, func(ctx context.Context) error {
		if !node.KubeProxyRunning(ctx) {
			return framework.StopTrying(fmt.Errorf("kube-proxy exited:\n%s", node.KubeProxyLog(ctx, 30)))
		}
		var err error
		if page, err = vm.Sh(ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics"); err != nil {
			return err
		}
		got := fullSyncsByFamily(page)
		if _, ok := got["IPv4"]; !ok {
			return fmt.Errorf("no IPv4 full sync yet")
		}
		for fam, c := range got {
			if c < least || c <= base[fam] {
				return fmt.Errorf("full syncs by family %v (%s), want above %v and at least %v", got, fam, base, least)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return page
}

// checkNothingHeldBack fails t when the daemon counts a failed sync or holds
// back an object (a Service the backend refused).
func checkNothingHeldBack(t *testing.T, who, page string) {
	t.Helper()
	failures, held := metricSum(page, "kubeproxy_ipvs_sync_failures_total"), metricSum(page, "kubeproxy_ipvs_held_back_objects")
	if failures != 0 || held != 0 {
		var lines []string
		for _, l := range strings.Split(page, "\n") {
			if strings.HasPrefix(l, "kubeproxy_ipvs_sync_failures_total") || strings.HasPrefix(l, "kubeproxy_ipvs_held_back_objects{") {
				lines = append(lines, l)
			}
		}
		t.Errorf("%s: %v failed syncs, %v objects held back:\n%s", who, failures, held, strings.Join(lines, "\n"))
	}
}

// expectFrom connects count times from namespace ns ("" = the node) and
// checks every connection was answered by pod, which saw source address from.
func expectFrom(t *testing.T, ctx context.Context, what, ns, proto, addr string, count int, pod, from string) {
	t.Helper()
	out, err := node.ClientFrom(ctx, ns, proto, addr, count)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", what, strings.ReplaceAll(out, "\n", " | "))
	lines := strings.Split(out, "\n")
	if len(lines) != count {
		t.Errorf("%s: %d answers, want %d:\n%s", what, len(lines), count, out)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, pod+" from="+from+":") {
			t.Errorf("%s: answer %q, want %s seeing source address %s", what, l, pod, from)
		}
	}
}

func hasElement(t *testing.T, canon, set, elem string) {
	t.Helper()
	if !strings.Contains(canon, "\nelement "+set+" "+elem+"\n") {
		t.Errorf("set %s lacks element %q; its elements:\n%s", set, elem, grepLines(canon, "element "+set+" "))
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNFTablesBackend: the backend switched in place under load, and the
// Services it carries. A client on the node connects to a ClusterIP every
// 20 ms (one in a pod every 100 ms) while the daemon is restarted with
// --ipvs-rules-backend=nftables, then, after the checks below, without it.
// To nftables: the table complete for both families and holding the
// Service's element, no KUBE-* ipset or KUBE- chain left. On nftables, new
// Services answer through it: ClusterIP TCP round robin from the node and
// from a pod, UDP, NodePort from the node and from a pod; a pod reaching
// another pod through a ClusterIP keeps its address, one reaching itself is
// masqueraded (its loop-back element). SCTP node ports, whose elements keep
// the node address in the key: an association to the node port on
// 10.0.2.15 (from the node) and on cbr0's 10.244.0.1 (from a pod) is
// masqueraded (the pod sees 10.244.0.1; without the element's match the
// node's 10.0.2.15 or the client pod's own address), one to an
// externalTrafficPolicy=Local SCTP node port is not. A periodic full sync
// after all that reads the table back, and no periodic full sync since the
// restart repaired anything (the changes a resync takes are not drift);
// nothing held back, no failed sync. To iptables: the table gone, the KUBE-CLUSTER-IP
// entry and its rule there. Each way the virtual server is adopted (its
// connection counter keeps counting); not one connection fails, and the
// pod's source address is kept throughout. (`--cleanup` after the nftables
// backend: TestTwoNodeNFTables, on node2.)
func TestNFTablesBackend(t *testing.T) {
	defaultBackendOnly(t)
	ctx, ns := scenario(t, "e2e-nft")
	t.Cleanup(func() { restoreIPTablesBackend(t) })
	pods := addPods(t, ctx, "nft", 55, 4) // a, b, c serve; d is a client
	a, b, d := pods[0], pods[1], pods[3]
	tcp80 := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	loaded := createService(t, ctx, ns, "load", corev1.ServiceTypeClusterIP, pods[:2], tcp80)
	vip := loaded.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods[:2]))
	loads := []*load{
		startLoad(t, ctx, "", "tcp", vip, 20*time.Millisecond, "--timeout", migrationTimeout),
		startLoad(t, ctx, d.Name, "tcp", vip, 100*time.Millisecond, "--timeout", migrationTimeout),
	}
	time.Sleep(3 * time.Second)

	// iptables -> nftables.
	before := vsConnections(t, ctx, vip)
	start := time.Now()
	restartOurDaemon(t, ctx, framework.NFTablesBackend)
	waitFullSyncs(t, ctx, 1)
	synced := time.Since(start)
	waitNFTablesOnly(t, ctx, framework.NodeName, vm.Sh, true, fmt.Sprintf("element ip-cluster-ip %s . tcp . 80", loaded.Spec.ClusterIP))
	after := vsConnections(t, ctx, vip)
	t.Logf("to nftables: first full syncs %s, the table complete and the iptables state gone %s after the restart began; VS %s connections %d -> %d; the daemon's full syncs:\n%s",
		synced.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond), vip, before, after,
		guest(t, ctx, "grep 'Full sync complete' "+node.ProxyLogPath+" | tail -n 2 | cut -c1-360"))
	if after <= before {
		t.Errorf("to nftables: the connection counter of %s went from %d to %d: the virtual server was re-created", vip, before, after)
	}

	nftServices(t, ctx, ns, pods)

	// A periodic full sync over everything the backend wrote.
	page := guest(t, ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics")
	page2 := waitFullSyncsAfter(t, ctx, page)
	drift1, drift2 := metricSum(page, "kubeproxy_ipvs_drift_repairs_total"), metricSum(page2, "kubeproxy_ipvs_drift_repairs_total")
	t.Logf("nftables: drift repairs %v before the periodic full syncs, %v after", drift1, drift2)
	// Nobody else writes to what the daemon owns here, and the changes a resync takes
	// are not drift: no resync since the restart may have repaired anything.
	if drift1 != 0 || drift2 != 0 {
		t.Errorf("nftables: periodic full syncs repaired drift (%v, then %v): what the daemon wrote is not what it reads back; by subsystem:\n%s\nthe daemon says:\n%s",
			drift1, drift2, grepLines(page2, "kubeproxy_ipvs_drift_repairs_total{"),
			guest(t, ctx, "grep 'repaired drift' "+node.ProxyLogPath+" | tail -n 5 | cut -c1-300 || true"))
	}
	checkNothingHeldBack(t, framework.NodeName+" on nftables", page2)

	// nftables -> iptables.
	before = vsConnections(t, ctx, vip)
	start = time.Now()
	restartOurDaemon(t, ctx)
	page = waitFullSyncs(t, ctx, 1)
	synced = time.Since(start)
	if err := waitTableGone(ctx, framework.NodeName, vm.Sh); err != nil {
		t.Fatal(err)
	}
	waitGuest(t, ctx, "the iptables backend's entry and rule", fmt.Sprintf(`ipset list KUBE-CLUSTER-IP | grep -qx '%s,tcp:80' &&
iptables-save -t nat | grep -q -- '-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst'`, loaded.Spec.ClusterIP))
	after = vsConnections(t, ctx, vip)
	t.Logf("to iptables: first full syncs %s, the table gone and the iptables state there %s after the restart began; VS %s connections %d -> %d; the daemon's full syncs:\n%s",
		synced.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond), vip, before, after,
		guest(t, ctx, "grep 'Full sync complete' "+node.ProxyLogPath+" | tail -n 2 | cut -c1-360"))
	if after <= before {
		t.Errorf("to iptables: the connection counter of %s went from %d to %d: the virtual server was re-created", vip, before, after)
	}
	checkNothingHeldBack(t, framework.NodeName+" on iptables", page)

	time.Sleep(2 * time.Second)
	for i, l := range loads {
		got, errs, errLines := l.stop(t, ctx)
		if errs != 0 {
			t.Errorf("load %d (%s): %d connections failed across the switches:\n%s", i, []string{"node", d.Name}[i], errs, strings.Join(errLines, "\n"))
		}
		if got[a.Name] == 0 || got[b.Name] == 0 {
			t.Errorf("load %d: both pods must answer: %v", i, got)
		}
	}
	// The pod's connections kept its own address with either backend.
	var wrong []string
	for _, line := range strings.Split(loads[1].out, "\n") {
		if strings.HasPrefix(line, "nft-") && !strings.Contains(line, " from="+d.IP+":") {
			wrong = append(wrong, line)
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d connections of pod %s reached a pod with another source address: %s", len(wrong), d.Name, strings.Join(wrong[:min(5, len(wrong))], " | "))
	}
}

// nftServices creates Services over pods (a, b, c serve; d is a client) on
// the nftables backend and checks their elements and traffic (see
// TestNFTablesBackend).
func nftServices(t *testing.T, ctx context.Context, ns string, pods []*framework.Pod) {
	t.Helper()
	a, b, d := pods[0], pods[1], pods[3]
	tcp80 := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	sctp80 := framework.ServicePort{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 80}
	web := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods[:3], tcp80)
	dns := createService(t, ctx, ns, "dns", corev1.ServiceTypeClusterIP, pods[:2], framework.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
	np := createService(t, ctx, ns, "np", corev1.ServiceTypeNodePort, pods[:2], tcp80)
	onlyB := createService(t, ctx, ns, "only-b", corev1.ServiceTypeClusterIP, []*framework.Pod{b}, tcp80)
	sctp := createService(t, ctx, ns, "sctp", corev1.ServiceTypeNodePort, []*framework.Pod{a}, sctp80)
	sctpLocal := createServiceWith(t, ctx, ns, "sctp-local", corev1.ServiceTypeNodePort,
		func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
		endpoints([]*framework.Pod{a}), sctp80)
	npAddr := fmt.Sprintf("%s:%d", framework.NodeIP, np.Spec.Ports[0].NodePort)
	sctpNP, sctpLocalNP := sctp.Spec.Ports[0].NodePort, sctpLocal.Spec.Ports[0].NodePort
	waitRealServers(t, ctx, "TCP", web.Spec.ClusterIP+":80", masq(pods[:3]))
	waitRealServers(t, ctx, "UDP", dns.Spec.ClusterIP+":53", masq(pods[:2]))
	waitRealServers(t, ctx, "TCP", npAddr, masq(pods[:2]))
	waitRealServers(t, ctx, "TCP", onlyB.Spec.ClusterIP+":80", masq([]*framework.Pod{b}))
	waitRealServers(t, ctx, "SCTP", fmt.Sprintf("%s:%d", framework.NodeIP, sctpNP), masq([]*framework.Pod{a}))
	waitRealServers(t, ctx, "SCTP", fmt.Sprintf("10.244.0.1:%d", sctpNP), masq([]*framework.Pod{a}))
	waitRealServers(t, ctx, "SCTP", fmt.Sprintf("%s:%d", framework.NodeIP, sctpLocalNP), masq([]*framework.Pod{a}))

	canon, err := nftTable(ctx, vm.Sh)
	if err != nil {
		t.Fatal(err)
	}
	hasElement(t, canon, "ip-cluster-ip", web.Spec.ClusterIP+" . tcp . 80")
	hasElement(t, canon, "ip-cluster-ip", dns.Spec.ClusterIP+" . udp . 53")
	hasElement(t, canon, "ip-ipvs-ips", web.Spec.ClusterIP)
	hasElement(t, canon, "ip-node-port", fmt.Sprintf("tcp . %d", np.Spec.Ports[0].NodePort))
	hasElement(t, canon, "ip-loop-back", fmt.Sprintf("%[1]s . tcp . 8080 . %[1]s", b.IP))
	for _, addr := range []string{framework.NodeIP, "10.244.0.1"} {
		hasElement(t, canon, "ip-node-port-sctp", fmt.Sprintf("%s . sctp . %d", addr, sctpNP))
		hasElement(t, canon, "ip-node-port-sctp", fmt.Sprintf("%s . sctp . %d", addr, sctpLocalNP))
		hasElement(t, canon, "ip-node-port-local-sctp", fmt.Sprintf("%s . sctp . %d", addr, sctpLocalNP))
	}
	if t.Failed() {
		t.FailNow()
	}

	expectAnswers(t, ctx, "", "tcp", web.Spec.ClusterIP+":80", 9, map[string]int{"nft-a": 3, "nft-b": 3, "nft-c": 3})
	out, err := node.ClientFrom(ctx, d.Name, "tcp", web.Spec.ClusterIP+":80", 6)
	if err != nil {
		t.Fatal(err)
	}
	if got, errs := framework.CountAnswers(out); errs != 0 || len(got) != 3 {
		t.Errorf("from pod %s: answers %v with %d errors, want all three pods:\n%s", d.Name, got, errs, out)
	}
	expectAnswers(t, ctx, "", "udp", dns.Spec.ClusterIP+":53", 4, map[string]int{"nft-a": 2, "nft-b": 2})
	expectAnswers(t, ctx, "", "tcp", npAddr, 4, map[string]int{"nft-a": 2, "nft-b": 2})
	expectAnswers(t, ctx, d.Name, "tcp", npAddr, 4, map[string]int{"nft-a": 2, "nft-b": 2})

	// Pod to Service: the source is kept; hairpin is masqueraded.
	expectFrom(t, ctx, "pod d -> ClusterIP -> pod b", d.Name, "tcp", onlyB.Spec.ClusterIP+":80", 2, b.Name, d.IP)
	out, err = node.ClientFrom(ctx, b.Name, "tcp", onlyB.Spec.ClusterIP+":80", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hairpin pod b -> ClusterIP -> pod b: %s", strings.ReplaceAll(out, "\n", " | "))
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, b.Name+" from=") || strings.HasPrefix(l, b.Name+" from="+b.IP+":") {
			t.Errorf("hairpin pod b -> ClusterIP -> pod b: answer %q, want one from a masqueraded source", l)
		}
	}

	// SCTP node ports (the node address is in the elements' key).
	expectFrom(t, ctx, "node -> SCTP node port on 10.0.2.15", "", "sctp", fmt.Sprintf("%s:%d", framework.NodeIP, sctpNP), 2, a.Name, "10.244.0.1")
	expectFrom(t, ctx, "pod d -> SCTP node port on 10.244.0.1", d.Name, "sctp", fmt.Sprintf("10.244.0.1:%d", sctpNP), 2, a.Name, "10.244.0.1")
	expectFrom(t, ctx, "node -> SCTP eTP=Local node port on 10.0.2.15", "", "sctp", fmt.Sprintf("%s:%d", framework.NodeIP, sctpLocalNP), 2, a.Name, framework.NodeIP)
}
