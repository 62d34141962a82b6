//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Pod addresses 10.244.0.241-243; LoadBalancer IP 10.0.2.77.

// TestHostileObjectsIsolated: a LoadBalancer whose loadBalancerSourceRanges is
// 0.0.0.0/0 and an EndpointSlice holding a multicast address next to a pod
// (both accepted by the apiserver, both refused by the kernel as upstream
// programs them naively) are programmed the way upstream means them, while
// another Service keeps changing: its changes land within the usual latency,
// /healthz stays 200, the refused address is counted and listed as held back,
// and the Service gets one Warning Event.
func TestHostileObjectsIsolated(t *testing.T) {
	ctx, ns := scenario(t, "e2e-hostile")
	pods := addPods(t, ctx, "hos", 241, 3)
	backend, clientA, clientB := pods[0], pods[1], pods[2]
	httpPort := framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}

	healthz := func() {
		t.Helper()
		out := guest(t, ctx, "timeout 5 wget -S -q -O - http://127.0.0.1:10256/healthz 2>&1 | head -1")
		if !strings.Contains(out, "200") {
			t.Fatalf("/healthz is not 200: %q", out)
		}
	}
	// The daemon may still be in its first sync when the suite starts with this
	// scenario: wait for the node to be healthy once, then it must stay so.
	waitGuest(t, ctx, "/healthz 200", "timeout 5 wget -q -O /dev/null http://127.0.0.1:10256/healthz")
	healthz()

	// 1. Everyone may connect: 0.0.0.0/0.
	lb := createServiceWith(t, ctx, ns, "lb-all", corev1.ServiceTypeLoadBalancer,
		func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"0.0.0.0/0"} },
		endpoints(pods[:1]), httpPort)
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.2.77"}}
	if _, err := cp.Client.CoreV1().Services(ns).UpdateStatus(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// 2. A multicast endpoint next to a pod.
	mc := createServiceWith(t, ctx, ns, "mcast", corev1.ServiceTypeClusterIP, nil,
		[]framework.Endpoint{{PodName: "not-a-pod", IP: "239.1.2.3"}, {PodName: backend.Name, IP: backend.IP}}, httpPort)

	waitActive(t, ctx, "TCP", "10.0.2.77:80", backend.IP)
	waitActive(t, ctx, "TCP", mc.Spec.ClusterIP+":80", backend.IP)
	guest(t, ctx, framework.ListSet("KUBE-LOAD-BALANCER")+" | grep -qx '10.0.2.77,tcp:80'")
	if out := guest(t, ctx, framework.ListSet("KUBE-LOAD-BALANCER-FW")+"; "+framework.ListSet("KUBE-LOAD-BALANCER-SOURCE-CIDR")); strings.Contains(out, "10.0.2.77") {
		t.Errorf("0.0.0.0/0 programmed as a filter:\n%s", out)
	}
	if out := guest(t, ctx, "ipvsadm -Ln"); strings.Contains(out, "239.1.2.3") {
		t.Errorf("multicast real server programmed:\n%s", out)
	}
	for _, from := range []string{clientA.Name, clientB.Name, ""} {
		expectAnswers(t, ctx, from, "tcp", "10.0.2.77:80", 2, map[string]int{backend.Name: 2})
	}
	expectAnswers(t, ctx, clientA.Name, "tcp", mc.Spec.ClusterIP+":80", 2, map[string]int{backend.Name: 2})

	// 3. Another Service changes meanwhile: each change lands as usual.
	other := createService(t, ctx, ns, "other", corev1.ServiceTypeClusterIP, pods[:1], httpPort)
	vip := other.Spec.ClusterIP + ":80"
	waitActive(t, ctx, "TCP", vip, backend.IP)
	for i, set := range [][]*framework.Pod{pods[1:2], pods[2:3], pods[:2]} {
		start := time.Now()
		if err := framework.SetEndpoints(ctx, cp.Client, other, endpoints(set)...); err != nil {
			t.Fatal(err)
		}
		want := ips(set)
		err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			got, err := activeRealServers(ctx, "TCP", vip)
			if err != nil {
				return err
			}
			sort.Strings(got)
			if strings.Join(got, ",") != strings.Join(withPort(want, 8080), ",") {
				return fmt.Errorf("real servers %v, want %v", got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		// The usual latency in this VM is well under a second (docs/PERFORMANCE.md),
		// but a change that arrives during a periodic full resync waits for it
		// (issue 15), which under a loaded TCG host takes seconds: the bound is
		// for "not stalled by the hostile objects", the log shows the real figure.
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("change %d took %v next to the hostile objects", i, d)
		}
		t.Logf("change %d landed in %v", i, time.Since(start).Round(time.Millisecond))
		healthz()
	}

	// 4. Visible: counted, listed, one Event.
	metricsOut := guest(t, ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/metrics | grep '^kubeproxy_ipvs_held_back_objects'")
	if !strings.Contains(metricsOut, `ip_family="IPv4",reason="invalid_value"} 1`) {
		t.Errorf("held-back gauge:\n%s", metricsOut)
	}
	list := guest(t, ctx, "timeout 5 wget -q -O - http://127.0.0.1:10249/debug/kube-proxy-ipvs/held-back")
	if !strings.Contains(list, "239.1.2.3") || !strings.Contains(list, ns+"/mcast") {
		t.Errorf("held-back list lacks the multicast endpoint:\n%s", list)
	}
	err := framework.Eventually(ctx, 30*time.Second, time.Second, func(ctx context.Context) error {
		evs, err := cp.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, ev := range evs.Items {
			if ev.Regarding.Name == "mcast" && ev.Reason == "KubeProxyValueNotProgrammed" && strings.Contains(ev.Note, "239.1.2.3") {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%d Warning Events about 239.1.2.3 on %s/mcast, want 1", n, ns)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func withPort(ips []string, port int) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = fmt.Sprintf("%s:%d", ip, port)
	}
	sort.Strings(out)
	return out
}
