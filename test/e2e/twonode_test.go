//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Two nodes and the outside world (framework/twonode.go, vm/guest/twonode.sh):
// node1 is the VM's root namespace, node2 the namespace node2 with its own
// daemon, both on the underlay 192.168.200.0/24 with host-gw pod routes, and
// the outside network (192.168.200.100 and .200) reaches node addresses,
// externalIPs and LoadBalancer IPs by routing. These scenarios run after the
// single-node ones (this file sorts after scenarios_test.go), so the
// single-node suite never sees the second node.
//
// Pod addresses: node1 10.244.0.231-239, node2 10.244.1.11-89 (blocks of 10
// per scenario); Service addresses from outside: 203.0.113.0/24.

var (
	twoOnce sync.Once
	two     *framework.TwoNode
	twoErr  error
)

// twoNodeScenario builds the two-node testbed once and fails loudly when it
// cannot; it dumps both nodes' state and logs if the test fails.
func twoNodeScenario(t *testing.T, namespace string) (context.Context, string) {
	t.Helper()
	ctx := context.Background()
	twoOnce.Do(func() {
		// Leftovers of the single-node cleanup scenario that are not ours
		// (a foreign virtual server): the soak compares the whole table.
		_, _ = vm.Sh(ctx, "ipvsadm -D -t 10.0.2.70:9999 2>/dev/null; true")
		two, twoErr = framework.SetupTwoNode(ctx, vm, cp, node, logf)
	})
	if twoErr != nil {
		t.Fatalf("FAIL LOUDLY: the two-node testbed could not be built, so this scenario cannot run: %v", twoErr)
	}
	for _, n := range two.Nodes {
		if !n.KubeProxyRunning(ctx) {
			t.Fatalf("kube-proxy on %s is not running; log tail:\n%s", n.Name, n.KubeProxyLog(ctx, 40))
		}
	}
	return ctx, newNamespace(t, ctx, namespace)
}

// twoDumpOnFailure (deferred by every two-node scenario, so that it runs
// before the cleanups delete pods and Services) prints both nodes' kernel
// state, /healthz and daemon log tails when the test failed.
func twoDumpOnFailure(t *testing.T) {
	if !t.Failed() || two == nil {
		return
	}
	ctx := context.Background()
	t.Logf("kernel state:\n%s", two.KernelState(ctx))
	for _, n := range two.Nodes {
		code, body, _ := n.Healthz(ctx)
		t.Logf("%s /healthz: %d %s", n.Name, code, body)
		t.Logf("kube-proxy log tail (%s):\n%s", n.Name, n.KubeProxyLog(ctx, 30))
	}
}

