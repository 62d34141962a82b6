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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Pod address blocks per scenario (10.244.0.X): harness 11-19, tcp-rr 21-29,
// udp 31-39, nodeport 41-49, deletion 51-59.

// scenario starts a scenario that needs our kube-proxy: it fails loudly when
// the daemon is not running, dumps the kernel state if the test fails, and
// creates the scenario's namespace.
func scenario(t *testing.T, namespace string) (context.Context, string) {
	t.Helper()
	requireKubeProxy(t)
	dumpOnFailure(t)
	ctx := context.Background()
	return ctx, newNamespace(t, ctx, namespace)
}

func newNamespace(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	if err := framework.CreateNamespace(ctx, cp.Client, name); err != nil {
		t.Fatal(err)
	}
	return name
}

// createService creates svc + its EndpointSlice over pods and deletes both at
// the end of the test (unless the test deleted them itself).
func createService(t *testing.T, ctx context.Context, ns, name string, typ corev1.ServiceType, pods []*framework.Pod, ports ...framework.ServicePort) *corev1.Service {
	t.Helper()
	svc, err := framework.CreateService(ctx, cp.Client, ns, name, typ, ports...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.CreateEndpointSlice(ctx, cp.Client, svc, endpoints(pods)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = framework.DeleteService(context.Background(), cp.Client, svc)
	})
	t.Logf("Service %s/%s: type %s ClusterIP %s ports %v", ns, name, typ, svc.Spec.ClusterIP, svc.Spec.Ports)
	return svc
}

func masq(pods []*framework.Pod) []string {
	var want []string
	for _, p := range pods {
		want = append(want, p.IP+":8080 Masq")
	}
	return want
}

// TestClusterIPTCPRoundRobin: a ClusterIP TCP Service over three pods becomes
// an IPVS rr virtual server with the three pods as masqueraded real servers,
// the VIP is bound to kube-ipvs0 and listed in the KUBE-CLUSTER-IP set, and
// nine connections from the node are answered three times by each pod.
func TestClusterIPTCPRoundRobin(t *testing.T) {
	ctx, ns := scenario(t, "e2e-tcp-rr")
	pods := addPods(t, ctx, "rr", 21, 3)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))

	sched := guest(t, ctx, "ipvsadm -Ln -t "+vip+" | awk '$1==\"TCP\" {print $3}'")
	if strings.TrimSpace(sched) != "rr" {
		t.Errorf("scheduler of %s = %q, want rr", vip, sched)
	}
	guest(t, ctx, fmt.Sprintf("ip -4 addr show dev kube-ipvs0 | grep -qw 'inet %s/32'", svc.Spec.ClusterIP))
	guest(t, ctx, fmt.Sprintf(framework.ListSet("KUBE-CLUSTER-IP")+" | grep -qx '%s,tcp:80'", svc.Spec.ClusterIP))
	guest(t, ctx, framework.ServicesRuleUsesClusterIPs(false))

	expectAnswers(t, ctx, "", "tcp", vip, 9, map[string]int{"rr-a": 3, "rr-b": 3, "rr-c": 3})
	// From a pod (rr-a) too: the reply path crosses br_netfilter, and rr-a
	// reaching itself through the VIP needs hairpin + masquerade.
	out, err := node.ClientFrom(ctx, "rr-a", "tcp", vip, 6)
	if err != nil {
		t.Fatal(err)
	}
	if got, errs := framework.CountAnswers(out); errs != 0 || len(got) != 3 {
		t.Errorf("from pod rr-a: answers %v with %d errors, want all three pods and no error:\n%s", got, errs, out)
	}
}

