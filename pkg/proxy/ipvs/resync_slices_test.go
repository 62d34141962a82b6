package ipvs

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// TestResyncInSlices: a periodic resync compares its keys a slice at a time, takes a
// change that arrives between two slices in the next one (not after the whole
// resync), and leaves the kernel exactly as a resync that compares everything at once
// does, drift repaired, for both rules backends.
func TestResyncInSlices(t *testing.T) {
	for _, backend := range []string{"iptables", "nftables"} {
		t.Run(backend, func(t *testing.T) {
			newEnv := func(sliceKeys int) *testEnv {
				var e *testEnv
				if backend == "nftables" {
					e = newNFTEnv(t, v1.IPv4Protocol, nft.NewFakeRuleset(nftrules.Table()))
				} else {
					e = newTestEnv(t, v1.IPv4Protocol)
				}
				e.p.resyncSliceKeys = sliceKeys
				var objs []any
				for i := range 8 {
					name := fmt.Sprintf("svc-%d", i)
					objs = append(objs, makeService("ns", name, clusterIP(fmt.Sprintf("10.96.0.%d", i+1)), port("p", v1.ProtocolTCP, 80, 0)),
						makeSlice("ns", name, name+"-1", tcp("p", 80), endpoint(fmt.Sprintf("10.244.1.%d", i+1)), endpoint(fmt.Sprintf("10.244.2.%d", i+1))))
				}
				e.start(objs...)
				return e
			}
			// Drift in every kind of key, spread over the key space.
			tamper := func(e *testEnv) {
				ctx := context.Background()
				vs := func(i int) *ipvs.VirtualServer {
					return &ipvs.VirtualServer{Address: net.ParseIP(fmt.Sprintf("10.96.0.%d", i)), Protocol: ipvs.TCP, Port: 80}
				}
				for _, err := range []error{
					e.ipvs.DeleteVirtualServer(ctx, vs(2)),
					e.ipvs.DeleteRealServer(ctx, vs(5), &ipvs.RealServer{Address: net.ParseIP("10.244.2.5"), Port: 80}),
					e.ipvs.AddVirtualServer(ctx, &ipvs.VirtualServer{Address: net.ParseIP("10.96.9.9"), Protocol: ipvs.TCP, Port: 80, Scheduler: "rr"}),
					e.nl.UnbindAddress(ctx, net.ParseIP("10.96.0.7"), netlink.DefaultDummyDevice),
				} {
					if err != nil {
						t.Fatal(err)
					}
				}
				swapClusterIPMember(t, e, "10.96.0.4", "10.96.8.8")
			}
			change := makeSlice("ns", "svc-3", "svc-3-1", tcp("p", 80), endpoint("10.244.1.4"), endpoint("10.244.2.4"), endpoint("10.244.3.4"))
			kernel := func(e *testEnv) string {
				s := e.ipvs.Dump() + e.nl.Dump()
				if backend == "nftables" {
					return s + nftLines(t, nftRuleset(e), "element ")
				}
				return s + e.ipset.Dump()
			}

			sliced := newEnv(4)
			tamper(sliced)
			slices := 0
			sliced.p.betweenSlices = func() {
				slices++
				switch slices {
				case 1:
					sliced.add(change)
				case 2:
					if d := sliced.ipvs.Dump(); !strings.Contains(d, "-> 10.244.3.4:80") {
						t.Errorf("a change made after the first slice was not written by the next one:\n%s", d)
					}
				}
			}
			sliced.clock.Step(sliced.opts.SyncPeriod)
			st := sliced.mustSync()
			if !st.Full || st.Slices < 5 || st.Slices != slices+1 {
				t.Errorf("resync: full %v in %d slices (%d between), want a full sync in many slices", st.Full, st.Slices, slices)
			}
			if st.Services != 1 {
				t.Errorf("the resync rebuilt %d Services, want the one changed", st.Services)
			}

			whole := newEnv(0)
			tamper(whole)
			whole.add(change)
			whole.clock.Step(whole.opts.SyncPeriod)
			if st := whole.mustSync(); !st.Full || st.Slices != 1 {
				t.Errorf("unsliced resync: full %v in %d slices, want 1", st.Full, st.Slices)
			}
			got, want := kernel(sliced), kernel(whole)
			if got != want {
				t.Errorf("after a sliced resync the kernel holds\n%s\nafter one that compares everything at once\n%s", got, want)
			}
			for _, drift := range []string{"10.96.9.9", "10.96.8.8"} {
				if strings.Contains(got, drift) {
					t.Errorf("drift %s survived the resync", drift)
				}
			}
			for _, repaired := range []string{"10.96.0.2:80", "-> 10.244.2.5:80", "10.96.0.7", "10.96.0.4"} {
				if !strings.Contains(got, repaired) {
					t.Errorf("%s was not repaired", repaired)
				}
			}

			// The next sync is a partial one with nothing to do: no walk outlived the resync.
			sliced.ipvs.ResetOps()
			if st := sliced.mustSync(); st.Full || st.IPVSOps != 0 || sliced.p.slicer != nil {
				t.Errorf("after the resync: %+v, slicer %v", st, sliced.p.slicer)
			}
		})
	}
}

