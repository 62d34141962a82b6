package ipvs

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationNFTQuiet: the nftables backend's form of the same, in the kernel's
// nftables: an address in the family's quiet set has its ICMP port unreachables
// dropped by the filter-output rule, also for nftrules.QuietLinger after the quiet ended, and
// taken out of the set it has them back.
func TestIntegrationNFTQuiet(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		rs, err := nft.NewNetlink(nftrules.Table(), utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			t.Run(string(family), func(t *testing.T) {
				addr := "127.0.0.1"
				if family == v1.IPv6Protocol {
					addr = "::1"
				}
				e := newNFTEnv(t, family, rs)
				e.start()
				if !netns.RefusedUDP(t, addr) {
					t.Fatalf("no refusal from %s before: the test cannot see what the set hides", addr)
				}
				ctx := context.Background()
				if err := e.p.applyRules(ctx, rules.Quiet{Addrs: []string{addr}}, &SyncStats{}, nil); err != nil {
					t.Fatal(err)
				}
				if netns.RefusedUDP(t, addr) {
					t.Errorf("the ICMP port unreachable from %s still reached the client", addr)
				}
				if err := e.p.applyRules(ctx, rules.Loud{Addrs: []string{addr}}, &SyncStats{}, nil); err != nil {
					t.Fatal(err)
				}
				if netns.RefusedUDP(t, addr) {
					t.Errorf("the refusal from %s came back at once: the quiet must linger %v after the edits", addr, nftrules.QuietLinger)
				}
				e.clock.Step(nftrules.QuietLinger)
				if !waitFor(5*time.Second, func() bool { return netns.RefusedUDP(t, addr) }) {
					t.Errorf("no refusal from %s after the address left the set", addr)
				}
			})
		}
	})
}
