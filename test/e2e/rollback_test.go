//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Rolling back from our nftables backend to upstream kube-proxy v1.37.2 (issue
// 29 item 7): upstream removes only its own tables and chains, so our table
// `inet kube-proxy-ipvs` stays on the node. Its rules apply only while our
// daemon renews the liveness element of each family (pkg/proxy/ipvs/nftalive.go);
// this scenario runs the daemon with a 60 s lifetime (the default is three sync
// periods, at least two minutes) and shows what upstream's ipvs mode serves once
// it has lapsed. The scenario ends with our daemon on the standard config, as the
// scenarios after it expect (its iptables backend removes the stale table).
//
// Pod addresses 10.244.0.64-67; LoadBalancer IP 10.0.2.66.

const (
	rollbackLiveness = 60 * time.Second
	rollbackLBIP     = "10.0.2.66"
)

var expiresRE = regexp.MustCompile(`\bipv4 timeout \S+ expires (\S+?)[ ,}]`)

// aliveLeft is how long the IPv4 liveness element of our table still lives (ok
// false when it has lapsed, or the table is gone).
func aliveLeft(t *testing.T, ctx context.Context) (time.Duration, bool) {
	t.Helper()
	out, err := vm.Sh(ctx, "nft list set "+framework.NFTablesTable+" ip-alive 2>&1 || true")
	if err != nil {
		t.Fatal(err)
	}
	m := expiresRE.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("the liveness element's expiry %q: %v\n%s", m[1], err, out)
	}
	return d, true
}