// TestRulesCheckedBesideTheLoop: with the iptables backend a periodic resync checks
// our chains and jumps beside the loop (rules_beside.go). The first check writes the
// rules and reads back their printed form; later checks only read; a flushed chain or
// a deleted jump is repaired there; the sync after the read writes nothing to
// iptables. When the loop wrote our chains while the read ran, the check leaves them
// to that full sync, which writes them in the loop as before.
func TestRulesCheckedBesideTheLoop(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	svc := func(mods ...func(*v1.Service)) *v1.Service {
		return makeService("ns", "web", append([]func(*v1.Service){clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)}, mods...)...)
	}
	e.start(svc(), makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.1.1")))
	want := e.iptablesSave()
	ctx := context.Background()
	var besideRestores, loopRestores int
	// The read runs when the test says: the restores it makes are told apart from
	// the loop's by counting around it.
	var pending func()
	e.p.goResync = func(f func()) { pending = f }
	resync := func(between func()) SyncStats {
		t.Helper()
		e.clock.Step(e.opts.SyncPeriod)
		e.mustSync() // starts the read
		if pending == nil {
			t.Fatal("no resync read started")
		}
		if between != nil {
			between()
		}
		e.ipt.ResetCounters()
		pending()
		pending = nil
		besideRestores = e.ipt.Counters().Restores
		e.ipt.ResetCounters()
		st := e.mustSync()
		if !st.Full {
			t.Fatalf("the sync after the read: %+v, want the full one", st)
		}
		loopRestores = e.ipt.Counters().Restores
		return st
	}

	resync(nil)
	if besideRestores != 1 || loopRestores != 0 {
		t.Errorf("first resync: %d restores beside the loop, %d in it; want the one that learns the printed form, none", besideRestores, loopRestores)
	}
	resync(nil)
	if besideRestores != 0 || loopRestores != 0 {
		t.Errorf("resync with nothing to repair: %d restores beside, %d in the loop; want none", besideRestores, loopRestores)
	}

	// Tampering: KUBE-SERVICES flushed, a jump deleted.
	if err := e.ipt.RestoreAll(ctx, []byte("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n"), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
		t.Fatal(err)
	}
	if err := e.ipt.DeleteRule(ctx, "filter", "INPUT", "-m", "comment", "--comment", "kubernetes ipvs access filter", "-j", "KUBE-IPVS-FILTER"); err != nil {
		t.Fatal(err)
	}
	if e.iptablesSave() == want {
		t.Fatal("the tampering changed nothing")
	}
	resync(nil)
	if besideRestores != 1 || loopRestores != 0 {
		t.Errorf("resync after tampering: %d restores beside, %d in the loop; want the one repair beside", besideRestores, loopRestores)
	}
	if got := e.iptablesSave(); got != want {
		t.Errorf("after the repair beside the loop:\n%s\nwant\n%s", got, want)
	}

	// The loop writes our chains while the read runs (a scheduler change's quiet
	// rules): the check stands back, the full sync writes them.
	resync(func() {
		e.add(svc(annotate(proxy.AnnotationScheduler, "lc")))
		e.mustSync()
	})
	if besideRestores != 0 || loopRestores != 1 {
		t.Errorf("resync after a write in the loop: %d restores beside, %d in the loop; want none and the full sync's", besideRestores, loopRestores)
	}
	if got := e.iptablesSave(); got != want {
		t.Errorf("after that resync:\n%s\nwant\n%s", got, want)
	}
}

// swapClusterIPMember replaces the cluster IP member of TCP port 80 at from by one at
// to behind the proxier's back, in the ipset or the nftables set of e's backend.
func swapClusterIPMember(t *testing.T, e *testEnv, from, to string) {
	t.Helper()
	ctx := context.Background()
	if b := nftRuleset(e); b != nil {
		tx := nft.NewTransaction()
		tx.DeleteElements("ip-cluster-ip", []string{from, "tcp", "80"})
		tx.AddElements("ip-cluster-ip", []string{to, "tcp", "80"})
		if err := b.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
		return
	}
	tx := &ipset.Transaction{}
	tx.Del("KUBE-CLUSTER-IP", from+",tcp:80")
	tx.Add("KUBE-CLUSTER-IP", to+",tcp:80")
	if err := e.ipset.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
}