// twoPods creates pods prefix-a, prefix-b... on node n at PodPrefix+first+i
// and deletes them at the end of the test.
func twoPods(t *testing.T, ctx context.Context, n *framework.ClusterNode, prefix string, first, count int) []*framework.Pod {
	t.Helper()
	var pods []*framework.Pod
	for i := 0; i < count; i++ {
		p, err := n.AddPod(ctx, fmt.Sprintf("%s-%c", prefix, 'a'+i), first+i)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	t.Cleanup(func() {
		for _, p := range pods {
			_ = n.DeletePod(context.Background(), p)
		}
	})
	return pods
}

// on returns the endpoints of pods, placed on node n.
func on(n *framework.ClusterNode, pods ...*framework.Pod) []framework.Endpoint {
	var eps []framework.Endpoint
	for _, p := range pods {
		eps = append(eps, framework.Endpoint{PodName: p.Name, IP: p.IP, Node: n.Name})
	}
	return eps
}

// setIngress writes status.loadBalancer.ingress (what a cloud controller does).
func setIngress(t *testing.T, ctx context.Context, svc *corev1.Service, ips ...string) {
	t.Helper()
	svc.Status.LoadBalancer.Ingress = nil
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if _, err := cp.Client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitOn waits until node n's virtual server vip has exactly the active
// (weight > 0) real servers ips (port 8080).
func waitOn(t *testing.T, ctx context.Context, n *framework.ClusterNode, proto, vip string, ips ...string) {
	t.Helper()
	var want []string
	for _, ip := range ips {
		want = append(want, ip+":8080")
	}
	sort.Strings(want)
	// 120 s: three TCG VMs sharing two cores have been seen here.
	err := framework.Eventually(ctx, 120*time.Second, time.Second, func(ctx context.Context) error {
		got, err := n.ActiveRealServers(ctx, proto, vip)
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("%s: IPVS %s %s has active real servers %q, want %q", n.Name, proto, vip, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// answers checks client output: every line answered, by the pods in want
// (name -> count; nil = any pod), each having seen source address from
// ("" = not checked). It returns the per-pod counts.
func answers(t *testing.T, what, out string, count int, want map[string]int, from string) map[string]int {
	t.Helper()
	got, errs := framework.CountAnswers(out)
	t.Logf("%s: %v", what, got)
	total := 0
	for _, c := range got {
		total += c
	}
	if errs != 0 || total != count || (want != nil && fmt.Sprint(got) != fmt.Sprint(want)) {
		t.Fatalf("%s: answers %v with %d errors, want %d answers %v; output:\n%s", what, got, errs, count, want, out)
	}
	if from != "" {
		for _, line := range strings.Split(out, "\n") {
			if !strings.Contains(line, " from="+from+":") {
				t.Fatalf("%s: the pod saw %q, want source address %s", what, line, from)
			}
		}
	}
	return got
}

func outside(t *testing.T, ctx context.Context, source, proto, addr string, count int) string {
	t.Helper()
	out, err := two.OutsideClient(ctx, source, proto, addr, count)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func route(t *testing.T, ctx context.Context, dst string, n *framework.ClusterNode) {
	t.Helper()
	if err := two.RouteFromOutside(ctx, dst, n); err != nil {
		t.Fatal(err)
	}
}

// TestTwoNodeTestbed: the testbed itself. Both daemons are healthy and
// program a Service; pods reach each other across nodes directly (host-gw);
// the outside reaches both node addresses but no pod; and the kernel state
// each daemon writes is per namespace (IPVS sysctls set in each namespace,
// nf_conntrack_max read-only outside the initial one).
func TestTwoNodeTestbed(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-testbed")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	p1 := twoPods(t, ctx, n1, "tb1", 231, 1)[0]
	p2 := twoPods(t, ctx, n2, "tb2", 11, 1)[0]
	// Healthy once both families synced (the IPv6 proxier's first sync waits
	// for the IPv4 one: tens of seconds on a loaded TCG VM).
	for _, n := range two.Nodes {
		err := framework.Eventually(ctx, 120*time.Second, 2*time.Second, func(ctx context.Context) error {
			code, body, err := n.Healthz(ctx)
			if err != nil || code != 200 || !strings.Contains(body, `"nodeEligible":true`) {
				return fmt.Errorf("%s /healthz on :%d: %d %s %v", n.Name, n.HealthzPort, code, body, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Pod to pod across the nodes, both ways, with the source kept.
	answers(t, "tb1 -> tb2 direct", mustClient(t, ctx, n1, p1.Name, "tcp", p2.IP+":8080", 1), 1, map[string]int{"tb2-a": 1}, p1.IP)
	answers(t, "tb2 -> tb1 direct", mustClient(t, ctx, n2, p2.Name, "tcp", p1.IP+":8080", 1), 1, map[string]int{"tb1-a": 1}, p2.IP)
	// Outside: no route to pods.
	if out := outside(t, ctx, "", "tcp", p2.IP+":8080", 1); !strings.HasPrefix(out, "ERROR") {
		t.Fatalf("the outside network reaches pod %s directly: %q", p2.IP, out)
	}

	svc := createServiceWith(t, ctx, ns, "web", corev1.ServiceTypeNodePort, nil, on(n2, p2),
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	for _, n := range two.Nodes {
		waitOn(t, ctx, n, "TCP", svc.Spec.ClusterIP+":80", p2.IP)
		waitOn(t, ctx, n, "TCP", fmt.Sprintf("%s:%d", n.IP, svc.Spec.Ports[0].NodePort), p2.IP)
	}
	// What each daemon wrote stays in its namespace.
	for _, n := range two.Nodes {
		out, err := n.Sh(ctx, `cat /proc/sys/net/ipv4/vs/conntrack /proc/sys/net/ipv4/vs/expire_nodest_conn; ip -o link show kube-ipvs0 | wc -l
test -w /proc/sys/net/netfilter/nf_conntrack_max && echo ct-max-writable || echo ct-max-read-only`)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: vs/conntrack, vs/expire_nodest_conn, kube-ipvs0, nf_conntrack_max: %s", n.Name, strings.Join(strings.Fields(out), " "))
		f := strings.Fields(out)
		if len(f) != 4 || f[0] != "1" || f[1] != "1" || f[2] != "1" {
			t.Errorf("%s: the daemon's IPVS sysctls or kube-ipvs0 are missing in its namespace: %q", n.Name, out)
		}
		if want := map[bool]string{true: "ct-max-writable", false: "ct-max-read-only"}[n.NS == ""]; len(f) == 4 && f[3] != want {
			t.Errorf("%s: nf_conntrack_max is %s, expected %s", n.Name, f[3], want)
		}
	}
	// node1 and node2 hold different virtual server tables (node ports on
	// their own addresses only).
	np := svc.Spec.Ports[0].NodePort
	if rs, _ := n1.VirtualServer(ctx, "TCP", fmt.Sprintf("%s:%d", n2.IP, np)); len(rs) != 0 {
		t.Errorf("node1 holds node2's node port virtual server: %v", rs)
	}
}

func mustClient(t *testing.T, ctx context.Context, n *framework.ClusterNode, pod, proto, addr string, count int, extra ...string) string {
	t.Helper()
	out, err := n.Client(ctx, pod, proto, addr, count, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTwoNodeExternalToRemoteEndpoints: NodePort, externalIP and
// LoadBalancer IP from outside to a Service whose endpoints are all on one
// node, entered through either node: answered every time, the pod seeing the
// entry node's address (the masquerade that brings replies back through it).
func TestTwoNodeExternalToRemoteEndpoints(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-external")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	pods2 := twoPods(t, ctx, n2, "ext2", 21, 2)
	pods1 := twoPods(t, ctx, n1, "ext1", 232, 1)
	cases := []struct {
		home     *framework.ClusterNode
		pods     []*framework.Pod
		ext, lb  string
		wantEach map[string]int
	}{
		{n2, pods2, "203.0.113.10", "203.0.113.11", map[string]int{"ext2-a": 2, "ext2-b": 2}},
		{n1, pods1, "203.0.113.12", "203.0.113.13", map[string]int{"ext1-a": 4}},
	}
	for i, c := range cases {
		svc := createServiceWith(t, ctx, ns, fmt.Sprintf("on-%s", c.home.Name), corev1.ServiceTypeLoadBalancer,
			func(s *corev1.Service) { s.Spec.ExternalIPs = []string{c.ext} },
			on(c.home, c.pods...), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
		setIngress(t, ctx, svc, c.lb)
		np := svc.Spec.Ports[0].NodePort
		var ips []string
		for _, p := range c.pods {
			ips = append(ips, p.IP)
		}
		for _, n := range two.Nodes {
			waitOn(t, ctx, n, "TCP", fmt.Sprintf("%s:%d", n.IP, np), ips...)
			waitOn(t, ctx, n, "TCP", c.ext+":80", ips...)
			waitOn(t, ctx, n, "TCP", c.lb+":80", ips...)
		}
		for _, n := range two.Nodes {
			// The masquerade uses the address of the interface towards the
			// pod: the underlay address for a remote pod, cbr0's for a local one.
			where, from := "remote", n.IP
			if n == c.home {
				where, from = "local", n.Gateway
			}
			addr := fmt.Sprintf("%s:%d", n.IP, np)
			answers(t, fmt.Sprintf("case %d: outside -> %s node port %s (%s endpoints)", i, n.Name, addr, where),
				outside(t, ctx, "", "tcp", addr, 4), 4, c.wantEach, from)
			route(t, ctx, c.ext, n)
			answers(t, fmt.Sprintf("case %d: outside -> externalIP %s via %s (%s endpoints)", i, c.ext, n.Name, where),
				outside(t, ctx, "", "tcp", c.ext+":80", 4), 4, c.wantEach, from)
			route(t, ctx, c.lb, n)
			answers(t, fmt.Sprintf("case %d: outside -> LB IP %s via %s (%s endpoints)", i, c.lb, n.Name, where),
				outside(t, ctx, "", "tcp", c.lb+":80", 4), 4, c.wantEach, from)
		}
	}
}

// lbRun is an `e2e-agent lb` running in the outside network.
type lbRun struct {
	pid int
	log string
}

func (l *lbRun) read(t *testing.T, ctx context.Context) string {
	t.Helper()
	out, err := vm.Sh(ctx, "cat "+l.log)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitLog waits until the log's last HEALTH line for addr says code.
func (l *lbRun) waitHealth(t *testing.T, ctx context.Context, addr string, code int) {
	t.Helper()
	err := framework.Eventually(ctx, 120*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		last := ""
		for _, line := range strings.Split(l.read(t, ctx), "\n") {
			if strings.HasPrefix(line, "HEALTH "+addr+" ") {
				last = strings.Join(strings.Fields(line)[:3], " ")
			}
		}
		if last != fmt.Sprintf("HEALTH %s %d", addr, code) {
			return fmt.Errorf("the load balancer's last health result for %s is %q, want %d", addr, last, code)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTwoNodeExternalTrafficPolicyLocal: eTP=Local from outside. The pod
// sees the outside client's own address; the healthCheckNodePort answers 200
// on the node with the endpoint and 503 on the other. On the node without a
// local endpoint the node port keeps every endpoint (upstream
// kubernetes#97081: pods and the node itself are still served) and outside
// clients' packets are forwarded unmasqueraded, so their replies never come
// back (both facts shown). A client acting as the load balancer (health
// checks, traffic only to healthy nodes) has zero failed connections while
// the only endpoint moves from node1 to node2.
func TestTwoNodeExternalTrafficPolicyLocal(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-etp")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	e1 := twoPods(t, ctx, n1, "etp1", 233, 1)[0]
	e2pods := twoPods(t, ctx, n2, "etp2", 31, 2) // etp2-a: the endpoint's new home, etp2-b: a client pod
	e2, client2 := e2pods[0], e2pods[1]
	const lbIP = "203.0.113.30"
	svc := createServiceWith(t, ctx, ns, "local", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
		on(n1, e1), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	setIngress(t, ctx, svc, lbIP)
	np, hc := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
	npOn := func(n *framework.ClusterNode) string { return fmt.Sprintf("%s:%d", n.IP, np) }
	hcOn := func(n *framework.ClusterNode) string { return fmt.Sprintf("http://%s:%d/", n.IP, hc) }
	waitOn(t, ctx, n1, "TCP", npOn(n1), e1.IP)
	waitOn(t, ctx, n1, "TCP", lbIP+":80", e1.IP)

	// Health from outside: 200 with the endpoint, 503 without.
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		c1, b1, err := two.OutsideGet(ctx, hcOn(n1))
		if err != nil {
			return err
		}
		c2, b2, err := two.OutsideGet(ctx, hcOn(n2))
		if err != nil {
			return err
		}
		if c1 != 200 || !strings.Contains(b1, `"localEndpoints": 1`) || c2 != 503 || !strings.Contains(b2, `"localEndpoints": 0`) {
			return fmt.Errorf("health check node port %d: node1 %d %s, node2 %d %s; want 200 (1 local) and 503 (0 local)", hc, c1, b1, c2, b2)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Client address preserved, through the node port and the LB IP.
	answers(t, "outside -> node1 node port (eTP=Local)", outside(t, ctx, "", "tcp", npOn(n1), 3), 3, map[string]int{"etp1-a": 3}, framework.OutsideIP)
	route(t, ctx, lbIP, n1)
	answers(t, "outside -> LB IP via node1 (eTP=Local)", outside(t, ctx, "", "tcp", lbIP+":80", 3), 3, map[string]int{"etp1-a": 3}, framework.OutsideIP)

	// node2 has no local endpoint: as upstream, its external virtual servers
	// fall back to all endpoints...
	waitOn(t, ctx, n2, "TCP", npOn(n2), e1.IP)
	waitOn(t, ctx, n2, "TCP", lbIP+":80", e1.IP)
	// ...so node2 itself and its pods are served...
	answers(t, "node2 -> its own node port", mustClient(t, ctx, n2, "", "tcp", npOn(n2), 2), 2, map[string]int{"etp1-a": 2}, "")
	answers(t, "pod on node2 -> LB IP", mustClient(t, ctx, n2, client2.Name, "tcp", lbIP+":80", 2), 2, map[string]int{"etp1-a": 2}, client2.IP)
	// ...but an outside client's packets are forwarded unmasqueraded: the
	// pod on node1 answers the outside address directly, node2 never sees
	// the reply, and the connection fails.
	_, _ = n2.Sh(ctx, "conntrack -F 2>/dev/null; true")
	out := outside(t, ctx, "", "tcp", npOn(n2), 1)
	if !strings.HasPrefix(out, "ERROR") {
		t.Fatalf("outside -> node2 node port (no local endpoint) answered %q: expected upstream's unmasqueraded forwarding, whose replies do not come back", out)
	}
	ct, err := n2.Sh(ctx, fmt.Sprintf("conntrack -L -p tcp --orig-dst %s --orig-port-dst %d 2>/dev/null", n2.IP, np))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node2 conntrack for the outside connection: %s", strings.TrimSpace(ct))
	if !strings.Contains(ct, fmt.Sprintf("src=%s dst=%s sport=8080", e1.IP, framework.OutsideIP)) {
		t.Fatalf("node2 did not forward the outside packet unmasqueraded to %s (want a reply tuple src=%s dst=%s):\n%s", e1.IP, e1.IP, framework.OutsideIP, ct)
	}

	// The load balancer: health checks both nodes, sends only to healthy ones.
	lb := &lbRun{log: fmt.Sprintf("/tmp/lb-%d.log", time.Now().UnixNano())}
	backends := fmt.Sprintf("%s=%s,%s=%s", npOn(n1), hcOn(n1), npOn(n2), hcOn(n2))
	// Timeouts with room for the whole VM stalling a few seconds, which
	// happens when several TCG VMs share two cores (seen as both nodes'
	// health checks failing at the same instant).
	lb.pid, err = vm.Start(ctx, lb.log, "ip", "netns", "exec", framework.OutsideNS, "/kpi/bin/e2e-agent", "lb",
		"--backends", backends, "--interval", "50ms", "--check-interval", "300ms", "--timeout", "6s", "--check-timeout", "3s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vm.Signal(context.Background(), lb.pid, syscall.SIGKILL) })
	lb.waitHealth(t, ctx, npOn(n1), 200)
	lb.waitHealth(t, ctx, npOn(n2), 503)
	time.Sleep(2 * time.Second)

	// The move: the new pod on node2 is ready, the old one terminating
	// (still serving), then gone from the slice, then dead.
	step := func(what string) { t.Logf("step at=%d: %s", guestMillis(t, ctx), what) }
	e2ep := on(n2, e2)[0]
	step("etp2-a on node2 added (ready)")
	if err := framework.SetEndpoints(ctx, cp.Client, svc, append(on(n1, e1), e2ep)...); err != nil {
		t.Fatal(err)
	}
	lb.waitHealth(t, ctx, npOn(n2), 200)
	time.Sleep(2 * time.Second)
	e1term := on(n1, e1)[0]
	e1term.Terminating = true
	step("etp1-a terminating")
	if err := framework.SetEndpoints(ctx, cp.Client, svc, e1term, e2ep); err != nil {
		t.Fatal(err)
	}
	lb.waitHealth(t, ctx, npOn(n1), 503)
	time.Sleep(3 * time.Second) // connections still in flight to node1 finish
	step("etp1-a removed from the slice")
	if err := framework.SetEndpoints(ctx, cp.Client, svc, e2ep); err != nil {
		t.Fatal(err)
	}
	waitOn(t, ctx, n2, "TCP", npOn(n2), e2.IP)
	time.Sleep(2 * time.Second)
	step("etp1-a dead")
	if _, err := vm.Sh(ctx, "ip -n "+e1.Name+" link set eth0 down"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := vm.Signal(ctx, lb.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var log string
	err = framework.Eventually(ctx, 20*time.Second, 300*time.Millisecond, func(ctx context.Context) error {
		if log = lb.read(t, ctx); !strings.Contains(log, "SUMMARY ") {
			return fmt.Errorf("the load balancer has not finished")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var errLines []string
	lines := strings.Split(log, "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "ERROR") || strings.HasPrefix(line, "HEALTH") {
			// With its neighbours and the test's steps: the timeline of a failure.
			t.Logf("lb log #%d: %s", i, line)
		}
	}
	served := map[string]int{}
	after, late := false, 0 // after node1 reported 503 with node2 serving
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "ERROR":
			errLines = append(errLines, line)
		case f[0] == "OK" && len(f) >= 3:
			served[f[1]+" "+f[2]]++
			if after && f[1] == npOn(n1) {
				late++ // picked before the 503 arrived, answered after
			}
		case f[0] == "HEALTH" && len(f) >= 3 && f[1] == npOn(n1) && f[2] == "503" && served[npOn(n2)+" etp2-a"] > 0:
			after = true
		case f[0] == "SUMMARY":
			t.Logf("load balancer: %s", line)
		}
	}
	t.Logf("load balancer answers (backend pod): %v; %d to node1 logged after its 503", served, late)
	if late > 2 {
		t.Errorf("the load balancer kept sending to node1 after it reported 503 (%d connections)", late)
	}
	if len(errLines) != 0 {
		t.Fatalf("%d connections failed while the endpoint moved from node1 to node2:\n%s", len(errLines), strings.Join(errLines, "\n"))
	}
	if served[npOn(n1)+" etp1-a"] == 0 || served[npOn(n2)+" etp2-a"] == 0 {
		t.Fatalf("the load balancer must have been served by node1 (etp1-a) and then node2 (etp2-a): %v", served)
	}
	for k := range served {
		if k != npOn(n1)+" etp1-a" && k != npOn(n2)+" etp2-a" {
			t.Errorf("unexpected backend/pod pair %q: each node must serve only its local endpoint", k)
		}
	}
}

// TestTwoNodePodToRemotePod: a pod reaching a ClusterIP whose only endpoint
// is on the other node keeps its own address (both directions), and each
// node itself reaches the remote pod through the ClusterIP.
func TestTwoNodePodToRemotePod(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-podtopod")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	p1 := twoPods(t, ctx, n1, "pp1", 234, 2) // a: client, b: endpoint
	p2 := twoPods(t, ctx, n2, "pp2", 41, 2)  // a: endpoint, b: client
	to2 := createServiceWith(t, ctx, ns, "on-node2", corev1.ServiceTypeClusterIP, nil, on(n2, p2[0]),
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	to1 := createServiceWith(t, ctx, ns, "on-node1", corev1.ServiceTypeClusterIP, nil, on(n1, p1[1]),
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip2, vip1 := to2.Spec.ClusterIP+":80", to1.Spec.ClusterIP+":80"
	for _, n := range two.Nodes {
		waitOn(t, ctx, n, "TCP", vip2, p2[0].IP)
		waitOn(t, ctx, n, "TCP", vip1, p1[1].IP)
	}
	answers(t, "pod on node1 -> ClusterIP -> pod on node2", podClient(t, ctx, n1, p1[0], vip2, 3), 3, map[string]int{"pp2-a": 3}, p1[0].IP)
	answers(t, "pod on node2 -> ClusterIP -> pod on node1", podClient(t, ctx, n2, p2[1], vip1, 3), 3, map[string]int{"pp1-b": 3}, p2[1].IP)
	// The nodes themselves: masqueraded to their underlay address, the
	// interface towards the remote pod.
	answers(t, "node1 -> ClusterIP -> pod on node2", mustClient(t, ctx, n1, "", "tcp", vip2, 3), 3, map[string]int{"pp2-a": 3}, n1.IP)
	answers(t, "node2 -> ClusterIP -> pod on node1", mustClient(t, ctx, n2, "", "tcp", vip1, 3), 3, map[string]int{"pp1-b": 3}, n2.IP)
}

// podClient is mustClient from a pod that, when a connection fails, first
// records what the pod, its node and the kernel's counters say, and whether
// the same connection works a few seconds later (a failure that heals by
// itself and one that stays point to different causes).
func podClient(t *testing.T, ctx context.Context, n *framework.ClusterNode, pod *framework.Pod, addr string, count int) string {
	t.Helper()
	out := mustClient(t, ctx, n, pod.Name, "tcp", addr, count)
	if _, errs := framework.CountAnswers(out); errs == 0 {
		return out
	}
	vip, pre := strings.Split(addr, ":")[0], ""
	if n.NS != "" {
		pre = "ip netns exec " + n.NS + " "
	}
	diag, _ := vm.Sh(ctx, fmt.Sprintf(`pod=%[1]s; v=v${pod:0:13}
echo "# in the pod"; ip -n $pod neigh; ip -n $pod route; ip -n $pod -s link show eth0
echo "# pod -> gateway"; ip netns exec $pod ping -c1 -W1 %[4]s
echo "# node: cbr0, its neighbours and local MACs, the pod's port"; %[3]s ip -br link show cbr0; %[3]s ip neigh show dev cbr0; %[3]s bridge fdb show br cbr0 | grep -w permanent; %[3]s ip -s link show $v; %[3]s bridge link show dev $v
echo "# node: route for the pod's packet"; %[3]s ip route get %[2]s from %[5]s iif cbr0
echo "# node: conntrack from the pod"; %[3]s conntrack -L -s %[5]s 2>&1
echo "# node: IPVS connections"; %[3]s ipvsadm -Lnc; %[3]s ipvsadm -Ln --stats -t %[6]s
echo "# node: drop counters"; %[3]s nstat -az 2>/dev/null | grep -Ei 'drop|martian|inhdrerr|inaddrerr|noroute|discard' | grep -v ' 0 '
echo "# node: sysctls"; %[3]s sysctl net.ipv4.conf.all.rp_filter net.ipv4.conf.cbr0.rp_filter net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables 2>&1
true`, pod.Name, vip, pre, n.Gateway, pod.IP, addr))
	t.Logf("%s -> %s failed:\n%s\ndiagnosis:\n%s", pod.Name, addr, out, diag)
	time.Sleep(3 * time.Second)
	t.Logf("%s -> %s again, 3 s later: %s", pod.Name, addr, strings.ReplaceAll(mustClient(t, ctx, n, pod.Name, "tcp", addr, 2), "\n", " | "))
	return out
}

// TestTwoNodeLoadBalancerSourceRanges: loadBalancerSourceRanges from
// outside, entering through either node: the client inside the range is
// answered, the one outside it gets nothing; the node port of the same
// Service stays open to both (the ranges filter the LB IP only, as upstream).
func TestTwoNodeLoadBalancerSourceRanges(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-lbsr")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	a := twoPods(t, ctx, n1, "sr1", 236, 1)[0]
	b := twoPods(t, ctx, n2, "sr2", 51, 1)[0]
	const lbIP = "203.0.113.40"
	svc := createServiceWith(t, ctx, ns, "fw", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{framework.OutsideIP + "/32"} },
		append(on(n1, a), on(n2, b)...), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	setIngress(t, ctx, svc, lbIP)
	np := svc.Spec.Ports[0].NodePort
	for _, n := range two.Nodes {
		waitOn(t, ctx, n, "TCP", lbIP+":80", a.IP, b.IP)
		if _, err := n.Sh(ctx, fmt.Sprintf(framework.ListSet("KUBE-LOAD-BALANCER-SOURCE-CIDR")+" | grep -Eqx '%s,tcp:80,%s(/32)?'", lbIP, framework.OutsideIP)); err != nil {
			t.Fatalf("%s: no KUBE-LOAD-BALANCER-SOURCE-CIDR entry for %s: %v", n.Name, framework.OutsideIP, err)
		}
	}
	for _, n := range two.Nodes {
		route(t, ctx, lbIP, n)
		answers(t, fmt.Sprintf("allowed %s -> LB IP via %s", framework.OutsideIP, n.Name),
			outside(t, ctx, framework.OutsideIP, "tcp", lbIP+":80", 4), 4, map[string]int{"sr1-a": 2, "sr2-a": 2}, "")
		out := outside(t, ctx, framework.OutsideOtherIP, "tcp", lbIP+":80", 2)
		if got, errs := framework.CountAnswers(out); errs != 2 || len(got) != 0 {
			t.Fatalf("%s is outside loadBalancerSourceRanges but reached %s via %s: %v (%d errors)\n%s", framework.OutsideOtherIP, lbIP, n.Name, got, errs, out)
		}
		t.Logf("denied %s -> LB IP via %s: %s", framework.OutsideOtherIP, n.Name, strings.ReplaceAll(out, "\n", " | "))
		answers(t, fmt.Sprintf("denied source -> node port of %s (not filtered)", n.Name),
			outside(t, ctx, framework.OutsideOtherIP, "tcp", fmt.Sprintf("%s:%d", n.IP, np), 2), 2, nil, "")
	}
}

// udpLoad is a UDP client sending from one fixed source port (a resolver),
// every line stamped with the guest clock.
type udpLoad struct {
	pid int
	log string
}

func startUDPLoad(t *testing.T, ctx context.Context, netns, source, addr string) *udpLoad {
	t.Helper()
	l := &udpLoad{log: fmt.Sprintf("/tmp/udp-%d.log", time.Now().UnixNano())}
	pid, err := vm.Start(ctx, l.log, "ip", "netns", "exec", netns, "/kpi/bin/e2e-agent", "client", "--proto", "udp",
		"--addr", addr, "--source", source, "--count", "0", "--interval", "200ms", "--timeout", "1s", "--stamp")
	if err != nil {
		t.Fatal(err)
	}
	l.pid = pid
	t.Cleanup(func() { _ = vm.Signal(context.Background(), pid, syscall.SIGKILL) })
	return l
}

// udpLine is one attempt: who answered ("ERROR" for none) and when (guest ms).
type udpLine struct {
	who string
	at  int64
}

func (l *udpLoad) lines(t *testing.T, ctx context.Context) []udpLine {
	t.Helper()
	out, err := vm.Sh(ctx, "cat "+l.log)
	if err != nil {
		t.Fatal(err)
	}
	var ls []udpLine
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] == "SUMMARY" {
			continue
		}
		var at int64
		if _, err := fmt.Sscanf(f[len(f)-1], "at=%d", &at); err != nil {
			continue
		}
		ls = append(ls, udpLine{f[0], at})
	}
	return ls
}

// guestMillis is the guest's clock in unix milliseconds.
func guestMillis(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	var ms int64
	// busybox date has no %N: bash's EPOCHREALTIME has microseconds.
	if _, err := fmt.Sscanf(guest(t, ctx, `echo $(( ${EPOCHREALTIME/./} / 1000 ))`), "%d", &ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestTwoNodeUDPEndpointReplacement: a client sending to a ClusterIP (from a
// pod on node1) and one sending to node1's NodePort (from outside), each from
// one fixed source port, while the Service's only endpoint, on node2, is
// replaced by another pod on node2 (the old pod still alive: a stale
// conntrack entry would keep answering from it). Both reach the new pod
// with the sync that programs it (its next datagram or two) and never the
// old one afterwards; all times on the guest clock.
func TestTwoNodeUDPEndpointReplacement(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-udp")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	c := twoPods(t, ctx, n1, "udp1", 237, 1)[0]
	pods := twoPods(t, ctx, n2, "udp2", 61, 2)
	oldPod, newPod := pods[0], pods[1]
	svc := createServiceWith(t, ctx, ns, "dns", corev1.ServiceTypeNodePort, nil, on(n2, oldPod),
		framework.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
	vip := svc.Spec.ClusterIP + ":53"
	np := fmt.Sprintf("%s:%d", n1.IP, svc.Spec.Ports[0].NodePort)
	waitOn(t, ctx, n1, "UDP", vip, oldPod.IP)
	waitOn(t, ctx, n1, "UDP", np, oldPod.IP)

	type flow struct {
		what, vs string
		load     *udpLoad
	}
	flows := []flow{
		{"pod -> ClusterIP", vip, startUDPLoad(t, ctx, c.Name, c.IP+":5353", vip)},
		{"outside -> node1 NodePort", np, startUDPLoad(t, ctx, framework.OutsideNS, framework.OutsideIP+":5354", np)},
	}
	// Both clients are answered by the old pod before the change.
	err := framework.Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		for _, f := range flows {
			ls := f.load.lines(t, ctx)
			if len(ls) == 0 || ls[len(ls)-1].who != oldPod.Name {
				return fmt.Errorf("%s: not answered by %s yet: %v", f.what, oldPod.Name, ls)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	write := guestMillis(t, ctx)
	if err := framework.SetEndpoints(ctx, cp.Client, svc, on(n2, newPod)...); err != nil {
		t.Fatal(err)
	}
	// When node1's sync has programmed the new endpoint (guest clock, within
	// one poll of the sync's end).
	synced := map[string]int64{}
	err = framework.Eventually(ctx, 90*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		for _, f := range flows {
			if _, ok := synced[f.vs]; ok {
				continue
			}
			out, err := n1.Sh(ctx, "ipvsadm -Ln -u "+f.vs+"; echo at=$(( ${EPOCHREALTIME/./} / 1000 ))")
			if err != nil {
				return err
			}
			var at int64
			fmt.Sscanf(out[strings.LastIndex(out, "at="):], "at=%d", &at)
			rs := framework.ParseIPVSTable(out)["UDP "+f.vs]
			if len(rs) == 1 && strings.HasPrefix(rs[0], newPod.IP+":8080 ") {
				synced[f.vs] = at
			}
		}
		if len(synced) != len(flows) {
			return fmt.Errorf("node1 has not programmed the new endpoint on every virtual server yet: %v", synced)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	for _, f := range flows {
		var firstNew, lastOld int64
		errs := 0
		for _, l := range f.load.lines(t, ctx) {
			switch {
			case l.at < write:
			case l.who == newPod.Name && firstNew == 0:
				firstNew = l.at
			case l.who == oldPod.Name:
				lastOld = l.at
			case l.who == "ERROR":
				errs++
			}
		}
		t.Logf("%s: API write -> node1 programmed the new endpoint %d ms; first answer from it %d ms after that; last answer from the old pod %d ms after it; %d datagrams unanswered",
			f.what, synced[f.vs]-write, firstNew-synced[f.vs], lastOld-synced[f.vs], errs)
		if firstNew == 0 {
			t.Errorf("%s: the new endpoint never answered", f.what)
			continue
		}
		// One datagram every 200 ms (1 s timeout), the poll every ~100 ms
		// plus a guest round trip, and the conntrack cleanup at the end of
		// the same sync on a loaded TCG VM: within 5 s means the sync that
		// programmed the endpoint also cleared the flow. A stale conntrack
		// entry would keep the old pod answering for as long as the client
		// sends.
		if firstNew-synced[f.vs] > 5000 {
			t.Errorf("%s: the new endpoint answered only %d ms after node1 programmed it", f.what, firstNew-synced[f.vs])
		}
		if lastOld > synced[f.vs]+5000 {
			t.Errorf("%s: the old pod still answered %d ms after node1 programmed the new endpoint (stale conntrack entry)", f.what, lastOld-synced[f.vs])
		}
		if lastOld > firstNew {
			t.Errorf("%s: the old pod answered after the new one", f.what)
		}
	}
}

// TestTwoNodeSessionAffinityFromOutside: ClientIP affinity on a Service with
// endpoints on both nodes: every connection of the outside client, through
// the node port of either node and through the LB IP, lands on one pod.
func TestTwoNodeSessionAffinityFromOutside(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-affinity")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	a := twoPods(t, ctx, n1, "aff1", 238, 1)[0]
	bs := twoPods(t, ctx, n2, "aff2", 71, 2)
	const lbIP = "203.0.113.70"
	svc := createServiceWith(t, ctx, ns, "sticky", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP },
		append(on(n1, a), on(n2, bs...)...), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	setIngress(t, ctx, svc, lbIP)
	np := svc.Spec.Ports[0].NodePort
	for _, n := range two.Nodes {
		waitOn(t, ctx, n, "TCP", lbIP+":80", a.IP, bs[0].IP, bs[1].IP)
		flags, err := n.Sh(ctx, fmt.Sprintf("ipvsadm -Ln -t %s:%d | awk '$1==\"TCP\"'", n.IP, np))
		if err != nil || !strings.Contains(flags, "persistent 10800") {
			t.Fatalf("%s: node port virtual server not persistent for 10800 s: %q %v", n.Name, flags, err)
		}
	}
	for _, n := range two.Nodes {
		out := outside(t, ctx, "", "tcp", fmt.Sprintf("%s:%d", n.IP, np), 6)
		if got := answers(t, "outside -> node port of "+n.Name, out, 6, nil, ""); len(got) != 1 {
			t.Fatalf("ClientIP affinity through %s: answers from %v, want one pod", n.Name, got)
		}
		route(t, ctx, lbIP, n)
		out = outside(t, ctx, "", "tcp", lbIP+":80", 6)
		if got := answers(t, "outside -> LB IP via "+n.Name, out, 6, nil, ""); len(got) != 1 {
			t.Fatalf("ClientIP affinity on the LB IP via %s: answers from %v, want one pod", n.Name, got)
		}
	}
}

// hold is an `e2e-agent hold` connection running in the VM.
type hold struct {
	pid  int
	log  string
	what string
}

func startHold(t *testing.T, ctx context.Context, netns, addr, what string) *hold {
	t.Helper()
	h := &hold{log: fmt.Sprintf("/tmp/hold-%d.log", time.Now().UnixNano()), what: what}
	pid, err := vm.Start(ctx, h.log, "ip", "netns", "exec", netns, "/kpi/bin/e2e-agent", "hold", "--addr", addr, "--interval", "300ms")
	if err != nil {
		t.Fatal(err)
	}
	h.pid = pid
	t.Cleanup(func() { _ = vm.Signal(context.Background(), pid, syscall.SIGKILL) })
	return h
}

func (h *hold) read(t *testing.T, ctx context.Context) string {
	t.Helper()
	out, err := vm.Sh(ctx, "cat "+h.log)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTwoNodeTerminatingDrain: long-lived connections from a pod on node1
// (through the ClusterIP) and from outside (through node1's NodePort) to the
// only endpoint, on node2, keep exchanging data without a reset while that
// endpoint is terminating (its real server on node1 stays with weight 0),
// across more than one syncPeriod; new connections meanwhile go only to the
// replacement pod. Once the clients are done and the old endpoint leaves the
// slice (its pod is gone), its real server goes.
func TestTwoNodeTerminatingDrain(t *testing.T) {
	ctx, ns := twoNodeScenario(t, "e2e-2n-drain")
	defer twoDumpOnFailure(t)
	n1, n2 := two.Nodes[0], two.Nodes[1]
	c := twoPods(t, ctx, n1, "drn1", 239, 1)[0]
	pods := twoPods(t, ctx, n2, "drn2", 81, 2)
	oldPod, newPod := pods[0], pods[1]
	svc := createServiceWith(t, ctx, ns, "web", corev1.ServiceTypeNodePort, nil, on(n2, oldPod),
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	np := fmt.Sprintf("%s:%d", n1.IP, svc.Spec.Ports[0].NodePort)
	waitOn(t, ctx, n1, "TCP", vip, oldPod.IP)
	waitOn(t, ctx, n1, "TCP", np, oldPod.IP)

	holds := []*hold{startHold(t, ctx, c.Name, vip, "pod -> ClusterIP"), startHold(t, ctx, framework.OutsideNS, np, "outside -> node1 NodePort")}
	for _, h := range holds {
		err := framework.Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
			out := h.read(t, ctx)
			if !strings.Contains(out, "CONNECTED "+oldPod.Name+" ") || !strings.Contains(out, "OK 2 ") {
				return fmt.Errorf("%s: not exchanging with %s yet: %q", h.what, oldPod.Name, out)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	state := func(what string) {
		out, _ := n1.Sh(ctx, fmt.Sprintf("echo at=$(( ${EPOCHREALTIME/./} / 1000 )); ipvsadm -Ln -t %s; ipvsadm -Ln -t %s", vip, np))
		t.Logf("%s: node1:\n%s", what, out)
		for _, h := range holds {
			lines := strings.Split(strings.TrimSpace(h.read(t, ctx)), "\n")
			t.Logf("%s: hold %s: %d lines, last %q", what, h.what, len(lines), lines[len(lines)-1])
		}
	}
	state("before")
	newEp := on(n2, newPod)[0]
	oldTerm := on(n2, oldPod)[0]
	oldTerm.Terminating = true
	if err := framework.SetEndpoints(ctx, cp.Client, svc, newEp, oldTerm); err != nil {
		t.Fatal(err)
	}
	waitOn(t, ctx, n1, "TCP", vip, newPod.IP)
	waitOn(t, ctx, n1, "TCP", np, newPod.IP)
	state("old endpoint terminating, new one ready")
	for _, vs := range []string{vip, np} {
		rs, err := n1.VirtualServer(ctx, "TCP", vs)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(rs, oldPod.IP+":8080 Masq 0") {
			t.Errorf("node1 %s: the terminating endpoint must stay as a weight-0 real server while it serves its connections: %v", vs, rs)
		}
	}
	answers(t, "new connections while the old endpoint terminates", mustClient(t, ctx, n1, c.Name, "tcp", vip, 4), 4, map[string]int{"drn2-b": 4}, c.IP)
	time.Sleep(12 * time.Second) // more than syncPeriod: a full resync runs during the drain
	state("12 s later")
	// The clients finish (the pod's graceful shutdown ends its connections),
	// then the pod is gone and leaves the slice.
	for _, h := range holds {
		// An error here means the hold already ended (its connection broke):
		// its log says how.
		_ = vm.Signal(ctx, h.pid, syscall.SIGTERM)
	}
	for _, h := range holds {
		var out string
		err := framework.Eventually(ctx, 20*time.Second, 300*time.Millisecond, func(ctx context.Context) error {
			if out = h.read(t, ctx); !strings.Contains(out, "SUMMARY ") {
				return fmt.Errorf("%s has not finished", h.what)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		t.Logf("%s: %s ... %s", h.what, lines[0], lines[len(lines)-1])
		if strings.Contains(out, "ERROR") || !strings.Contains(out, "errors=0") {
			t.Errorf("%s: the long-lived connection to the terminating endpoint broke:\n%s", h.what, out)
		}
		for _, line := range lines[1 : len(lines)-1] {
			if !strings.Contains(line, " "+oldPod.Name+" echo=") {
				t.Errorf("%s: exchange answered by someone else than %s: %q", h.what, oldPod.Name, line)
				break
			}
		}
	}
	if err := framework.SetEndpoints(ctx, cp.Client, svc, newEp); err != nil {
		t.Fatal(err)
	}
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		for _, vs := range []string{vip, np} {
			rs, err := n1.VirtualServer(ctx, "TCP", vs)
			if err != nil {
				return err
			}
			if len(rs) != 1 || rs[0] != newPod.IP+":8080 Masq 1" {
				return fmt.Errorf("node1 %s after the old endpoint left the slice: %v", vs, rs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
