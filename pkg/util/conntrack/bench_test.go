package conntrack

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// BenchmarkIntegrationDeleteFlows measures, in a private namespace, what a
// conntrack cleanup after a sync costs with a 10k-entry table: one ListFlows and
// one DeleteFlows of 100 stale service flows (each op is one full dump).
func BenchmarkIntegrationDeleteFlows(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		const entries, stale = 10000, 100
		mk := func(i int) *vnl.ConntrackFlow {
			src := net.IPv4(10, 244, byte(i>>8), byte(i)).To4()
			return &vnl.ConntrackFlow{
				FamilyType: unix.AF_INET,
				Forward:    vnl.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: src, DstIP: net.IPv4(10, 96, 0, 10).To4(), SrcPort: 40000, DstPort: 53},
				Reverse:    vnl.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.IPv4(10, 244, 9, 9).To4(), DstIP: src, SrcPort: 53, DstPort: 40000},
				TimeOut:    300,
			}
		}
		c, err := New(unix.AF_INET)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			for e := 0; e < entries; e++ {
				if err := vnl.ConntrackCreate(vnl.ConntrackTable, unix.AF_INET, mk(e)); err != nil && e < stale {
					b.Fatalf("creating entry %d: %v", e, err)
				}
			}
			b.StartTimer()
			t0 := time.Now()
			flows, err := c.ListFlows(ctx, ProtocolUDP)
			b.ReportMetric(float64(time.Since(t0).Milliseconds()), "ms/list")
			if err != nil || len(flows) != entries {
				b.Fatalf("listed %d of %d: %v", len(flows), entries, err)
			}
			t0 = time.Now()
			n, err := c.DeleteFlows(ctx, flows[:stale])
			b.ReportMetric(float64(time.Since(t0).Milliseconds()), "ms/delete")
			if err != nil || n != stale {
				b.Fatalf("deleted %d of %d: %v", n, stale, err)
			}
			b.StopTimer()
			if err := vnl.ConntrackTableFlush(vnl.ConntrackTable); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}
