package ipvs

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// blockingSave holds every iptables-save until release is closed.
type blockingSave struct {
	iptables.Interface
	release chan struct{}
}

func (b *blockingSave) SaveInto(ctx context.Context, table iptables.Table, buf *bytes.Buffer) error {
	<-b.release
	return b.Interface.SaveInto(ctx, table, buf)
}

// within runs f and fails t if it takes more than 10 s (it is stuck).
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stuck behind the removals")
	}
}

// TestRemovalsBesideTheLoop: with the nftables backend, the removals after the first
// full sync (upstream's iptables-mode leftovers, the iptables backend's chains and
// ipsets) run beside the sync loop: a change made while they are stuck is synced,
// and when they end the next full sync takes their outcome, with upstream's chain
// gone. With the iptables backend they run in the sync itself.
func TestRemovalsBesideTheLoop(t *testing.T) {
	t.Run("nftables", func(t *testing.T) {
		e := newNFTEnv(t, v1.IPv4Protocol, nft.NewFakeRuleset(nftrules.Table()))
		leftover := "*nat\n:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]\nCOMMIT\n"
		if err := e.ipt.RestoreAll(context.Background(), []byte(leftover), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
			t.Fatal(err)
		}
		block := &blockingSave{Interface: e.ipt, release: make(chan struct{})}
		e.p.kernel.IPTables = block
		e.add(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)))
		e.p.OnServiceSynced()
		within(t, e.p.OnEndpointSlicesSynced) // the first full sync: the removals start beside it and block
		if st := e.p.LastSyncStats(); st.Err != nil || !st.Full {
			t.Fatalf("first sync: full %v, err %v", st.Full, st.Err)
		}
		if e.p.beside == nil {
			t.Fatal("no removals beside the loop")
		}
		e.add(makeService("ns", "b", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)))
		within(t, e.p.syncProxyRules) // would hang if the removals held the loop
		if st := e.p.LastSyncStats(); st.Err != nil || st.Full {
			t.Fatalf("change: full %v, err %v", st.Full, st.Err)
		}
		if !strings.Contains(e.ipvs.Dump(), "TCP  10.96.0.2:80 rr") {
			t.Fatalf("the change did not reach IPVS while the removals ran:\n%s", e.ipvs.Dump())
		}
		if e.p.otherModesRemoved || !strings.Contains(e.iptablesSave(), "KUBE-SVC-AAAAAAAAAAAAAAAA") {
			t.Fatal("the removals ended before they were released")
		}
		close(block.release)
		e.p.waitBeside()
		if !e.p.otherModesRemoved || !e.p.otherBackendRemoved || e.p.beside != nil {
			t.Errorf("outcome not taken: leftovers %v, other backend %v", e.p.otherModesRemoved, e.p.otherBackendRemoved)
		}
		if strings.Contains(e.iptablesSave(), "KUBE-SVC-AAAAAAAAAAAAAAAA") {
			t.Errorf("upstream's chain is left:\n%s", e.iptablesSave())
		}
	})
	t.Run("iptables", func(t *testing.T) {
		e := newTestEnv(t, v1.IPv4Protocol)
		e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)))
		if e.p.beside != nil || !e.p.otherModesRemoved {
			t.Errorf("iptables backend: removals beside the loop %v, leftovers removed %v", e.p.beside != nil, e.p.otherModesRemoved)
		}
	})
}
