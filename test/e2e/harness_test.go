//go:build e2e

package e2e

import (
	"context"
	"testing"
)

// TestHarnessDirectIPVS validates the testbed itself, without our kube-proxy:
// the guest builds an IPVS NAT service by hand with ipvsadm on a dummy device
// and the pods answer through it in round-robin order, over TCP and UDP.
// VIP 10.250.0.1 is outside the Service range so kube-proxy never owns it.
func TestHarnessDirectIPVS(t *testing.T) {
	ctx := context.Background()
	dumpOnFailure(t)
	pods := addPods(t, ctx, "h", 11, 2)
	guest(t, ctx, `set -e
ip link add kpi-h0 type dummy
ip addr add 10.250.0.1/32 dev kpi-h0
ip link set kpi-h0 up
for p in -t -u; do
  ipvsadm -A $p 10.250.0.1:80 -s rr
  ipvsadm -a $p 10.250.0.1:80 -r `+pods[0].IP+`:8080 -m
  ipvsadm -a $p 10.250.0.1:80 -r `+pods[1].IP+`:8080 -m
done`)
	t.Cleanup(func() {
		_, _ = vm.Sh(context.Background(), "ipvsadm -D -t 10.250.0.1:80; ipvsadm -D -u 10.250.0.1:80; ip link del kpi-h0")
	})
	waitRealServers(t, ctx, "TCP", "10.250.0.1:80", []string{"10.244.0.11:8080 Masq", "10.244.0.12:8080 Masq"})
	expectAnswers(t, ctx, "", "tcp", "10.250.0.1:80", 4, map[string]int{"h-a": 2, "h-b": 2})
	expectAnswers(t, ctx, "", "udp", "10.250.0.1:80", 4, map[string]int{"h-a": 2, "h-b": 2})
}
