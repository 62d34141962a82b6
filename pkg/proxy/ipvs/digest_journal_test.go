package ipvs

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// gatedAddrs holds the resync read at its last step (kube-ipvs0's addresses, read
// after IPVS and the sets) until the test releases it.
type gatedAddrs struct {
	netlink.Handle
	read    chan struct{}
	release chan struct{}
}

func (g *gatedAddrs) ListBindAddress(ctx context.Context, dev string, af ipfamily.Family) ([]net.IP, error) {
	close(g.read)
	<-g.release
	return g.Handle.ListBindAddress(ctx, dev, af)
}

// TestDigestsAfterChangesDuringTheRead: changes of set members made while a resync
// read runs, after it has read the sets, leave the read's digests (corrected by the
// journal) agreeing with the index: the resync compares no member, for both backends.
func TestDigestsAfterChangesDuringTheRead(t *testing.T) {
	for _, backend := range []string{"iptables", "nftables"} {
		t.Run(backend, func(t *testing.T) {
			e := digestEnv(t, backend)
			e.p.resyncSliceKeys = 4
			vsKeys := len(e.p.index.vs)
			g := &gatedAddrs{Handle: e.nl, read: make(chan struct{}), release: make(chan struct{})}
			reader := &KernelReader{IPVS: e.ipvs, Netlink: g}
			if b := nftRuleset(e); b != nil {
				reader.NFTRules = b
			}
			e.p.kernel.Reader = reader
			e.p.goResync = func(f func()) { go f() }
			e.clock.Step(e.opts.SyncPeriod)
			e.mustSync()
			r := e.p.resync
			<-g.read
			// Local endpoints replaced (loop-back members go and come), one added.
			for i := range 3 {
				name := fmt.Sprintf("svc-%d", i)
				e.add(makeSlice("ns", name, name+"-1", tcp("p", 80), endpoint(fmt.Sprintf("10.244.1.%d", 101+i)), endpoint(fmt.Sprintf("10.244.1.%d", 111+i))))
				e.mustSync()
			}
			close(g.release)
			select {
			case <-r.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the resync read did not finish")
			}
			st := e.mustSync()
			if !st.Full || st.Compared != 2*vsKeys || st.IPSetOps+st.NFTablesOps != 0 {
				t.Errorf("the resync after changes during its read: full %v, %d keys compared (want %d), %d ipset / %d nftables writes (want 0)",
					st.Full, st.Compared, 2*vsKeys, st.IPSetOps, st.NFTablesOps)
			}
		})
	}
}
