//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Long apiserver outages (issue 27): a daemon that starts while the apiserver is
// unreachable, and one that runs through a long outage under traffic. The outage
// lasts KPI_E2E_OUTAGE (a Go duration, default 90s: longer than the daemon's 30 s
// wait for its Node); `make outage` runs both with 10 minutes. Pod addresses
// 10.244.0.215-219 (in the apiserver restart block of resilience_test.go);
// LoadBalancer IP 10.0.2.78.

// outageDuration is KPI_E2E_OUTAGE, at least a minute: the start-up scenario must
// outlast the node wait and still see the daemon serve before the apiserver is back.
func outageDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("KPI_E2E_OUTAGE")
	if v == "" {
		return 90 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("KPI_E2E_OUTAGE=%q: want a Go duration of at least 1m (the daemon waits 30 s for its Node)", v)
	}
	return d
}

// stopAPIServerFor stops the apiserver and returns the function that starts it
// again (also run as a cleanup if the test ends first).
func stopAPIServerFor(t *testing.T) func(ctx context.Context) {
	t.Helper()
	cp.StopAPIServer()
	stopped := true
	logf("kube-apiserver stopped")
	t.Cleanup(func() {
		if stopped {
			if err := cp.StartAPIServer(context.Background()); err != nil {
				t.Errorf("restarting the apiserver after a failure: %v", err)
			}
		}
	})
	return func(ctx context.Context) {
		t.Helper()
		if err := cp.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		stopped = false
		logf("kube-apiserver restarted")
	}
}

// requireSameDaemon fails t unless our daemon still runs with pid (it never exited
// or was restarted).
func requireSameDaemon(t *testing.T, ctx context.Context, pid int, when string) {
	t.Helper()
	if node.KubeProxyPID() != pid || !node.KubeProxyRunning(ctx) {
		t.Fatalf("%s: kube-proxy (pid %d) is not running any more:\n%s", when, pid, node.KubeProxyLog(ctx, 40))
	}
}

// healthStatus is the status line our daemon answers on path of its health port.
func healthStatus(ctx context.Context, path string) string {
	out, _ := vm.Sh(ctx, "timeout 5 wget -S -q -O /dev/null http://127.0.0.1:10256"+path+" 2>&1 | grep -m1 -o 'HTTP/1.[01] [0-9]*'")
	return strings.TrimSpace(out)
}