// TestClusterIPUDP: a UDP ClusterIP Service answers through IPVS, each new
// client socket going to the next pod.
func TestClusterIPUDP(t *testing.T) {
	ctx, ns := scenario(t, "e2e-udp")
	pods := addPods(t, ctx, "udp", 31, 2)
	svc := createService(t, ctx, ns, "dns", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
	vip := svc.Spec.ClusterIP + ":53"
	waitRealServers(t, ctx, "UDP", vip, masq(pods))
	guest(t, ctx, fmt.Sprintf(framework.ListSet("KUBE-CLUSTER-IP")+" | grep -qx '%s,udp:53'", svc.Spec.ClusterIP))
	expectAnswers(t, ctx, "", "udp", vip, 4, map[string]int{"udp-a": 2, "udp-b": 2})
}

// TestNodePortFromNode: a NodePort Service gets an IPVS virtual server on the
// node's address and port, the port is in KUBE-NODE-PORT-TCP, and connections
// from the node, and from a pod, to NodeIP:nodePort reach both pods.
func TestNodePortFromNode(t *testing.T) {
	ctx, ns := scenario(t, "e2e-nodeport")
	pods := addPods(t, ctx, "np", 41, 2)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeNodePort, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	nodePort := svc.Spec.Ports[0].NodePort
	if nodePort == 0 {
		t.Fatalf("the apiserver allocated no NodePort: %+v", svc.Spec.Ports)
	}
	addr := fmt.Sprintf("%s:%d", framework.NodeIP, nodePort)
	waitRealServers(t, ctx, "TCP", addr, masq(pods))
	waitRealServers(t, ctx, "TCP", svc.Spec.ClusterIP+":80", masq(pods))
	guest(t, ctx, fmt.Sprintf(framework.ListSet("KUBE-NODE-PORT-TCP")+" | grep -qx '%d'", nodePort))
	expectAnswers(t, ctx, "", "tcp", addr, 4, map[string]int{"np-a": 2, "np-b": 2})
	// From a pod that is not an endpoint: pod -> NodeIP:nodePort -> both pods.
	client := addPods(t, ctx, "npc", 49, 1)[0]
	expectAnswers(t, ctx, client.Name, "tcp", addr, 4, map[string]int{"np-a": 2, "np-b": 2})
}

// TestServiceDeletionLeavesNothing: deleting a Service (and its slice) removes
// its virtual server, its kube-ipvs0 address and its ipset entry, and the VIP
// stops answering.
func TestServiceDeletionLeavesNothing(t *testing.T) {
	ctx, ns := scenario(t, "e2e-delete")
	pods := addPods(t, ctx, "del", 51, 2)
	svc := createService(t, ctx, ns, "gone", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	ip := svc.Spec.ClusterIP
	waitRealServers(t, ctx, "TCP", ip+":80", masq(pods))
	expectAnswers(t, ctx, "", "tcp", ip+":80", 2, map[string]int{"del-a": 1, "del-b": 1})

	if err := framework.DeleteService(ctx, cp.Client, svc); err != nil {
		t.Fatal(err)
	}
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		out, err := vm.Sh(ctx, fmt.Sprintf(`ipvsadm -Ln | grep -w '%[1]s:80' || true
ip -4 addr show dev kube-ipvs0 | grep -w 'inet %[1]s/32' || true
`+framework.ListSet("KUBE-CLUSTER-IP")+` | grep '^%[1]s,' || true`, ip))
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "" {
			return fmt.Errorf("still in the kernel after deleting %s/%s:\n%s", ns, svc.Name, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := node.Client(ctx, "tcp", ip+":80", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "ERROR") {
		t.Fatalf("deleted Service %s:80 still answers: %q", ip, out)
	}
	// The apiserver really deleted it (no finalizer left it behind).
	if _, err := cp.Client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
		t.Fatalf("Service %s/%s still exists in the apiserver", ns, svc.Name)
	}
}

// TestSessionAffinityClientIP: sessionAffinity ClientIP makes the virtual
// server persistent (timeout 10800 s by default) and every connection from
// the node lands on the same pod.
func TestSessionAffinityClientIP(t *testing.T) {
	ctx, ns := scenario(t, "e2e-affinity")
	pods := addPods(t, ctx, "aff", 61, 3)
	svc, err := framework.CreateServiceWith(ctx, cp.Client, ns, "sticky", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP },
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.CreateEndpointSlice(ctx, cp.Client, svc, endpoints(pods)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = framework.DeleteService(context.Background(), cp.Client, svc) })
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))
	flags := guest(t, ctx, "ipvsadm -Ln -t "+vip+" | awk '$1==\"TCP\"'")
	if !strings.Contains(flags, "persistent 10800") {
		t.Errorf("virtual server %s is not persistent for 10800 s: %q", vip, flags)
	}
	out, err := node.Client(ctx, "tcp", vip, 6)
	if err != nil {
		t.Fatal(err)
	}
	if got, errs := framework.CountAnswers(out); errs != 0 || len(got) != 1 {
		t.Fatalf("with ClientIP affinity one pod must answer all 6 connections, got %v (%d errors):\n%s", got, errs, out)
	}
}

