package conntrack

// Test flows (all inside a private network namespace for the real client):
// A 127.0.0.1:40001 -> 127.0.0.1:5353 udp, B 127.0.0.1:40002 -> 127.0.0.1:5353 udp,
// C 127.0.0.1:40003 -> 127.0.0.2:53 udp DNATed to 127.0.0.1:5353 (a "service" flow),
// T 127.0.0.1:40004 -> 127.0.0.1:8080 tcp.

import (
	"context"
	"net"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	lo      = net.IPv4(127, 0, 0, 1).To4()
	flowA   = Flow{Protocol: ProtocolUDP, OrigSrc: lo, OrigDst: lo, OrigSrcPort: 40001, OrigDstPort: 5353, ReplySrc: lo, ReplySrcPort: 5353}
	flowB   = Flow{Protocol: ProtocolUDP, OrigSrc: lo, OrigDst: lo, OrigSrcPort: 40002, OrigDstPort: 5353, ReplySrc: lo, ReplySrcPort: 5353}
	flowC   = Flow{Protocol: ProtocolUDP, OrigSrc: lo, OrigDst: net.IPv4(127, 0, 0, 2).To4(), OrigSrcPort: 40003, OrigDstPort: 53, ReplySrc: lo, ReplySrcPort: 5353}
	flowT   = Flow{Protocol: ProtocolTCP, OrigSrc: lo, OrigDst: lo, OrigSrcPort: 40004, OrigDstPort: 8080, ReplySrc: lo, ReplySrcPort: 8080}
	flowBad = Flow{Protocol: ProtocolUDP, OrigSrc: lo, OrigDst: lo, OrigSrcPort: 40009, OrigDstPort: 5353}
)

func sortFlows(flows []Flow) []Flow {
	sort.Slice(flows, func(i, j int) bool { return flowKey(flows[i]) < flowKey(flows[j]) })
	return flows
}

func listSorted(t *testing.T, c Interface, protocol uint8) []Flow {
	t.Helper()
	flows, err := c.ListFlows(context.Background(), protocol)
	if err != nil {
		t.Fatalf("ListFlows(%d): %v", protocol, err)
	}
	return sortFlows(flows)
}

// checkContract runs against a table holding exactly flows A, B, C and T.
func checkContract(t *testing.T, c Interface) {
	t.Helper()
	ctx := context.Background()
	if diff := cmp.Diff([]Flow{flowA, flowB, flowC}, listSorted(t, c, ProtocolUDP)); diff != "" {
		t.Fatalf("UDP flows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Flow{flowT}, listSorted(t, c, ProtocolTCP)); diff != "" {
		t.Errorf("TCP flows (-want +got):\n%s", diff)
	}
	if got := listSorted(t, c, ProtocolSCTP); len(got) != 0 {
		t.Errorf("SCTP flows = %v, want none", got)
	}

	// The service flow C and a flow that does not exist: only C goes. Matching is
	// on the original tuple; the reply fields of the argument do not matter.
	cArg := flowC
	cArg.ReplySrc, cArg.ReplySrcPort = nil, 0
	n, err := c.DeleteFlows(ctx, []Flow{cArg, flowBad})
	if err != nil || n != 1 {
		t.Fatalf("DeleteFlows(C, missing) = %d, %v; want 1, nil", n, err)
	}
	if diff := cmp.Diff([]Flow{flowA, flowB}, listSorted(t, c, ProtocolUDP)); diff != "" {
		t.Errorf("UDP flows after deleting C (-want +got):\n%s", diff)
	}
	// A TCP flow with T's ports but protocol UDP must not delete T.
	tAsUDP := flowT
	tAsUDP.Protocol = ProtocolUDP
	if n, err := c.DeleteFlows(ctx, []Flow{tAsUDP, flowC}); err != nil || n != 0 {
		t.Errorf("DeleteFlows(T as UDP, C again) = %d, %v; want 0, nil", n, err)
	}
	if diff := cmp.Diff([]Flow{flowT}, listSorted(t, c, ProtocolTCP)); diff != "" {
		t.Errorf("TCP flows (-want +got):\n%s", diff)
	}
	if n, err := c.DeleteFlows(ctx, []Flow{flowA, flowB}); err != nil || n != 2 {
		t.Errorf("DeleteFlows(A, B) = %d, %v; want 2, nil", n, err)
	}
	if got := listSorted(t, c, ProtocolUDP); len(got) != 0 {
		t.Errorf("UDP flows left: %v", got)
	}
	if n, err := c.DeleteFlows(ctx, nil); err != nil || n != 0 {
		t.Errorf("DeleteFlows(nil) = %d, %v", n, err)
	}
}
