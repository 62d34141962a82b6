//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// The nftables rules backend on the two-node testbed (after twonode_test.go,
// before the soak): both daemons restarted with --ipvs-rules-backend=nftables,
// traffic from the outside network, and the three translations that are not
// one to one, each measured on the same packets under the iptables backend
// first. Pod addresses: node1 10.244.0.246-247 (SCTP servers:
// framework.Node.AddPod), node2 10.244.1.111; Service addresses from outside
// 203.0.113.50-52.

// restartTwoNodes stops both daemons, then starts both with flags and waits
// until both are ready.
func restartTwoNodes(t *testing.T, ctx context.Context, flags ...string) {
	t.Helper()
	start := time.Now()
	for _, n := range two.Nodes {
		if err := n.StopKubeProxy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range two.Nodes {
		if err := n.StartKubeProxy(ctx, cp, "", flags...); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range two.Nodes {
		if err := n.WaitKubeProxyReady(ctx, 120*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("both daemons restarted with flags %q in %s", flags, time.Since(start).Round(100*time.Millisecond))
}

// restoreTwoNodes puts both daemons back on the iptables backend (restarting
// those on nftables or not running) and waits until their tables are gone.
func restoreTwoNodes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, n := range two.Nodes {
		if n.KubeProxyRunning(ctx) && !runsNFTables(ctx, n.PID()) {
			continue
		}
		if err := n.StopKubeProxy(ctx); err != nil {
			t.Errorf("%s: stopping kube-proxy: %v", n.Name, err)
		}
		if err := n.StartKubeProxy(ctx, cp, ""); err != nil {
			t.Errorf("%s: starting kube-proxy on the iptables backend again: %v", n.Name, err)
		}
	}
	for _, n := range two.Nodes {
		if err := n.WaitKubeProxyReady(ctx, 120*time.Second); err != nil {
			t.Errorf("%s on the iptables backend again: %v", n.Name, err)
			continue
		}
		if err := waitTableGone(ctx, n.Name, n.Sh); err != nil {
			t.Errorf("back on the iptables backend: %v", err)
		}
	}
}

// externalIPRuleCounts reads node n's packet counters of the two nat
// KUBE-SERVICES rules that accept traffic to an externalIP (iptables
// backend): the one for traffic not from a bridge port and not from the node
// (`-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL`) and the one
// for local destinations (`-m addrtype --dst-type LOCAL`).
func externalIPRuleCounts(t *testing.T, ctx context.Context, n *framework.ClusterNode) (notBridge, dstLocal int) {
	t.Helper()
	out, err := n.Sh(ctx, "iptables -t nat -L KUBE-SERVICES -n -v -x")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "ACCEPT" || !strings.Contains(line, "KUBE-EXTERNAL-IP dst,dst") {
			continue
		}
		v, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("counter of %q: %v", line, err)
		}
		switch {
		case strings.Contains(line, "physdev-is-in"):
			notBridge, found = v, found+1
		case strings.Contains(line, "dst-type LOCAL"):
			dstLocal, found = v, found+1
		}
	}
	if found != 2 {
		t.Fatalf("%s: the two externalIP ACCEPT rules not found in nat KUBE-SERVICES:\n%s", n.Name, out)
	}
	return notBridge, dstLocal
}

// nodeFullSyncs is the IPv4 full-sync count of node n's daemon.
func nodeFullSyncs(ctx context.Context, n *framework.ClusterNode) (float64, error) {
	page, err := n.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return fullSyncsByFamily(page)["IPv4"], nil
}

// betweenFullSyncs runs measure on node n right after its daemon finished a
// full sync (IPv4), and again, up to three times, while another full sync ran
// before measure was done: every full sync writes the chains anew, which
// resets iptables' rule counters and gives nftables rules new handles that a
// running `nft monitor trace` cannot name (each syncPeriod, 10 s).
func betweenFullSyncs(t *testing.T, ctx context.Context, n *framework.ClusterNode, measure func()) {
	t.Helper()
	for attempt := 1; attempt <= 3; attempt++ {
		n0, err := nodeFullSyncs(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		var n1 float64
		err = framework.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
			var err error
			if n1, err = nodeFullSyncs(ctx, n); err == nil && n1 <= n0 {
				err = fmt.Errorf("%s made no full sync after the %v before", n.Name, n0)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		measure()
		n2, err := nodeFullSyncs(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if n2 == n1 {
			return
		}
		t.Logf("%s: a full sync ran during the measurement (attempt %d): again", n.Name, attempt)
	}
	t.Fatalf("%s: no measurement fell between two full syncs in three attempts", n.Name)
}

// traceOnce records, with nftables tracing on node1, which rule of the
// backend's chain ip-services accepts the first packet (SYN) of each
// connection to dst made by do: source address -> the rule.
func traceOnce(t *testing.T, ctx context.Context, dst string, do func()) map[string]string {
	t.Helper()
	guest(t, ctx, fmt.Sprintf(`nft -f - <<'EOF'
table inet e2e-trace {
	chain pre {
		type filter hook prerouting priority -350; policy accept;
		ip daddr %s tcp flags & (syn | ack) == syn meta nftrace set 1
	}
}
EOF`, dst))
	log := fmt.Sprintf("/tmp/nft-trace-%d.log", time.Now().UnixNano())
	pid, err := vm.Start(ctx, log, "nft", "monitor", "trace")
	stop := func() {
		_ = vm.Signal(context.Background(), pid, syscall.SIGTERM)
		_, _ = vm.Sh(context.Background(), "nft delete table inet e2e-trace 2>/dev/null; true")
	}
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(stop)
	time.Sleep(time.Second) // the monitor subscribes
	do()
	time.Sleep(time.Second)
	stop()
	out := guest(t, ctx, "cat "+log)
	src := map[string]string{}      // trace id -> source address
	accepted := map[string]string{} // trace id -> the accepting rule
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "trace" || f[1] != "id" {
			continue
		}
		id, rest := f[2], strings.Join(f[3:], " ")
		if i := strings.Index(rest, " ip saddr "); i >= 0 && strings.Contains(rest, " packet: ") && src[id] == "" {
			src[id] = strings.Fields(rest[i+len(" ip saddr "):])[0]
		}
		if r, ok := strings.CutPrefix(rest, "inet kube-proxy-ipvs ip-services rule "); ok && strings.HasSuffix(r, " (verdict accept)") {
			accepted[id] = strings.TrimSuffix(r, " (verdict accept)")
		}
	}
	bySource := map[string]string{}
	for id, r := range accepted {
		if s := src[id]; s != "" {
			if prev, ok := bySource[s]; ok && prev != r {
				t.Errorf("connections from %s to %s were accepted by different rules: %q and %q", s, dst, prev, r)
			}
			bySource[s] = r
		}
	}
	if len(bySource) == 0 {
		t.Logf("no trace of a connection to %s accepted in ip-services; the monitor's output:\n%s", dst, out)
	}
	return bySource
}

// TestTwoNodeNFTables: both daemons on the nftables backend, traffic from
// outside. NodePort to an endpoint on the other node (masqueraded to the entry
// node's underlay address) and a local one (cbr0's), an externalIP;
// loadBalancerSourceRanges (the allowed source answered, the other one not,
// the node port open to both); externalTrafficPolicy=Local keeping the
// client's address on the node port and the LB IP. The translations that are
// not one to one, each shown on the same traffic under the iptables backend
// first:
//   - `-m physdev ! --physdev-is-in` -> `meta iifkind != "bridge"`: an outside
//     client's connection to an externalIP is accepted by that rule (iptables:
//     its packet counter), a pod's by the local-destination rule after it
//     (nftables: a trace of the SYNs through the table);
//   - the out-filter's `-m ipvs --vaddr/--vport` -> `ct original ip daddr /
//     proto-dst`: each node's own connection to the LB IP with source ranges,
//     which the kernel sends from the LB address, is dropped (the node is not
//     an allowed source), while one from the node's address is answered;
//   - SCTP node ports keep the node address in their key: an outside
//     association to node1's SCTP node port is masqueraded (the local pod sees
//     cbr0's address), through node2 too (node2's underlay address), and one
//     to an externalTrafficPolicy=Local SCTP node port keeps the client's.
//
// Then `kube-proxy --cleanup` on node2 removes the table.
func TestTwoNodeNFTables(t *testing.T) {
	defaultBackendOnly(t)
	ctx, ns := twoNodeScenario(t, "e2e-2n-nft")
	defer twoDumpOnFailure(t)
	began := time.Now()
	phase := func(what string) {
		t.Logf("%s %s after the start", what, time.Since(began).Round(100*time.Millisecond))
	}
	n1, n2 := two.Nodes[0], two.Nodes[1]
	t.Cleanup(func() { restoreTwoNodes(t) })
	p1 := addPods(t, ctx, "nf1", 246, 2) // on node1, answering SCTP too: a serves, b is a client
	a, b := p1[0], p1[1]
	c := twoPods(t, ctx, n2, "nf2", 111, 1)[0]
	const extIP, lbFW, lbLocal = "203.0.113.50", "203.0.113.51", "203.0.113.52"
	tcp80 := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	sctp80 := framework.ServicePort{Name: "sctp", Protocol: corev1.ProtocolSCTP, Port: 80}
	local := func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }
	ext := createServiceWith(t, ctx, ns, "ext", corev1.ServiceTypeNodePort,
		func(s *corev1.Service) { s.Spec.ExternalIPs = []string{extIP} }, on(n2, c), tcp80)
	fw := createServiceWith(t, ctx, ns, "fw", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{framework.OutsideIP + "/32"} },
		append(on(n1, a), on(n2, c)...), tcp80)
	setIngress(t, ctx, fw, lbFW)
	loc := createServiceWith(t, ctx, ns, "local", corev1.ServiceTypeLoadBalancer, local, on(n1, a), tcp80)
	setIngress(t, ctx, loc, lbLocal)
	sctp := createServiceWith(t, ctx, ns, "sctp", corev1.ServiceTypeNodePort, nil, on(n1, a), sctp80)
	sctpLocal := createServiceWith(t, ctx, ns, "sctp-local", corev1.ServiceTypeNodePort, local, on(n1, a), sctp80)
	extNP, fwNP, locNP := ext.Spec.Ports[0].NodePort, fw.Spec.Ports[0].NodePort, loc.Spec.Ports[0].NodePort
	sctpNP, sctpLocalNP := sctp.Spec.Ports[0].NodePort, sctpLocal.Spec.Ports[0].NodePort
	at := func(n *framework.ClusterNode, port int32) string { return fmt.Sprintf("%s:%d", n.IP, port) }
	for _, n := range two.Nodes {
		waitOn(t, ctx, n, "TCP", at(n, extNP), c.IP)
		waitOn(t, ctx, n, "TCP", extIP+":80", c.IP)
		waitOn(t, ctx, n, "TCP", lbFW+":80", a.IP, c.IP)
		waitOn(t, ctx, n, "SCTP", at(n, sctpNP), a.IP)
	}
	waitOn(t, ctx, n1, "TCP", lbLocal+":80", a.IP)
	waitOn(t, ctx, n1, "SCTP", at(n1, sctpLocalNP), a.IP)
	route(t, ctx, extIP, n1)
	phase("pods and Services programmed")

	// The two translations whose rules the same traffic shows under both
	// backends: the node's own connections to the LB IP with source ranges
	// (out-filter), and SCTP node ports from outside.
	ownAndSCTP := func(backend string) {
		t.Helper()
		for _, n := range two.Nodes {
			out := mustClient(t, ctx, n, "", "tcp", lbFW+":80", 1)
			if !strings.HasPrefix(out, "ERROR") {
				t.Errorf("%s (%s): the node's own connection to %s (from the LB address; the node is outside loadBalancerSourceRanges) was answered: %q", backend, n.Name, lbFW, out)
			}
			answers(t, fmt.Sprintf("%s: %s -> LB IP with source ranges, from its address %s", backend, n.Name, n.IP),
				mustClient(t, ctx, n, "", "tcp", lbFW+":80", 2, "--source", n.IP), 2, nil, "")
		}
		answers(t, backend+": outside -> node1 SCTP node port (masqueraded to cbr0's address)",
			outside(t, ctx, "", "sctp", at(n1, sctpNP), 2), 2, map[string]int{a.Name: 2}, n1.Gateway)
		answers(t, backend+": outside -> node2 SCTP node port -> pod on node1 (masqueraded to node2's address)",
			outside(t, ctx, "", "sctp", at(n2, sctpNP), 2), 2, map[string]int{a.Name: 2}, n2.IP)
		answers(t, backend+": outside -> node1 SCTP eTP=Local node port (client address kept)",
			outside(t, ctx, "", "sctp", at(n1, sctpLocalNP), 2), 2, map[string]int{a.Name: 2}, framework.OutsideIP)
	}
	toExternalIP := func(backend string) {
		t.Helper()
		answers(t, backend+": outside -> externalIP via node1", outside(t, ctx, "", "tcp", extIP+":80", 2), 2, map[string]int{c.Name: 2}, n1.IP)
		answers(t, backend+": pod on node1 -> externalIP", mustClient(t, ctx, n1, b.Name, "tcp", extIP+":80", 2), 2, map[string]int{c.Name: 2}, n1.IP)
	}

	// The iptables backend: the baseline. A rewrite of nat KUBE-SERVICES
	// between the two readings would reset the counters: then measure again.
	var nb0, dl0, nb1, dl1 int
	betweenFullSyncs(t, ctx, n1, func() {
		nb0, dl0 = externalIPRuleCounts(t, ctx, n1)
		toExternalIP("iptables")
		nb1, dl1 = externalIPRuleCounts(t, ctx, n1)
	})
	t.Logf("iptables: externalIP ACCEPT rules on node1: not-from-a-bridge +%d, local destination +%d (2 connections from outside, then 2 from a pod)", nb1-nb0, dl1-dl0)
	if nb1-nb0 != 2 || dl1-dl0 != 2 {
		t.Errorf("iptables: the outside's 2 connections must be accepted by the physdev rule and the pod's 2 by the dst-type LOCAL rule: counted +%d and +%d", nb1-nb0, dl1-dl0)
	}
	ownAndSCTP("iptables")
	phase("the iptables baseline measured")
	if t.Failed() {
		t.FailNow()
	}

	// The nftables backend.
	restartTwoNodes(t, ctx, framework.NFTablesBackend)
	canon1 := waitNFTablesOnly(t, ctx, n1.Name, n1.Sh, true,
		"element ip-external-ip "+extIP+" . tcp . 80",
		"element ip-load-balancer-fw "+lbFW+" . tcp . 80",
		"element ip-load-balancer-source "+lbFW+" . tcp . 80 . "+framework.OutsideIP,
		"element ip-load-balancer-local "+lbLocal+" . tcp . 80",
		fmt.Sprintf("element ip-node-port-local tcp . %d", locNP),
		fmt.Sprintf("element ip-node-port-sctp %s . sctp . %d", n1.IP, sctpNP),
		fmt.Sprintf("element ip-node-port-local-sctp %s . sctp . %d", n1.IP, sctpLocalNP),
		fmt.Sprintf("rule ip-ipvs-out-filter ip saddr %[1]s meta l4proto tcp ct original ip daddr %[1]s ct original proto-dst 80 drop", lbFW))
	waitNFTablesOnly(t, ctx, n2.Name, n2.Sh, false,
		fmt.Sprintf("element ip-node-port-sctp %s . sctp . %d", n2.IP, sctpNP),
		fmt.Sprintf("rule ip-ipvs-out-filter ip saddr %[1]s meta l4proto tcp ct original ip daddr %[1]s ct original proto-dst 80 drop", lbFW))
	t.Logf("node1's table: %d lines", strings.Count(canon1, "\n"))
	phase("both nodes on nftables alone")

	var accepted map[string]string
	betweenFullSyncs(t, ctx, n1, func() { accepted = traceOnce(t, ctx, extIP, func() { toExternalIP("nftables") }) })
	for src, rule := range accepted {
		t.Logf("nftables: the SYN from %s to %s accepted by ip-services rule %q", src, extIP, rule)
	}
	if r := accepted[framework.OutsideIP]; !strings.Contains(r, `iifkind != "bridge"`) {
		t.Errorf("nftables: the outside's connection to the externalIP must be accepted by the not-from-a-bridge rule, was by %q", r)
	}
	if r := accepted[b.IP]; !strings.Contains(r, "fib daddr type local accept") || strings.Contains(r, "iifkind") {
		t.Errorf("nftables: the pod's connection to the externalIP (through the bridge) must be accepted by the local-destination rule, was by %q", r)
	}
	ownAndSCTP("nftables")

	// NodePort from outside to an endpoint on node2: masqueraded to the entry
	// node's address towards the pod.
	answers(t, "outside -> node1 node port -> pod on node2", outside(t, ctx, "", "tcp", at(n1, extNP), 3), 3, map[string]int{c.Name: 3}, n1.IP)
	answers(t, "outside -> node2 node port -> pod on node2", outside(t, ctx, "", "tcp", at(n2, extNP), 3), 3, map[string]int{c.Name: 3}, n2.Gateway)

	// loadBalancerSourceRanges through each node.
	for _, n := range two.Nodes {
		route(t, ctx, lbFW, n)
		answers(t, fmt.Sprintf("allowed %s -> LB IP via %s", framework.OutsideIP, n.Name),
			outside(t, ctx, framework.OutsideIP, "tcp", lbFW+":80", 4), 4, map[string]int{a.Name: 2, c.Name: 2}, "")
		out := outside(t, ctx, framework.OutsideOtherIP, "tcp", lbFW+":80", 2)
		if got, errs := framework.CountAnswers(out); errs != 2 || len(got) != 0 {
			t.Errorf("%s is outside loadBalancerSourceRanges but reached %s via %s: %v (%d errors)\n%s", framework.OutsideOtherIP, lbFW, n.Name, got, errs, out)
		}
		answers(t, fmt.Sprintf("denied source -> node port of %s (not filtered)", n.Name),
			outside(t, ctx, framework.OutsideOtherIP, "tcp", at(n, fwNP), 2), 2, nil, "")
	}

	// externalTrafficPolicy=Local: the client's address reaches the pod.
	answers(t, "outside -> node1 node port (eTP=Local)", outside(t, ctx, "", "tcp", at(n1, locNP), 3), 3, map[string]int{a.Name: 3}, framework.OutsideIP)
	route(t, ctx, lbLocal, n1)
	answers(t, "outside -> LB IP via node1 (eTP=Local)", outside(t, ctx, "", "tcp", lbLocal+":80", 3), 3, map[string]int{a.Name: 3}, framework.OutsideIP)

	for _, n := range two.Nodes {
		page, err := n.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkNothingHeldBack(t, n.Name, page)
	}
	if t.Failed() {
		return
	}

	phase("the nftables checks done")

	// `kube-proxy --cleanup` on node2 (as an administrator runs it: no backend
	// flag) removes the table with everything else; the cleanup starts node2's
	// daemon on the iptables backend again.
	if err := n2.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vm.WriteFile(ctx, "/kpi/node2/cleanup.yaml", []byte(n2.Config("")), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := n2.Exec(ctx, vm.KubeProxyCommand("--cleanup", "--config=/kpi/node2/cleanup.yaml", "--v=2")...)
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("kube-proxy --cleanup on %s exited %d:\n%s%s", n2.Name, r.ExitCode, r.Stdout, r.Stderr)
	}
	left, err := n2.Sh(ctx, `nft list tables | grep -w kube-proxy-ipvs || true
ip link show kube-ipvs0 2>/dev/null | head -1
ipvsadm -Ln | awk 'NR>3'
`+iptablesLeftovers)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(left) != "" {
		t.Fatalf("left behind on %s after kube-proxy --cleanup of the nftables backend:\n%s", n2.Name, left)
	}
}