// TestStartWithoutAPIServer: the daemon starts while the apiserver is stopped, with
// a configuration whose values come from the Node (nodePortAddresses: [primary],
// detectLocalMode: NodeCIDR). It runs through the whole outage without exiting:
// past its 30 s node wait it serves /livez 200 and /healthz 503 (the node is not
// known: upstream's answers), and leaves the kernel state alone (a Service the
// previous daemon programmed keeps answering). Once the apiserver is back it
// programs everything from the Node, as if it had been known at start: node ports
// on the Node's IP only (the previous daemon's node port on cbr0's address goes),
// the LoadBalancer source-range rule that lets the node reach an LB address from
// that address, the NodeCIDR local-traffic rule with the Node's pod CIDR, a new
// Service's ClusterIP reachable from a pod; same process all along.
func TestStartWithoutAPIServer(t *testing.T) {
	defaultBackendOnly(t)
	ctx, ns := scenario(t, "e2e-outage-start")
	outage := outageDuration(t)
	pods := addPods(t, ctx, "ost", 215, 2)
	client := addPods(t, ctx, "ostc", 217, 1)[0]
	httpPort := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}

	// Programmed by the suite's daemon (nodePortAddresses unset: every address).
	web := createService(t, ctx, ns, "web", corev1.ServiceTypeNodePort, pods, httpPort)
	nodePort := web.Spec.Ports[0].NodePort
	onNodeIP := fmt.Sprintf("%s:%d", framework.NodeIP, nodePort)
	onBridge := fmt.Sprintf("10.244.0.1:%d", nodePort)
	waitRealServers(t, ctx, "TCP", onNodeIP, masq(pods))
	waitRealServers(t, ctx, "TCP", onBridge, masq(pods)) // gone once the node port follows `primary`
	lb := createServiceWith(t, ctx, ns, "lb", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{framework.NodeIP + "/32"} }, endpoints(pods), httpPort)
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.2.78"}}
	if _, err := cp.Client.CoreV1().Services(ns).UpdateStatus(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRealServers(t, ctx, "TCP", "10.0.2.78:80", masq(pods))

	// The suite's daemon comes back with the standard configuration afterwards
	// (registered first: it runs after the apiserver is back).
	t.Cleanup(func() { restoreSuiteDaemon(t) })
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	startAPIServer := stopAPIServerFor(t)
	outageStart := time.Now()
	config := framework.KubeProxyConfig("nodePortAddresses:\n- primary\ndetectLocalMode: NodeCIDR\n")
	if err := node.StartKubeProxy(ctx, cp, config); err != nil {
		t.Fatal(err)
	}
	pid := node.KubeProxyPID()
	daemonStart := time.Now()

	// Through the outage: the same process; once past its node wait, alive on
	// /livez, not eligible on /healthz, and the old state still serves.
	served := false
	for time.Since(outageStart) < outage {
		time.Sleep(5 * time.Second)
		requireSameDaemon(t, ctx, pid, fmt.Sprintf("%s into the outage", time.Since(outageStart).Round(time.Second)))
		if served || time.Since(daemonStart) < 40*time.Second {
			continue
		}
		livez, healthz := healthStatus(ctx, "/livez"), healthStatus(ctx, "/healthz")
		if livez == "" && time.Since(outageStart) < outage-10*time.Second {
			continue // not listening yet: a slow node wait under TCG; ask again
		}
		if !strings.HasSuffix(livez, " 200") || !strings.HasSuffix(healthz, " 503") {
			t.Fatalf("%s after its start, without the apiserver: /livez %q, /healthz %q; want 200 (alive) and 503 (node not known)\n%s",
				time.Since(daemonStart).Round(time.Second), livez, healthz, node.KubeProxyLog(ctx, 30))
		}
		expectAnswers(t, ctx, "", "tcp", web.Spec.ClusterIP+":80", 2, map[string]int{"ost-a": 1, "ost-b": 1})
		t.Logf("%s after its start, without the apiserver: /livez %s, /healthz %s, the previous state answers",
			time.Since(daemonStart).Round(time.Second), livez, healthz)
		served = true
	}
	if !served {
		t.Fatalf("the daemon never served /livez during the %s outage:\n%s", outage, node.KubeProxyLog(ctx, 30))
	}
	guest(t, ctx, "grep -q 'Waiting for the node watch to read the Node before the first sync' "+node.ProxyLogPath)

	startAPIServer(ctx)
	back := time.Now()
	after := createService(t, ctx, ns, "after", corev1.ServiceTypeClusterIP, pods, httpPort)
	waitFor := func(what string, timeout time.Duration, check func(ctx context.Context) error) {
		t.Helper()
		if err := framework.Eventually(ctx, timeout, time.Second, check); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s %s after the apiserver was back", what, time.Since(back).Round(100*time.Millisecond))
	}
	// client-go's reflectors back off up to 30 s (plus jitter) between attempts.
	waitFor("new Service programmed", 120*time.Second, func(ctx context.Context) error {
		got, err := node.RealServers(ctx, "TCP", after.Spec.ClusterIP+":80")
		if err != nil || strings.Join(got, ",") != strings.Join(masq(pods), ",") {
			return fmt.Errorf("new Service %s: %v %v", after.Spec.ClusterIP, got, err)
		}
		return nil
	})
	waitFor("node port only on the Node's IP", 30*time.Second, func(ctx context.Context) error {
		if _, err := vm.Sh(ctx, "! ipvsadm -Ln -t "+onBridge+" >/dev/null 2>&1"); err != nil {
			return fmt.Errorf("%s still has a virtual server: nodePortAddresses [primary] not applied", onBridge)
		}
		got, err := node.RealServers(ctx, "TCP", onNodeIP)
		if err != nil || strings.Join(got, ",") != strings.Join(masq(pods), ",") {
			return fmt.Errorf("%s: %v %v", onNodeIP, got, err)
		}
		return nil
	})
	// iptables-save prints the source match first: -A KUBE-SERVICES ! -s CIDR -m comment ... -j KUBE-MARK-MASQ.
	nodeCIDRRule := "iptables-save -t nat | grep -- '^-A KUBE-SERVICES ! -s 10.244.0.0/24 ' | grep -q -- '--match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ'"
	lbFromNode := framework.ListSet("KUBE-LOAD-BALANCER-SOURCE-IP") + " | grep -qx '10.0.2.78,tcp:80,10.0.2.78'"
	waitFor("NodeCIDR rule and LB allow-from-node entry", 30*time.Second, func(ctx context.Context) error {
		if out, err := vm.Sh(ctx, nodeCIDRRule+" && "+lbFromNode); err != nil {
			return fmt.Errorf("the Node's pod CIDR rule or the LB allow-from-node entry is missing: %v %s", err, out)
		}
		return nil
	})
	expectAnswers(t, ctx, "", "tcp", onNodeIP, 2, map[string]int{"ost-a": 1, "ost-b": 1})
	expectAnswers(t, ctx, client.Name, "tcp", after.Spec.ClusterIP+":80", 2, map[string]int{"ost-a": 1, "ost-b": 1})
	requireSameDaemon(t, ctx, pid, "after the apiserver came back")
	guest(t, ctx, "grep -q 'Rebuilt the proxier' "+node.ProxyLogPath)
	t.Logf("the daemon ran %s without the apiserver (outage %s) and never restarted", back.Sub(daemonStart).Round(time.Second), outage)
}

// restoreSuiteDaemon (a cleanup) runs the suite's daemon with the standard
// configuration again.
func restoreSuiteDaemon(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if t.Failed() {
		// dumpOnFailure runs after this cleanup and shows the suite's daemon.
		t.Logf("kernel state in the VM before the suite's daemon is restored:\n%s", node.KernelState(ctx))
		t.Logf("log tail of the daemon started without the apiserver:\n%s", node.KubeProxyLog(ctx, 40))
	}
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Errorf("stopping kube-proxy: %v", err)
	}
	if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
		t.Errorf("starting the suite's kube-proxy again: %v", err)
		return
	}
	if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
		t.Errorf("the suite's kube-proxy again: %v", err)
	}
}

