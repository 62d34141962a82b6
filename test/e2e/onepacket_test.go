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

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Pod addresses 10.244.0.228-230 (servers) and 10.244.0.224 (the sender).

// realServerInPkts reads the packets each real server of a UDP virtual server has
// received (ipvsadm --stats; the kernel updates them about every 2 s).
func realServerInPkts(t *testing.T, ctx context.Context, vip string) map[string]int {
	t.Helper()
	out := guest(t, ctx, "ipvsadm -Ln --stats --exact -u "+vip+" | awk '$1==\"->\" {print $2, $4}'")
	got := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err == nil {
			got[f[0]] = n
		}
	}
	return got
}

// sendUDPFromOnePort sends count datagrams to vip from one address and port of the
// sender pod, as a NAT gateway or a forwarder does, and returns the client's lines.
func sendUDPFromOnePort(t *testing.T, ctx context.Context, sender *framework.Pod, port int, vip string, count int) string {
	t.Helper()
	r, err := node.VM.Exec(ctx, "ip", "netns", "exec", sender.Name, "/kpi/bin/e2e-agent", "client", "--proto", "udp",
		"--addr", vip, "--count", strconv.Itoa(count), "--timeout", "300ms", "--source", fmt.Sprintf("%s:%d", sender.IP, port))
	if err != nil {
		t.Fatal(err)
	}
	return r.Stdout
}

// waitInPkts waits until the real servers of vip have received want packets in all.
func waitInPkts(t *testing.T, ctx context.Context, vip string, want int) map[string]int {
	t.Helper()
	var got map[string]int
	err := framework.Eventually(ctx, 20*time.Second, time.Second, func(ctx context.Context) error {
		got = realServerInPkts(t, ctx, vip)
		sum := 0
		for _, n := range got {
			sum += n
		}
		if sum < want {
			return fmt.Errorf("%d packets counted, want %d", sum, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v: %v", err, got)
	}
	return got
}

// TestUDPOnePacketScheduling: datagrams from one address and port to a UDP
// Service go to one endpoint until the UDP timeout lapses; with the annotation
// kube-proxy-ipvs.io/scheduler-flags: ops every datagram is scheduled on its own
// and they spread over every endpoint. The replies of one-packet datagrams are not
// translated back to the Service's address (IPVS keeps no connection for them), so
// a client waiting for them from the Service's address gets none: ops is for
// protocols that need no reply (docs/BEHAVIOR.md).
func TestUDPOnePacketScheduling(t *testing.T) {
	ctx, ns := scenario(t, "e2e-ops")
	pods := addPods(t, ctx, "ops", 228, 3)
	sender := addPods(t, ctx, "opss", 224, 1)[0]
	logPort := framework.ServicePort{Name: "syslog", Protocol: corev1.ProtocolUDP, Port: 514}

	plain := createService(t, ctx, ns, "plain", corev1.ServiceTypeClusterIP, pods, logPort)
	ops := createServiceWith(t, ctx, ns, "ops", corev1.ServiceTypeClusterIP,
		func(s *corev1.Service) { s.Annotations = map[string]string{annSchedulerFlags: "ops"} }, endpoints(pods), logPort)
	plainVIP, opsVIP := plain.Spec.ClusterIP+":514", ops.Spec.ClusterIP+":514"
	waitRealServers(t, ctx, "UDP", plainVIP, masq(pods))
	waitRealServers(t, ctx, "UDP", opsVIP, masq(pods))
	waitGuest(t, ctx, "the ops flag on "+opsVIP, "ipvsadm -Ln -u "+opsVIP+" | grep -q ops")

	const count = 30
	// Without the flag: one endpoint takes every datagram of the sender's port.
	out := sendUDPFromOnePort(t, ctx, sender, 5514, plainVIP, count)
	got := waitInPkts(t, ctx, plainVIP, count)
	busy := 0
	for _, n := range got {
		if n > 0 {
			busy++
		}
	}
	if busy != 1 {
		t.Errorf("without ops, %d datagrams from one port reached %d endpoints (%v), want one", count, busy, got)
	}
	if answers, errs := framework.CountAnswers(out); errs != 0 {
		t.Errorf("without ops, %d of %d datagrams got no answer (%v):\n%s", errs, count, answers, out)
	}

	// With ops: every endpoint gets its share (rr: a third each).
	out = sendUDPFromOnePort(t, ctx, sender, 5515, opsVIP, count)
	got = waitInPkts(t, ctx, opsVIP, count)
	t.Logf("with ops, %d datagrams from one port: packets per endpoint %v", count, got)
	for _, p := range pods {
		if n := got[p.IP+":8080"]; n < count/len(pods)-2 {
			t.Errorf("with ops, endpoint %s got %d of %d datagrams (%v), want about a third", p.IP, n, count, got)
		}
	}
	answers, errs := framework.CountAnswers(out)
	t.Logf("with ops, replies from the Service's address: %v, %d datagrams unanswered", answers, errs)
	if errs != count {
		t.Errorf("with ops, %d of %d replies came back from the Service's address; BEHAVIOR.md says none does:\n%s", count-errs, count, out)
	}
}
