package conntrack

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFakeContract(t *testing.T) {
	f := NewFake()
	for _, fl := range []Flow{flowT, flowC, flowB, flowA} {
		f.AddFlow(fl)
	}
	wantDump := "tcp src=127.0.0.1 dst=127.0.0.1 sport=40004 dport=8080 reply-src=127.0.0.1 reply-sport=8080\n" +
		"udp src=127.0.0.1 dst=127.0.0.1 sport=40001 dport=5353 reply-src=127.0.0.1 reply-sport=5353\n" +
		"udp src=127.0.0.1 dst=127.0.0.1 sport=40002 dport=5353 reply-src=127.0.0.1 reply-sport=5353\n" +
		"udp src=127.0.0.1 dst=127.0.0.2 sport=40003 dport=53 reply-src=127.0.0.1 reply-sport=5353\n"
	if diff := cmp.Diff(wantDump, f.Dump()); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
	checkContract(t, f)
	if diff := cmp.Diff("tcp src=127.0.0.1 dst=127.0.0.1 sport=40004 dport=8080 reply-src=127.0.0.1 reply-sport=8080\n", f.Dump()); diff != "" {
		t.Errorf("Dump after the contract (-want +got):\n%s", diff)
	}
}

func TestFakeInjection(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	f.AddFlow(flowA)
	boom := errors.New("boom")
	f.InjectError(OpDelete, boom)
	if n, err := f.DeleteFlows(ctx, []Flow{flowA}); !errors.Is(err, boom) || n != 0 {
		t.Errorf("DeleteFlows with injected error = %d, %v", n, err)
	}
	if got, _ := f.ListFlows(ctx, ProtocolUDP); len(got) != 1 {
		t.Errorf("failed delete changed the table: %v", got)
	}
	f.InjectError(OpDelete, nil)
	if n, err := f.DeleteFlows(ctx, []Flow{flowA}); err != nil || n != 1 {
		t.Errorf("DeleteFlows = %d, %v", n, err)
	}
	if diff := cmp.Diff(map[string]int{OpDelete: 2, OpList: 1}, f.Ops()); diff != "" {
		t.Errorf("Ops (-want +got):\n%s", diff)
	}
}