// probeOnce connects once from pod ns and returns the client's line.
func probeOnce(t *testing.T, ctx context.Context, ns, addr string) string {
	t.Helper()
	out, err := node.ClientFrom(ctx, ns, "tcp", addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRollbackFromNFTablesToUpstreamIPVS: our daemon on the nftables backend
// serves a Service under load (a client on the node every 20 ms); it is
// stopped (SIGTERM), a Service deleted and another made on its ClusterIP with
// another port, a LoadBalancer's source range changed, and upstream kube-proxy
// started in ipvs mode on the same config, without --cleanup: the load sees no
// failure across the handover. While our liveness element still lives (when
// upstream's first sync comes soon enough to see it), our stale table still
// acts: a pod's connection to the recycled ClusterIP's new port is refused by
// our ipvs-filter, and the newly allowed source is dropped by our source-ranges
// firewall. Once the element has lapsed (at the end of the lifetime it had at
// the stop, nothing of ours written) both are served by upstream alone, the
// load has still seen no failure, and the table is still there, inert.
func TestRollbackFromNFTablesToUpstreamIPVS(t *testing.T) {
	defaultBackendOnly(t)
	ctx, ns := scenario(t, "e2e-rollback")
	began := time.Now()
	up := &vmKubeProxy{name: "upstream", bin: upstreamKubeProxyBin, log: "/tmp/kube-proxy-upstream-rollback.log"}
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() && up.pid != 0 {
			t.Logf("upstream kube-proxy (ipvs mode) log tail:\n%s", up.logTail(ctx, 30))
		}
		if err := up.stop(ctx); err != nil {
			t.Errorf("stopping upstream kube-proxy: %v", err)
		}
		restoreIPTablesBackend(t)
	})
	pods := addPods(t, ctx, "rb", 64, 4) // a, b serve; c, d are clients
	a, c, d := pods[0], pods[2], pods[3]
	tcp80 := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	steady := createService(t, ctx, ns, "steady", corev1.ServiceTypeClusterIP, pods[:2], tcp80)
	old := createService(t, ctx, ns, "old", corev1.ServiceTypeClusterIP, pods[:1], tcp80)
	lb := createServiceWith(t, ctx, ns, "lb", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{c.IP + "/32"} },
		endpoints(pods[:1]), tcp80)
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: rollbackLBIP}}
	lb, err := cp.Client.CoreV1().Services(ns).UpdateStatus(ctx, lb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip, lbAddr := steady.Spec.ClusterIP+":80", rollbackLBIP+":80"
	recycled := old.Spec.ClusterIP
	newAddr := recycled + ":8081"

	// Ours on the nftables backend.
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	env := []string{fmt.Sprintf("%s=%s", framework.NFTLivenessEnv, rollbackLiveness)}
	if err := node.StartKubeProxyWithEnv(ctx, cp, framework.KubeProxyConfig(""), env, framework.NFTablesBackend); err != nil {
		t.Fatal(err)
	}
	if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	waitNFTablesOnly(t, ctx, framework.NodeName, vm.Sh, false,
		fmt.Sprintf("element ip-cluster-ip %s . tcp . 80", recycled),
		fmt.Sprintf("element ip-load-balancer-fw %s . tcp . 80", rollbackLBIP),
		"element ip-alive ipv4 timeout "+nftables.DurationString(rollbackLiveness))
	waitRealServers(t, ctx, "TCP", vip, masq(pods[:2]))
	waitActive(t, ctx, "TCP", lbAddr, a.IP)
	expectAnswers(t, ctx, c.Name, "tcp", lbAddr, 2, map[string]int{a.Name: 2})
	if out := probeOnce(t, ctx, d.Name, lbAddr); !strings.HasPrefix(out, "ERROR") {
		t.Fatalf("ours: %s outside the source ranges reached %s: %s", d.IP, lbAddr, out)
	}
	if out := probeOnce(t, ctx, d.Name, newAddr); !strings.Contains(out, "refused") {
		t.Fatalf("ours: %s (a port no Service has on a service address) was not refused: %s", newAddr, out)
	}
	t.Logf("ours on nftables: %s from %s answered, from %s dropped; %s refused", lbAddr, c.IP, d.IP, newAddr)

	load := startLoad(t, ctx, "", "tcp", vip, migrationInterval, "--stamp", "--timeout", migrationTimeout)
	time.Sleep(3 * time.Second)

	// The rollback: ours stopped; meanwhile a recycled ClusterIP with another
	// port and a changed source range; upstream's ipvs mode started on the same
	// config, whose first sync programs them.
	before := vsConnections(t, ctx, vip)
	stopped := time.Now()
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	left, ok := aliveLeft(t, ctx)
	if !ok {
		t.Fatalf("the liveness element lapsed as our daemon stopped")
	}
	lapseBy := time.Now().Add(left)
	if err := framework.DeleteService(ctx, cp.Client, old); err != nil {
		t.Fatal(err)
	}
	createServiceWith(t, ctx, ns, "new", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) { s.Spec.ClusterIP = recycled },
		endpoints(pods[:1]), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8081})
	lb, err = cp.Client.CoreV1().Services(ns).Get(ctx, lb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb.Spec.LoadBalancerSourceRanges = []string{d.IP + "/32"}
	if _, err := cp.Client.CoreV1().Services(ns).Update(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := up.start(ctx, upstreamConfig("ipvs")); err != nil {
		t.Fatal(err)
	}
	waitSyncs(t, ctx, "upstream", "kubeproxy_sync_proxy_rules_duration_seconds", 1, up.running)
	upSynced := time.Since(stopped)
	waitRealServers(t, ctx, "TCP", newAddr, masq(pods[:1]))
	waitGuest(t, ctx, "upstream's source range for "+d.IP, fmt.Sprintf("ipset list KUBE-LOAD-BALANCER-SOURCE-CIDR | grep -Eqx '%s,tcp:80,%s(/32)?'", rollbackLBIP, d.IP))
	programmed := time.Since(stopped)
	t.Logf("upstream (ipvs mode) synced %s after ours stopped, the recycled ClusterIP and the source range programmed at %s; our liveness element had %s left at the stop",
		upSynced.Round(100*time.Millisecond), programmed.Round(100*time.Millisecond), left.Round(100*time.Millisecond))

	// While our element lives, our stale table acts on both.
	observed := 0
	for _, p := range []struct {
		what, addr, want string
	}{
		{"the recycled ClusterIP's new port", newAddr, "connection refused"},  // ipvs-filter's reject
		{"the LoadBalancer from the newly allowed source", lbAddr, "timeout"}, // source-ranges-firewall's drop
	} {
		_, aliveBefore := aliveLeft(t, ctx)
		out := probeOnce(t, ctx, d.Name, p.addr)
		_, aliveAfter := aliveLeft(t, ctx)
		switch {
		case aliveBefore && aliveAfter:
			observed++
			t.Logf("while our element lives, %s (%s from %s): %s", p.what, p.addr, d.IP, out)
			if !strings.HasPrefix(out, "ERROR") || !strings.Contains(out, p.want) {
				t.Errorf("%s while our stale table lived: %q, want an error with %q", p.what, out, p.want)
			}
		default:
			t.Logf("our element lapsed before %s could be tried with it living (%s after the stop)", p.what, time.Since(stopped).Round(100*time.Millisecond))
		}
	}

	// The lapse: nothing of ours written, the element is gone by itself.
	err = framework.Eventually(ctx, time.Until(lapseBy)+30*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		if left, ok := aliveLeft(t, ctx); ok {
			return fmt.Errorf("our liveness element still lives (%s left)", left)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	lapsed, predicted := time.Since(stopped), lapseBy.Sub(stopped)
	expectAnswers(t, ctx, d.Name, "tcp", newAddr, 3, map[string]int{a.Name: 3})
	expectAnswers(t, ctx, d.Name, "tcp", lbAddr, 2, map[string]int{a.Name: 2})
	if out := probeOnce(t, ctx, c.Name, lbAddr); !strings.HasPrefix(out, "ERROR") {
		t.Errorf("upstream: %s, no longer in the source ranges, reached %s: %s", c.IP, lbAddr, out)
	}
	served := time.Since(stopped)

	time.Sleep(2 * time.Second)
	after := vsConnections(t, ctx, vip)
	got, errs, errLines := load.stop(t, ctx)
	if errs != 0 {
		t.Errorf("%d connections to %s failed across the rollback and the lapse:\n%s", errs, vip, strings.Join(errLines, "\n"))
	}
	if got[pods[0].Name] == 0 || got[pods[1].Name] == 0 {
		t.Errorf("both pods must answer: %v", got)
	}
	if after <= before {
		t.Errorf("the connection counter of %s went from %d to %d: upstream re-created the virtual server", vip, before, after)
	}
	canon, err := nftTable(ctx, vm.Sh)
	if err != nil {
		t.Fatal(err)
	}
	if m := nftIncomplete(canon, "ip-"); len(m) > 0 || strings.Contains(canon, "element ip-alive") || strings.Contains(canon, "element ip6-alive") {
		t.Errorf("after the lapse the table must still be there, whole and inert; it lacks %v:\n%s", m, canon)
	}
	t.Logf("ROLLBACK nftables-to-upstream-ipvs: upstream synced %.1f s after ours stopped, the recycled ClusterIP and the source range programmed at %.1f s; our element (lifetime %s, %.1f s left at the stop: lapsing at %.1f s) first seen lapsed at %.1f s; both served at %.1f s; %d of 2 stale-table effects observed while it lived; %d connections to %s, %d failed; VS connections %d -> %d; scenario %.1f s",
		upSynced.Seconds(), programmed.Seconds(), rollbackLiveness, left.Seconds(), predicted.Seconds(), lapsed.Seconds(), served.Seconds(),
		observed, len(parseStamped(load.out)), vip, errs, before, after, time.Since(began).Seconds())
}
