//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// TestTwoNodeSoak (runs last: it restarts both daemons and the apiserver)
// runs both nodes for KPI_SOAK_DURATION (default 5m; `make soak`: 1h) under
// churn - Services created and deleted, endpoints scaled and moved between
// the nodes, the apiserver restarted, a node address added and removed, each
// daemon restarted once - with clients in pods on both nodes and outside
// sending all the time. Every KPI_SOAK_SAMPLE (default 1m) it records the
// requests served and failed and each daemon's goroutines, open fds, RSS and
// Go heap; at the end it checks that nothing grew after the warm-up and
// compares IPVS, the Service ipsets and kube-ipvs0 on both nodes with what
// the final API state implies. The report (a Markdown table) goes to
// KPI_SOAK_REPORT (default _output/soak/report.md).
//
// Pod addresses: node1 10.244.0.240-245, node2 10.244.1.101-105; outside
// Service addresses 203.0.113.100-101.
func TestTwoNodeSoak(t *testing.T) {
	duration := envDuration(t, "KPI_SOAK_DURATION", 5*time.Minute)
	sampleEvery := envDuration(t, "KPI_SOAK_SAMPLE", time.Minute)
	ctx, ns := twoNodeScenario(t, "e2e-2n-soak")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	logf("soak: %s, a sample every %s", duration, sampleEvery)

	// The pool of backend pods (4 per node) and one client pod per node.
	pool := append(twoPods(t, ctx, n1, "sk1", 240, 4), twoPods(t, ctx, n2, "sk2", 101, 4)...)
	home := map[string]*framework.ClusterNode{}
	for _, p := range pool {
		home[p.Name] = n1
		if strings.HasPrefix(p.Name, "sk2") {
			home[p.Name] = n2
		}
	}
	c1 := twoPods(t, ctx, n1, "skc1", 245, 1)[0]
	c2 := twoPods(t, ctx, n2, "skc2", 105, 1)[0]
	epsOf := func(pods []*framework.Pod) []framework.Endpoint {
		var eps []framework.Endpoint
		for _, p := range pods {
			eps = append(eps, on(home[p.Name], p)...)
		}
		return eps
	}

	// The steady Service every client uses; its endpoints only ever change
	// gracefully (new ready, old terminating, old removed), so no client
	// connection may fail.
	const extIP, lbIP = "203.0.113.100", "203.0.113.101"
	steady := []*framework.Pod{pool[0], pool[4]}
	svc := createServiceWith(t, ctx, ns, "steady", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.ExternalIPs = []string{extIP} }, epsOf(steady),
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
		framework.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
	setIngress(t, ctx, svc, lbIP)
	vip, vipUDP := svc.Spec.ClusterIP+":80", svc.Spec.ClusterIP+":53"
	np := svc.Spec.Ports[0].NodePort
	for _, n := range two.Nodes {
		waitOn(t, ctx, n, "TCP", vip, steady[0].IP, steady[1].IP)
		waitOn(t, ctx, n, "TCP", lbIP+":80", steady[0].IP, steady[1].IP)
	}
	route(t, ctx, lbIP, n2)
	route(t, ctx, extIP, n1)

	type client struct {
		name string
		pid  int
		log  string
	}
	var clients []*client
	startClient := func(name, netns, proto, addr string) {
		c := &client{name: name, log: fmt.Sprintf("/tmp/soak-client-%d.log", len(clients))}
		pid, err := vm.Start(ctx, c.log, "ip", "netns", "exec", netns, "/kpi/bin/e2e-agent", "client", "--proto", proto,
			"--addr", addr, "--count", "0", "--interval", "200ms", "--timeout", "6s", "--stamp")
		if err != nil {
			t.Fatal(err)
		}
		c.pid = pid
		t.Cleanup(func() { _ = vm.Signal(context.Background(), pid, syscall.SIGKILL) })
		clients = append(clients, c)
	}
	startClient("pod1->ClusterIP/tcp", c1.Name, "tcp", vip)
	startClient("pod2->ClusterIP/tcp", c2.Name, "tcp", vip)
	startClient("pod1->ClusterIP/udp", c1.Name, "udp", vipUDP)
	startClient("out->node1:np", framework.OutsideNS, "tcp", fmt.Sprintf("%s:%d", n1.IP, np))
	startClient("out->node2:np", framework.OutsideNS, "tcp", fmt.Sprintf("%s:%d", n2.IP, np))
	startClient("out->LB(node2)", framework.OutsideNS, "tcp", lbIP+":80")
	startClient("out->extIP(node1)", framework.OutsideNS, "tcp", extIP+":80")

	// Counts: served and failed per client (cumulative), from the logs.
	counts := func(ctx context.Context) (map[string][2]int, error) {
		var script strings.Builder
		for _, c := range clients {
			fmt.Fprintf(&script, "echo $(grep -vc -e '^ERROR' -e '^SUMMARY' %[1]s) $(grep -c '^ERROR' %[1]s)\n", c.log)
		}
		out, err := vm.Sh(ctx, script.String())
		if err != nil {
			return nil, err
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		res := map[string][2]int{}
		for i, c := range clients {
			var ok, bad int
			if i < len(lines) {
				fmt.Sscanf(lines[i], "%d %d", &ok, &bad)
			}
			res[c.name] = [2]int{ok, bad}
		}
		return res, nil
	}

	// Samples.
	type sample struct {
		at                  time.Duration
		served, failed      int
		gor, fds, rss, heap [2]float64
		syncs               [2]float64
	}
	var (
		mu      sync.Mutex
		samples []sample
		events  []string
	)
	start := time.Now()
	event := func(format string, args ...any) {
		s := fmt.Sprintf("%6s  %s", time.Since(start).Round(time.Second), fmt.Sprintf(format, args...))
		logf("soak: %s", s)
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	takeSample := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := sample{at: time.Since(start)}
		if c, err := counts(ctx); err == nil {
			for _, v := range c {
				s.served += v[0]
				s.failed += v[1]
			}
		}
		for i, n := range two.Nodes {
			page, err := n.Metrics(ctx)
			if err != nil {
				event("sample: /metrics of %s: %v", n.Name, err)
				continue
			}
			s.gor[i], _ = framework.Gauge(page, "go_goroutines")
			s.fds[i], _ = framework.Gauge(page, "process_open_fds")
			s.rss[i], _ = framework.Gauge(page, "process_resident_memory_bytes")
			s.heap[i], _ = framework.Gauge(page, "go_memstats_heap_inuse_bytes")
			s.syncs[i], _, _ = framework.HistogramSummary(page, "kubeproxy_sync_proxy_rules_duration_seconds")
		}
		logf("soak sample %s: served %d failed %d | node1 goroutines %.0f fds %.0f rss %.1f MiB heap %.1f MiB syncs %.0f | node2 goroutines %.0f fds %.0f rss %.1f MiB heap %.1f MiB syncs %.0f",
			s.at.Round(time.Second), s.served, s.failed, s.gor[0], s.fds[0], s.rss[0]/(1<<20), s.heap[0]/(1<<20), s.syncs[0],
			s.gor[1], s.fds[1], s.rss[1]/(1<<20), s.heap[1]/(1<<20), s.syncs[1])
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-stopSampler:
				return
			case <-tick.C:
				takeSample()
			}
		}
	}()

	// The churn.
	type churnSvc struct {
		svc  *corev1.Service
		pods []*framework.Pod
	}
	var churn []churnSvc
	pick := func(k int, exclude []*framework.Pod) []*framework.Pod {
		var cand []*framework.Pod
	outer:
		for _, p := range pool {
			for _, e := range exclude {
				if e == p {
					continue outer
				}
			}
			cand = append(cand, p)
		}
		rng.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
		return cand[:k]
	}
	fail := func(format string, args ...any) {
		close(stopSampler)
		<-samplerDone
		t.Fatalf(format, args...)
	}
	restartDaemon := func(n *framework.ClusterNode) {
		if err := n.StopKubeProxy(ctx); err != nil {
			fail("stopping kube-proxy on %s: %v", n.Name, err)
		}
		time.Sleep(2 * time.Second)
		if err := n.StartKubeProxy(ctx, cp, ""); err != nil {
			fail("starting kube-proxy on %s: %v", n.Name, err)
		}
		if err := n.WaitKubeProxyReady(ctx, 120*time.Second); err != nil {
			fail("kube-proxy on %s after its restart: %v", n.Name, err)
		}
	}
	once := map[string]float64{"apiserver": 0.15, "node1": 0.25, "node2": 0.35}
	nextChurnID, addrOn := 0, map[int]bool{}
	const tick = 15 * time.Second
	for step := 0; time.Since(start) < duration; step++ {
		frac := float64(time.Since(start)) / float64(duration)
		switch {
		case once["apiserver"] > 0 && frac >= once["apiserver"]:
			once["apiserver"] = 0
			event("apiserver stopped for 15 s")
			cp.StopAPIServer()
			time.Sleep(15 * time.Second)
			if err := cp.StartAPIServer(ctx); err != nil {
				fail("restarting the apiserver: %v", err)
			}
			event("apiserver back")
		case once["node1"] > 0 && frac >= once["node1"]:
			once["node1"] = 0
			event("restarting kube-proxy on node1")
			restartDaemon(n1)
			event("kube-proxy on node1 ready again")
		case once["node2"] > 0 && frac >= once["node2"]:
			once["node2"] = 0
			event("restarting kube-proxy on node2")
			restartDaemon(n2)
			event("kube-proxy on node2 ready again")
		}
		switch step % 4 {
		case 0: // a Service created; the oldest deleted beyond three
			pods := pick(1+rng.Intn(3), nil)
			typ := []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort}[nextChurnID%2]
			s, err := framework.CreateService(ctx, cp.Client, ns, fmt.Sprintf("churn-%d", nextChurnID), typ,
				framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
				framework.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
			if err != nil {
				fail("%v", err)
			}
			nextChurnID++
			if _, err := framework.CreateEndpointSlice(ctx, cp.Client, s, epsOf(pods)...); err != nil {
				fail("%v", err)
			}
			churn = append(churn, churnSvc{s, pods})
			event("created Service %s (%s) with %d endpoints", s.Name, typ, len(pods))
			if len(churn) > 3 {
				if err := framework.DeleteService(ctx, cp.Client, churn[0].svc); err != nil {
					fail("%v", err)
				}
				event("deleted Service %s", churn[0].svc.Name)
				churn = churn[1:]
			}
		case 1: // one steady endpoint moved (gracefully), maybe across nodes
			i := rng.Intn(len(steady))
			old, repl := steady[i], pick(1, steady)[0]
			next := append([]*framework.Pod{}, steady...)
			next[i] = repl
			oldTerm := on(home[old.Name], old)[0]
			oldTerm.Terminating = true
			for _, eps := range [][]framework.Endpoint{append(epsOf(steady), epsOf(next[i:i+1])...), append(epsOf(next), oldTerm)} {
				if err := framework.SetEndpoints(ctx, cp.Client, svc, eps...); err != nil {
					fail("%v", err)
				}
				time.Sleep(3 * time.Second)
			}
			if err := framework.SetEndpoints(ctx, cp.Client, svc, epsOf(next)...); err != nil {
				fail("%v", err)
			}
			event("steady endpoint %s (%s) replaced by %s (%s)", old.Name, home[old.Name].Name, repl.Name, home[repl.Name].Name)
			steady = next
		case 2: // a churn Service scaled (endpoints removed abruptly: nobody uses it)
			if len(churn) > 0 {
				c := &churn[rng.Intn(len(churn))]
				c.pods = pick(1+rng.Intn(4), nil)
				if err := framework.SetEndpoints(ctx, cp.Client, c.svc, epsOf(c.pods)...); err != nil {
					fail("%v", err)
				}
				event("scaled Service %s to %d endpoints", c.svc.Name, len(c.pods))
			}
		case 3: // a node address added or removed
			i := (step / 4) % 2
			n := two.Nodes[i]
			addr := fmt.Sprintf("192.168.201.%d/24", 11+i)
			op := "add"
			if addrOn[i] {
				op = "del"
			}
			if _, err := n.Sh(ctx, fmt.Sprintf("ip addr %s %s dev eth%d", op, addr, 1-i)); err != nil {
				fail("%v", err)
			}
			addrOn[i] = !addrOn[i]
			event("node address %s %s on %s", op, addr, n.Name)
		}
		for _, n := range two.Nodes {
			if !n.KubeProxyRunning(ctx) {
				fail("kube-proxy on %s died during the soak:\n%s", n.Name, n.KubeProxyLog(ctx, 40))
			}
		}
		time.Sleep(tick)
	}
	// Node addresses back as they were.
	for i, on := range addrOn {
		if on {
			_, _ = two.Nodes[i].Sh(ctx, fmt.Sprintf("ip addr del 192.168.201.%d/24 dev eth%d", 11+i, 1-i))
		}
	}
	close(stopSampler)
	<-samplerDone
	takeSample()

	// Stop the clients and count.
	for _, c := range clients {
		_ = vm.Signal(ctx, c.pid, syscall.SIGTERM)
	}
	time.Sleep(5 * time.Second)
	final, err := counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	fmt.Fprintf(&report, "# soak: %s, both nodes, %d churn Services created\n\n", duration, nextChurnID)
	fmt.Fprintf(&report, "| client | served | failed |\n| --- | --- | --- |\n")
	totalFailed := 0
	for _, c := range clients {
		v := final[c.name]
		fmt.Fprintf(&report, "| %s | %d | %d |\n", c.name, v[0], v[1])
		totalFailed += v[1]
		if v[0] == 0 {
			t.Errorf("client %s was never served", c.name)
		}
	}
	fmt.Fprintf(&report, "\n| t | served | failed | node1 goroutines | fds | RSS MiB | heap MiB | syncs | node2 goroutines | fds | RSS MiB | heap MiB | syncs |\n|%s\n", strings.Repeat(" --- |", 13))
	for _, s := range samples {
		fmt.Fprintf(&report, "| %s | %d | %d | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f | %.0f | %.1f | %.1f | %.0f |\n", s.at.Round(time.Second), s.served, s.failed,
			s.gor[0], s.fds[0], s.rss[0]/(1<<20), s.heap[0]/(1<<20), s.syncs[0], s.gor[1], s.fds[1], s.rss[1]/(1<<20), s.heap[1]/(1<<20), s.syncs[1])
	}
	fmt.Fprintf(&report, "\nEvents:\n\n```\n%s\n```\n", strings.Join(events, "\n"))

	// Growth after the warm-up: the restarts are over at 35 %; the baseline
	// is the samples between 45 % and 70 %, compared with the last one.
	var base *sample
	for i := range samples {
		if f := float64(samples[i].at) / float64(duration); f >= 0.45 && f <= 0.7 {
			if base == nil {
				b := samples[i]
				base = &b
			}
			for j := 0; j < 2; j++ {
				base.gor[j] = max(base.gor[j], samples[i].gor[j])
				base.fds[j] = max(base.fds[j], samples[i].fds[j])
				base.rss[j] = max(base.rss[j], samples[i].rss[j])
				base.heap[j] = max(base.heap[j], samples[i].heap[j])
			}
		}
	}
	last := samples[len(samples)-1]
	if base == nil {
		t.Errorf("no sample between 45 %% and 70 %% of the soak (every %s over %s): cannot judge growth", sampleEvery, duration)
	} else {
		for j, n := range two.Nodes {
			g := fmt.Sprintf("%s after warm-up (max of 45-70 %%) -> end: goroutines %.0f -> %.0f, fds %.0f -> %.0f, RSS %.1f -> %.1f MiB, heap %.1f -> %.1f MiB",
				n.Name, base.gor[j], last.gor[j], base.fds[j], last.fds[j], base.rss[j]/(1<<20), last.rss[j]/(1<<20), base.heap[j]/(1<<20), last.heap[j]/(1<<20))
			fmt.Fprintf(&report, "\n%s\n", g)
			t.Log(g)
			if last.gor[j] > base.gor[j]*1.1+10 || last.fds[j] > base.fds[j]+10 || last.rss[j] > base.rss[j]*1.5+16<<20 || last.heap[j] > base.heap[j]*2+8<<20 {
				t.Errorf("%s grew after the warm-up: %s", n.Name, g)
			}
		}
	}

	// The final comparison with the API state, once the last changes settled.
	objs, err := framework.ListAPIObjects(ctx, cp.Client)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range two.Nodes {
		var diff []string
		var got *framework.NodeState
		err := framework.Eventually(ctx, 60*time.Second, 2*time.Second, func(ctx context.Context) error {
			var err error
			if got, err = framework.ReadNodeState(ctx, n); err != nil {
				return err
			}
			diff = objs.Expected(n.Name, got.NodeAddrs).Diff(got)
			if len(diff) != 0 {
				return fmt.Errorf("%d differences", len(diff))
			}
			return nil
		})
		draining := 0
		for _, rs := range got.Draining {
			draining += len(rs)
		}
		line := fmt.Sprintf("%s final state: %d virtual servers, %d set members compared (ipsets, or the nftables sets holding them), %d kube-ipvs0 addresses, %d KUBE iptables rules in %d chains, %d draining real servers; differences from the API state: %d",
			n.Name, len(got.VS), countMembers(got), len(got.Addrs), got.KubeRules, got.KubeChains, draining, len(diff))
		fmt.Fprintf(&report, "\n%s\n", line)
		t.Log(line)
		if err != nil {
			t.Errorf("%s differs from the API state:\n%s", n.Name, strings.Join(diff, "\n"))
		}
	}
	fmt.Fprintf(&report, "\nfailed requests in total: %d\n", totalFailed)
	if totalFailed > 0 {
		// Each failure with its time in the soak (the guest's clock) and its error, to
		// set against the events above.
		fmt.Fprintf(&report, "\n```\n")
		for _, c := range clients {
			out, _ := vm.Sh(context.Background(), "grep '^ERROR' "+c.log+" | head -50")
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if line == "" {
					continue
				}
				at := ""
				if i := strings.LastIndex(line, " at="); i >= 0 {
					if ms, err := strconv.ParseInt(line[i+4:], 10, 64); err == nil {
						at = time.UnixMilli(ms).Sub(start).Round(time.Second).String()
						line = line[:i]
					}
				}
				fmt.Fprintf(&report, "%8s  %s  %s\n", at, c.name, line)
			}
		}
		fmt.Fprintf(&report, "```\n")
	}
	if totalFailed != 0 {
		t.Errorf("%d client requests failed during the soak (every endpoint change of the Service the clients use is graceful)", totalFailed)
	}
	path := os.Getenv("KPI_SOAK_REPORT")
	if path == "" {
		path = filepath.Join(repoRoot, "_output/soak/report.md")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		_ = os.WriteFile(path, []byte(report.String()), 0o644)
	}
	t.Logf("soak report (%s):\n%s", path, report.String())
}

func countMembers(st *framework.NodeState) int {
	n := 0
	for _, m := range st.IPSets {
		n += len(m)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: not a positive duration", name, v)
	}
	return d
}