// TestEndpointRemoval: when a pod leaves the EndpointSlice its real server
// goes (at once, or after draining with weight 0: graceful termination) and
// new connections only reach the remaining pods.
func TestEndpointRemoval(t *testing.T) {
	ctx, ns := scenario(t, "e2e-scale")
	pods := addPods(t, ctx, "sc", 71, 3)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))
	expectAnswers(t, ctx, "", "tcp", vip, 3, map[string]int{"sc-a": 1, "sc-b": 1, "sc-c": 1})

	if err := framework.SetEndpoints(ctx, cp.Client, svc, endpoints(pods[:2])...); err != nil {
		t.Fatal(err)
	}
	removed := pods[2].IP + ":8080"
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		out, err := vm.Sh(ctx, "ipvsadm -Ln -t "+vip)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[0] == "->" && f[1] == removed && f[3] != "0" {
				return fmt.Errorf("removed endpoint %s still has weight %s:\n%s", removed, f[3], out)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	expectAnswers(t, ctx, "", "tcp", vip, 4, map[string]int{"sc-a": 2, "sc-b": 2})
}

// TestExternalIP: a Service external IP gets its own virtual server and
// answers from the node. 10.0.2.50 is inside the VM's own subnet, so nothing
// leaves the VM.
func TestExternalIP(t *testing.T) {
	ctx, ns := scenario(t, "e2e-extip")
	pods := addPods(t, ctx, "ext", 81, 2)
	svc, err := framework.CreateServiceWith(ctx, cp.Client, ns, "ext", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"10.0.2.50"} },
		framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := framework.CreateEndpointSlice(ctx, cp.Client, svc, endpoints(pods)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = framework.DeleteService(context.Background(), cp.Client, svc) })
	waitRealServers(t, ctx, "TCP", "10.0.2.50:80", masq(pods))
	guest(t, ctx, framework.ListSet("KUBE-EXTERNAL-IP")+" | grep -qx '10.0.2.50,tcp:80'")
	expectAnswers(t, ctx, "", "tcp", "10.0.2.50:80", 4, map[string]int{"ext-a": 2, "ext-b": 2})
}