// TestLongAPIServerOutageUnderTraffic: clients (the node and a pod) connect to an
// unchanged Service every 100 ms while the apiserver is stopped for the outage:
// not one request fails, during or after, and the daemon never restarts; it stays
// alive on /livez throughout (its periodic syncs go on). The changes made right
// after the apiserver is back (a new Service, an endpoint removed, a Service
// deleted) are all programmed within the reflectors' backoff bound.
func TestLongAPIServerOutageUnderTraffic(t *testing.T) {
	defaultBackendOnly(t)
	ctx, ns := scenario(t, "e2e-outage-traffic")
	outage := outageDuration(t)
	pods := addPods(t, ctx, "otr", 215, 3)
	client := addPods(t, ctx, "otrc", 219, 1)[0]
	httpPort := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	web := createService(t, ctx, ns, "web", corev1.ServiceTypeClusterIP, pods[:2], httpPort)
	shrink := createService(t, ctx, ns, "shrink", corev1.ServiceTypeClusterIP, pods[1:], httpPort)
	gone := createService(t, ctx, ns, "gone", corev1.ServiceTypeClusterIP, pods[2:], httpPort)
	vip := web.Spec.ClusterIP + ":80"
	waitRealServers(t, ctx, "TCP", vip, masq(pods[:2]))
	waitRealServers(t, ctx, "TCP", shrink.Spec.ClusterIP+":80", masq(pods[1:]))
	waitRealServers(t, ctx, "TCP", gone.Spec.ClusterIP+":80", masq(pods[2:]))
	pid := node.KubeProxyPID()

	fromNode := startLoad(t, ctx, "", "tcp", vip, 100*time.Millisecond)
	fromPod := startLoad(t, ctx, client.Name, "tcp", vip, 100*time.Millisecond)
	time.Sleep(3 * time.Second)
	startAPIServer := stopAPIServerFor(t)
	outageStart := time.Now()
	for time.Since(outageStart) < outage {
		time.Sleep(10 * time.Second)
		requireSameDaemon(t, ctx, pid, fmt.Sprintf("%s into the outage", time.Since(outageStart).Round(time.Second)))
		if got := healthStatus(ctx, "/livez"); !strings.HasSuffix(got, " 200") {
			t.Fatalf("%s into the outage: /livez %q, want 200", time.Since(outageStart).Round(time.Second), got)
		}
	}
	startAPIServer(ctx)
	back := time.Now()

	added := createService(t, ctx, ns, "added", corev1.ServiceTypeClusterIP, pods[:1], httpPort)
	if err := framework.SetEndpoints(ctx, cp.Client, shrink, endpoints(pods[1:2])...); err != nil {
		t.Fatal(err)
	}
	if err := framework.DeleteService(ctx, cp.Client, gone); err != nil {
		t.Fatal(err)
	}
	// client-go's reflectors back off up to 30 s (plus jitter) between attempts.
	err := framework.Eventually(ctx, 120*time.Second, time.Second, func(ctx context.Context) error {
		var missing []string
		if got, err := activeRealServers(ctx, "TCP", added.Spec.ClusterIP+":80"); err != nil || fmt.Sprint(got) != fmt.Sprintf("[%s:8080]", pods[0].IP) {
			missing = append(missing, fmt.Sprintf("new Service %v", got))
		}
		if got, err := activeRealServers(ctx, "TCP", shrink.Spec.ClusterIP+":80"); err != nil || fmt.Sprint(got) != fmt.Sprintf("[%s:8080]", pods[1].IP) {
			missing = append(missing, fmt.Sprintf("endpoint removal %v", got))
		}
		if _, err := vm.Sh(ctx, "! ipvsadm -Ln -t "+gone.Spec.ClusterIP+":80 >/dev/null 2>&1"); err != nil {
			missing = append(missing, "Service deletion")
		}
		if len(missing) > 0 {
			return fmt.Errorf("not programmed yet: %s", strings.Join(missing, ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after the apiserver came back: %v", err)
	}
	t.Logf("the changes made after the %s outage were all programmed %s after the apiserver was back",
		outage, time.Since(back).Round(100*time.Millisecond))
	expectAnswers(t, ctx, "", "tcp", added.Spec.ClusterIP+":80", 2, map[string]int{"otr-a": 2})
	time.Sleep(3 * time.Second)
	for _, l := range []*load{fromNode, fromPod} {
		got, errs, errLines := l.stop(t, ctx)
		if errs != 0 {
			t.Errorf("%d connections to the unchanged Service failed across the outage:\n%s", errs, strings.Join(errLines, "\n"))
		}
		if total := got["otr-a"] + got["otr-b"]; total < int(outage/(200*time.Millisecond)) {
			t.Errorf("only %d connections answered over the %s outage: the load generator did not really run", total, outage)
		}
	}
	requireSameDaemon(t, ctx, pid, "after the outage")
}