// TestHealthzAndMetrics: kube-proxy serves /healthz on 10256 and Prometheus
// metrics on 127.0.0.1:10249 inside the node.
func TestHealthzAndMetrics(t *testing.T) {
	requireKubeProxy(t)
	ctx := context.Background()
	out := guest(t, ctx, "timeout 5 wget -q -O - http://127.0.0.1:10256/healthz")
	if !strings.Contains(out, "lastUpdated") {
		t.Errorf("/healthz body %q has no lastUpdated", out)
	}
	// The sync metrics appear when the first sync ends; readiness (our chains and
	// kube-ipvs0 exist) comes a little before that, so a first scenario may be early.
	err := framework.Eventually(ctx, 30*time.Second, time.Second, func(ctx context.Context) error {
		out := guest(t, ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics")
		for _, m := range []string{"kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_sync_proxy_rules_last_timestamp_seconds"} {
			if !strings.Contains(out, m) {
				return fmt.Errorf("/metrics lacks %s", m)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestPodToServiceSourceIP: a pod reaching another pod through a ClusterIP
// keeps its own source address (no masquerade inside the cluster CIDR), while
// a pod reaching itself through the VIP (hairpin) is masqueraded via the
// KUBE-LOOP-BACK set, or the reply would never come back through IPVS.
func TestPodToServiceSourceIP(t *testing.T) {
	ctx, ns := scenario(t, "e2e-srcip")
	pods := addPods(t, ctx, "src", 101, 2)
	svc := createService(t, ctx, ns, "only-b", corev1.ServiceTypeClusterIP, pods[1:], framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods[1:]))

	out, err := node.ClientFrom(ctx, "src-a", "tcp", vip, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("src-a -> %s: %s", vip, out)
	if !strings.HasPrefix(out, "src-b from="+pods[0].IP+":") {
		t.Errorf("src-a -> %s: answer %q, want src-b seeing src-a's own address %s", vip, out, pods[0].IP)
	}
	out, err = node.ClientFrom(ctx, "src-b", "tcp", vip, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hairpin src-b -> %s: %s", vip, out)
	if !strings.HasPrefix(out, "src-b from=") || strings.HasPrefix(out, "src-b from="+pods[1].IP+":") {
		t.Errorf("hairpin src-b -> %s -> src-b: answer %q, want an answer from a masqueraded source", vip, out)
	}
	guest(t, ctx, fmt.Sprintf(framework.ListSet("KUBE-LOOP-BACK")+" | grep -qx '%[1]s,tcp:8080,%[1]s'", pods[1].IP))
}

// TestLoadBalancerIngressIP: a LoadBalancer Service whose status carries an
// ingress IP gets a virtual server on it and a KUBE-LOAD-BALANCER member, and
// answers there. 10.0.2.60 is in the VM's own subnet.
func TestLoadBalancerIngressIP(t *testing.T) {
	ctx, ns := scenario(t, "e2e-lb")
	pods := addPods(t, ctx, "lb", 111, 2)
	svc := createService(t, ctx, ns, "lb", corev1.ServiceTypeLoadBalancer, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.2.60"}}
	if _, err := cp.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRealServers(t, ctx, "TCP", "10.0.2.60:80", masq(pods))
	guest(t, ctx, framework.ListSet("KUBE-LOAD-BALANCER")+" | grep -qx '10.0.2.60,tcp:80'")
	expectAnswers(t, ctx, "", "tcp", "10.0.2.60:80", 4, map[string]int{"lb-a": 2, "lb-b": 2})
}

// TestKubeProxyRestartUnderLoad (runs last but the cleanups: it restarts the
// daemon): with a client connecting every 20 ms, kube-proxy is stopped (the
// data path stays: Services keep answering) and started again, with warm start
// and then without; each time the new
// process adopts the existing state (the virtual server is never recreated:
// its connection counter keeps counting), not one connection fails, and new
// changes are applied.
func TestKubeProxyRestartUnderLoad(t *testing.T) {
	ctx, ns := scenario(t, "e2e-restart")
	pods := addPods(t, ctx, "rs", 91, 2)
	svc := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods, framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	vip := svc.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods))

	// Twice: with warm start (the lists' objects programmed as they arrive, adding
	// only), then as by default, which leaves the daemon as the next scenarios want it.
	warm := "---\napiVersion: kube-proxy-ipvs.io/v1alpha1\nkind: KubeProxyIPVSConfiguration\nwarmStart: true\n"
	for _, r := range []struct{ name, config string }{
		{"a warm start", framework.KubeProxyConfig("") + warm},
		{"a cold start", framework.KubeProxyConfig("")},
	} {
		l := startLoad(t, ctx, "", "tcp", vip, 20*time.Millisecond)
		time.Sleep(8 * time.Second)
		before := vsConnections(t, ctx, vip)
		if err := node.StopKubeProxy(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // no kube-proxy at all for a while
		if err := node.StartKubeProxy(ctx, cp, r.config); err != nil {
			t.Fatal(err)
		}
		if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		err := framework.Eventually(ctx, 90*time.Second, time.Second, func(ctx context.Context) error {
			page, err := vm.Sh(ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics")
			if err != nil {
				return err
			}
			if n, _, ok := framework.HistogramSummary(page, "kubeproxy_sync_proxy_rules_duration_seconds"); !ok || n < 1 {
				return fmt.Errorf("the restarted kube-proxy has not synced yet (sync count %v)", n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		after := vsConnections(t, ctx, vip)
		t.Logf("%s: virtual server %s: %d connections before the restart, %d after the first sync of the new process", r.name, vip, before, after)
		if after <= before {
			t.Errorf("%s: the connection counter of %s went from %d to %d: the restarted kube-proxy recreated the virtual server instead of adopting it", r.name, vip, before, after)
		}
		time.Sleep(2 * time.Second)
		got, errs, errLines := l.stop(t, ctx)
		if errs != 0 {
			t.Fatalf("%s: %d connections failed across the restart:\n%s", r.name, errs, strings.Join(errLines, "\n"))
		}
		if got["rs-a"] == 0 || got["rs-b"] == 0 {
			t.Errorf("%s: both pods must answer during the restart: %v", r.name, got)
		}
	}

	if err := framework.SetEndpoints(ctx, cp.Client, svc, endpoints(pods[:1])...); err != nil {
		t.Fatal(err)
	}
	err := framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		out, err := node.Client(ctx, "tcp", vip, 2)
		if err != nil {
			return err
		}
		if got, errs := framework.CountAnswers(out); errs != 0 || fmt.Sprint(got) != "map[rs-a:2]" {
			return fmt.Errorf("after restart and scale-down %s answered %v (%d errors)", vip, got, errs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// vsConnections is the total connection counter IPVS keeps for a TCP virtual
// server (it restarts from 0 if the virtual server is deleted and re-added).
func vsConnections(t *testing.T, ctx context.Context, vip string) int {
	t.Helper()
	out := guest(t, ctx, "ipvsadm -Ln --stats --exact -t "+vip+" | awk '$1==\"TCP\" {print $3}'")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("connection counter of %s: %q", vip, out)
	}
	return n
}

// TestCleanupLeavesNothing (runs after the restart scenario): `kube-proxy
// --cleanup` on a node where it ran removes kube-ipvs0, every IPVS virtual
// server, the KUBE-* ipsets, the KUBE-* iptables chains and the nftables
// backend's table.
func TestCleanupLeavesNothing(t *testing.T) {
	requireKubeProxy(t)
	dumpOnFailure(t)
	ctx := context.Background()
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	runCleanup(t, ctx)
	out := guest(t, ctx, `ip link show kube-ipvs0 2>/dev/null | head -1
ipvsadm -Ln | awk 'NR>3'
ipset list -n | grep '^KUBE-' || true
nft list table `+framework.NFTablesTable+` >/dev/null 2>&1 && echo 'table `+framework.NFTablesTable+`'
`+kubeProxyChains)
	if strings.TrimSpace(out) != "" {
		t.Fatalf("left behind after kube-proxy --cleanup:\n%s", out)
	}
}

// TestCleanupUpstreamIPVSState (runs last, after TestCleanupLeavesNothing
// stopped our daemon): a node switched over from upstream kube-proxy in ipvs
// mode carries its kube-ipvs0, virtual servers, ipsets (both families) and
// iptables/ip6tables chains, plus iptables-mode leftovers; `kube-proxy
// --cleanup` removes all of it but leaves kubelet's KUBE- chains, a foreign
// chain and a foreign virtual server alone.
func TestCleanupUpstreamIPVSState(t *testing.T) {
	defaultBackendOnly(t)
	dumpOnFailure(t)
	ctx := context.Background()
	if node.KubeProxyRunning(ctx) {
		if err := node.StopKubeProxy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	runCleanup(t, ctx) // a node with upstream's state only (already clean in a full run)
	guest(t, ctx, "bash /kpi/scripts/upstream-ipvs-state.sh")
	before := guest(t, ctx, "ipvsadm -Ln | grep -c -E '^(TCP|UDP)'; ipset list -n | grep -c '^KUBE-'; iptables-save | grep -c '^:KUBE-'")
	t.Logf("upstream state before --cleanup (virtual servers, KUBE ipsets, KUBE chains): %s", strings.Join(strings.Fields(before), " "))
	runCleanup(t, ctx)
	out := guest(t, ctx, `ip link show kube-ipvs0 2>/dev/null | head -1
ipvsadm -Ln | awk '$1=="TCP"||$1=="UDP"' | grep -v -w '10.0.2.70:9999' || true
ipset list -n | grep '^KUBE-' || true
`+kubeProxyChains)
	if strings.TrimSpace(out) != "" {
		t.Fatalf("upstream ipvs-mode state left behind after kube-proxy --cleanup:\n%s", out)
	}
	kept := guest(t, ctx, `ipvsadm -Ln -t 10.0.2.70:9999 >/dev/null && echo foreign-vs
iptables -S INPUT | grep -q -- '-j E2E-FOREIGN' && iptables -S E2E-FOREIGN | grep -q 9999 && echo foreign-chain
iptables -S INPUT | grep -q -- '-j KUBE-FIREWALL' && iptables -S KUBE-FIREWALL | grep -q 'block incoming localnet' && echo kubelet-firewall
iptables -t mangle -S KUBE-KUBELET-CANARY >/dev/null && echo kubelet-canary`)
	if got := strings.Join(strings.Fields(kept), ","); got != "foreign-vs,foreign-chain,kubelet-firewall,kubelet-canary" {
		t.Fatalf("--cleanup removed state that is not kube-proxy's: kept only %q of foreign-vs,foreign-chain,kubelet-firewall,kubelet-canary\n%s", got, node.KernelState(ctx))
	}
}

// kubeProxyChains is a guest script printing every KUBE- chain and jump in
// both families except the kubelet's (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
// KUBE-IPTABLES-HINT). Upstream's iptables mode also creates KUBE-FIREWALL, in
// both families, and never deletes it (its CleanupLeftovers leaves the
// kubelet's chains alone), so after a migration scenario it is on the node
// and no kube-proxy --cleanup removes it.
const kubeProxyChains = `for save in iptables-save ip6tables-save; do
  $save | grep -E '^:KUBE-|-j KUBE-' | grep -v -E 'KUBE-(FIREWALL|KUBELET-CANARY|IPTABLES-HINT)( |$)' || true
done`

// runCleanup runs `kube-proxy --cleanup` in the VM with the daemon's config
// and fails t unless it exits 0.
func runCleanup(t *testing.T, ctx context.Context) {
	t.Helper()
	// The daemon's config (written again: a scenario run alone may not have started it).
	if err := vm.WriteFile(ctx, "/kpi/kube-proxy/cleanup.yaml", []byte(framework.KubeProxyConfig("")), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := vm.Exec(ctx, vm.KubeProxyCommand("--cleanup", "--config=/kpi/kube-proxy/cleanup.yaml", "--v=2")...)
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("kube-proxy --cleanup exited %d:\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	t.Logf("kube-proxy --cleanup, last lines of its log:\n%s", strings.Join(lines[max(0, len(lines)-3):], "\n"))
}
