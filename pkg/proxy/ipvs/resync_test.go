package ipvs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// gatedReader reads the kernel when GetAll is called, then holds the answer until the
// test releases it: a periodic resync's read that takes long, while syncs go on.
type gatedReader struct {
	ipvs.Interface
	read    chan struct{} // closed once the kernel was read
	release chan struct{}
}

func (g *gatedReader) GetAll(ctx context.Context, af ipfamily.Family, keep func(*ipvs.VirtualServer) bool) ([]ipvs.VirtualServerDump, error) {
	out, err := g.Interface.GetAll(ctx, af, keep)
	close(g.read)
	<-g.release
	return out, err
}

// TestResyncReadsBesideTheSyncLoop: a periodic resync reads the kernel beside the sync
// loop. A change that arrives while the read runs is applied at once by a partial sync;
// the full sync that takes the read trusts what that sync wrote over the read's older
// view of the same keys (it neither re-adds nor removes them), and still repairs the
// drift the read saw elsewhere.
func TestResyncReadsBesideTheSyncLoop(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	web := makeService("ns", "web", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0))
	db := makeService("ns", "db", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 5432, 0))
	e.start(web, makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1")),
		db, makeSlice("ns", "db", "d-1", tcp("p", 5432), endpoint("10.244.2.9")))

	g := &gatedReader{Interface: e.ipvs, read: make(chan struct{}), release: make(chan struct{})}
	e.p.kernel.Reader = &KernelReader{IPVS: g, Netlink: e.nl}
	e.p.goResync = func(f func()) { go f() }

	// Drift the read will see: db's real server deleted by someone else.
	dbVS := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.2"), Protocol: ipvs.TCP, Port: 5432}
	if err := e.ipvs.DeleteRealServer(context.Background(), dbVS, &ipvs.RealServer{Address: net.ParseIP("10.244.2.9"), Port: 5432}); err != nil {
		t.Fatal(err)
	}

	e.clock.Step(e.opts.SyncPeriod)
	if st := e.mustSync(); st.Full {
		t.Fatalf("the sync that starts a resync read must not wait for it: %+v", st)
	}
	r := e.p.resync
	if r == nil {
		t.Fatal("no resync read started after the sync period")
	}
	<-g.read // the read has seen the kernel; its answer is not in yet

	// A change while the read runs: applied at once, by a partial sync.
	e.add(makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2")))
	e.ipvs.ResetOps()
	if st := e.mustSync(); st.Full {
		t.Fatalf("a change waited for the resync read: %+v", st)
	}
	if d := e.ipvs.Dump(); !strings.Contains(d, "-> 10.244.2.2:80") {
		t.Fatalf("the change is not in the kernel while the read runs:\n%s", d)
	}
	if ops := e.ipvs.Ops(); ops[ipvs.OpAddRS] != 1 {
		t.Errorf("partial sync ops %v, want the one real server add", ops)
	}

	close(g.release)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the resync read did not finish")
	}
	e.ipvs.ResetOps()
	st := e.mustSync()
	if !st.Full || st.Failed != 0 {
		t.Fatalf("the sync after the read: %+v, want a full sync without failures", st)
	}
	ops := e.ipvs.Ops()
	// The read's view of web (one real server) is older than the partial sync's
	// write: trusting it would add 10.244.2.2 again (EEXIST). Only db is repaired.
	if ops[ipvs.OpAddRS] != 1 || ops[ipvs.OpDelRS] != 0 || ops[ipvs.OpUpdateRS] != 0 {
		t.Errorf("full sync ops %v, want exactly one real server add (db's repair)", ops)
	}
	d := e.ipvs.Dump()
	for _, want := range []string{"-> 10.244.2.1:80", "-> 10.244.2.2:80", "-> 10.244.2.9:5432"} {
		if !strings.Contains(d, want) {
			t.Errorf("missing %q after the resync:\n%s", want, d)
		}
	}
	if e.p.resync != nil || e.p.journal != nil {
		t.Error("the read and its journal outlived the sync that took them")
	}
}

// TestResyncReadDroppedByFailure: a sync that fails while a resync read runs makes the
// next sync read the kernel itself; the read in flight is never used.
func TestResyncReadDroppedByFailure(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "web", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1")))
	var pending func()
	e.p.goResync = func(f func()) { pending = f }
	e.clock.Step(e.opts.SyncPeriod)
	e.mustSync()
	if pending == nil || e.p.resync == nil {
		t.Fatal("no resync read started")
	}
	e.p.needFull = true // as after a failed sync
	e.ipvs.ResetOps()
	if st := e.mustSync(); !st.Full {
		t.Fatalf("want an inline full sync, got %+v", st)
	}
	if ops := e.ipvs.Ops(); ops[ipvs.OpGetAll] != 1 {
		t.Errorf("ops %v: the full sync must read the kernel itself", ops)
	}
	if e.p.resync != nil {
		t.Error("the read in flight was not dropped")
	}
	pending() // finishes late: nobody takes it
	if st := e.mustSync(); st.Full {
		t.Errorf("a dropped read made a full sync: %+v", st)
	}
}

// countingWrites counts pipelined Writes, single virtual server adds (singles) and
// single real server adds (rsSingles); before runs once, just before the first Write.
type countingWrites struct {
	ipvs.Interface
	writes, singles, rsSingles int
	before                     func()
}

func (c *countingWrites) AddRealServer(ctx context.Context, vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	c.rsSingles++
	return c.Interface.AddRealServer(ctx, vs, rs)
}

func (c *countingWrites) Write(ctx context.Context, ws []ipvs.Write) []error {
	c.writes++
	if c.before != nil {
		c.before()
		c.before = nil
	}
	return c.Interface.Write(ctx, ws)
}

func (c *countingWrites) AddVirtualServer(ctx context.Context, vs *ipvs.VirtualServer) error {
	c.singles++
	return c.Interface.AddVirtualServer(ctx, vs)
}

// TestCreatesArePipelined: the virtual servers a sync creates, with their real
// servers, go to the kernel in one pipelined Write; one the kernel refuses to add
// (someone created it after the sync read the kernel) is taken over one at a time.
func TestCreatesArePipelined(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	c := &countingWrites{Interface: e.ipvs}
	e.p.kernel.IPVS = c
	c.before = func() {
		if err := e.ipvs.AddVirtualServer(context.Background(), &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.2"), Protocol: ipvs.TCP, Port: 80, Scheduler: "lc"}); err != nil {
			t.Fatal(err)
		}
	}
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2")),
		makeService("ns", "b", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "b", "b-1", tcp("p", 80), endpoint("10.244.2.3")))
	if st := e.p.LastSyncStats(); st.Failed != 0 {
		t.Errorf("failed = %d", st.Failed)
	}
	if c.writes != 1 || c.singles != 1 {
		t.Errorf("%d pipelined writes and %d single adds, want 1 and 1 (the taken-over virtual server)", c.writes, c.singles)
	}
	d := e.ipvs.Dump()
	for _, want := range []string{
		"TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0\n  -> 10.244.2.2:80 Masq 1 0 0\n",
		"TCP  10.96.0.2:80 rr\n  -> 10.244.2.3:80 Masq 1 0 0\n",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("missing %q in:\n%s", want, d)
		}
	}
}

// TestRealServerAddsArePipelined: real servers added to virtual servers that stay as
// they are go to the kernel in one pipelined Write with the sync's creates; a real
// server the kernel refuses is held back and the others go in.
func TestRealServerAddsArePipelined(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	a1 := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"))
	b1 := makeSlice("ns", "b", "b-1", tcp("p", 80), endpoint("10.244.2.3"))
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)), a1,
		makeService("ns", "b", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)), b1)
	c := &countingWrites{Interface: e.ipvs}
	e.p.kernel.IPVS = c
	c.before = func() {
		// Someone else adds one of b's new real servers first: the kernel refuses ours.
		vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.2"), Protocol: ipvs.TCP, Port: 80}
		if err := e.ipvs.AddRealServer(context.Background(), vs, &ipvs.RealServer{Address: net.ParseIP("10.244.2.5"), Port: 80, Weight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	e.updateSlice(a1, makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2")))
	e.updateSlice(b1, makeSlice("ns", "b", "b-1", tcp("p", 80), endpoint("10.244.2.3"), endpoint("10.244.2.4"), endpoint("10.244.2.5")))
	e.add(makeService("ns", "c", clusterIP("10.96.0.3"), port("p", v1.ProtocolTCP, 80, 0)))
	e.add(makeSlice("ns", "c", "c-1", tcp("p", 80), endpoint("10.244.2.6")))
	st := e.mustSync()
	if c.writes != 1 || c.singles != 0 || c.rsSingles != 0 {
		t.Errorf("%d pipelined writes, %d single virtual server adds and %d single real server adds, want 1, 0 and 0",
			c.writes, c.singles, c.rsSingles)
	}
	if st.Failed != 1 {
		t.Errorf("failed = %d, want 1 (the real server someone else added)", st.Failed)
	}
	d := e.ipvs.Dump()
	for _, want := range []string{
		"TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0\n  -> 10.244.2.2:80 Masq 1 0 0\n",
		"TCP  10.96.0.2:80 rr\n  -> 10.244.2.3:80 Masq 1 0 0\n  -> 10.244.2.4:80 Masq 1 0 0\n  -> 10.244.2.5:80 Masq 1 0 0\n",
		"TCP  10.96.0.3:80 rr\n  -> 10.244.2.6:80 Masq 1 0 0\n",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("missing %q in:\n%s", want, d)
		}
	}
	if got := e.p.applied.vs[makeVSKey(ipvs.TCP, net.ParseIP("10.96.0.2"), 80)]; got == nil || len(got.rs) != 2 {
		t.Errorf("applied real servers of 10.96.0.2:80: %+v, want the two the kernel took from us", got)
	}
}

// countingRuleset counts the listings and transactions that go through it.
type countingRuleset struct {
	nft.Ruleset
	lists, runs int
}

func (c *countingRuleset) ListElements(ctx context.Context, set string) ([][]string, error) {
	c.lists++
	return c.Ruleset.ListElements(ctx, set)
}

func (c *countingRuleset) Run(ctx context.Context, tx *nft.Transaction) error {
	c.runs++
	return c.Ruleset.Run(ctx, tx)
}

// TestNFTSetListingsOnTheReaderSocket: with a reader's nftables socket, the backend
// lists its sets through it (the periodic resync's listing beside the loop then holds
// back no element write of a change) and writes only through the loop's.
func TestNFTSetListingsOnTheReaderSocket(t *testing.T) {
	fake := nft.NewFakeRuleset(nftrules.Table())
	loop, reader := &countingRuleset{Ruleset: fake}, &countingRuleset{Ruleset: fake}
	e := newTestEnv(t, v1.IPv4Protocol)
	e.opts.RulesBackend = RulesBackendNFTables
	k := e.kernel()
	k.NFTRules, k.IPSet, k.IPTables = loop, nil, nil
	k.Reader = &KernelReader{IPVS: e.ipvs, Netlink: e.nl, NFTRules: reader}
	p, err := NewProxier(context.Background(), e.opts, k, e.clock)
	if err != nil {
		t.Fatal(err)
	}
	p.goResync = func(f func()) { f() }
	e.p = p
	e.start(makeService("ns", "web", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1")))
	e.clock.Step(31 * time.Second)
	if st := e.mustSync(); !st.Full { // the resync's read (run at once here) and its full sync
		t.Fatal("the resync's full sync did not run")
	}
	if reader.lists == 0 || loop.lists != 0 {
		t.Errorf("set listings: %d on the reader's socket, %d on the loop's; want all on the reader's", reader.lists, loop.lists)
	}
	if reader.runs != 0 || loop.runs == 0 {
		t.Errorf("transactions: %d on the reader's socket, %d on the loop's; want all on the loop's", reader.runs, loop.runs)
	}
}

// TestChangesTakenWithAResyncAreNotDrift: the changes queued when a periodic resync's
// read is taken are written, but what they write is not drift: only what someone else
// changed is counted as repaired (kubeproxy_ipvs_drift_repairs_total), for both rules
// backends, with and without slices. Drift on a changed Service's own key the change
// did not write (its cluster IP member) is repaired by the same resync, and counted.
func TestChangesTakenWithAResyncAreNotDrift(t *testing.T) {
	for _, backend := range []string{"iptables", "nftables"} {
		for _, sliceKeys := range []int{0, 3} {
			t.Run(fmt.Sprintf("%s/slice=%d", backend, sliceKeys), func(t *testing.T) {
				e := digestEnv(t, backend)
				e.p.resyncSliceKeys = sliceKeys
				// A new Service and an endpoint change queued; one real server deleted
				// and the changed Service's cluster IP member swapped behind our back.
				e.add(makeService("ns", "new", clusterIP("10.96.0.99"), port("p", v1.ProtocolTCP, 80, 30099)))
				e.add(makeSlice("ns", "new", "new-1", tcp("p", 80), endpoint("10.244.1.99"), endpoint("10.244.3.99")))
				e.add(makeSlice("ns", "svc-1", "svc-1-1", tcp("p", 80), endpoint("10.244.1.2"), endpoint("10.244.2.2"), endpoint("10.244.3.2")))
				vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.3"), Protocol: ipvs.TCP, Port: 80}
				if err := e.ipvs.DeleteRealServer(context.Background(), vs, &ipvs.RealServer{Address: net.ParseIP("10.244.2.3"), Port: 80}); err != nil {
					t.Fatal(err)
				}
				swapClusterIPMember(t, e, "10.96.0.2", "10.96.8.8")
				// With slices, a change between two of them is not drift either.
				between := 0
				e.p.betweenSlices = func() {
					if between++; between == 1 {
						e.add(makeSlice("ns", "svc-5", "svc-5-1", tcp("p", 80), endpoint("10.244.1.6"), endpoint("10.244.3.6")))
					}
				}
				e.clock.Step(e.opts.SyncPeriod)
				st := e.mustSync()
				if sliceKeys > 0 && between < 2 {
					t.Fatalf("%d slices after the first, want several", between)
				}
				if !st.Full || !st.DriftCheck || st.Failed != 0 {
					t.Fatalf("the sync after the sync period: %+v, want a drift-checking full sync without failures", st)
				}
				sets := metrics.SubsystemIPSet
				if backend == "nftables" {
					sets = metrics.SubsystemNFTables
				}
				if got, want := st.driftRepairs(), map[string]int{metrics.SubsystemIPVS: 1, sets: 2}; !maps.Equal(got, want) {
					t.Errorf("drift repairs %v, want %v (the real server and the member swapped behind our back)", got, want)
				}
				if d := kernelMembers(t, e); !strings.Contains(d, "10.96.0.2") || strings.Contains(d, "10.96.8.8") {
					t.Errorf("the swapped cluster IP member was not repaired:\n%s", d)
				}
				d := e.ipvs.Dump()
				wants := []string{"10.96.0.99:80", "-> 10.244.3.99:80", "-> 10.244.3.2:80", "-> 10.244.2.3:80"}
				if sliceKeys > 0 {
					wants = append(wants, "-> 10.244.3.6:80")
				}
				for _, want := range wants {
					if !strings.Contains(d, want) {
						t.Errorf("%q not programmed:\n%s", want, d)
					}
				}
				// Nothing left to repair.
				e.clock.Step(e.opts.SyncPeriod)
				if st := e.mustSync(); !st.Full || len(st.driftRepairs()) != 0 {
					t.Errorf("the next resync: full %v, drift repairs %v, want none", st.Full, st.driftRepairs())
				}
			})
		}
	}
}

// TestResyncChangesSyncFails: when the sync of the changes queued before a resync
// fails, the failure contract holds as for any sync (no full sync on the read, the next
// sync reads the kernel itself), and the change is programmed by it.
func TestResyncChangesSyncFails(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "web", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1")))
	var pending func()
	e.p.goResync = func(f func()) { pending = f }
	e.clock.Step(e.opts.SyncPeriod)
	e.mustSync()
	if pending == nil {
		t.Fatal("no resync read started")
	}
	pending() // the read is done; the next sync takes it

	e.add(makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2")))
	e.p.addrsChanged.Store(true) // the changes' sync reads the node's addresses
	e.nl.InjectError(netlink.OpListLocal, errors.New("injected"))
	if st := e.sync(); st.Err == nil || st.Full {
		t.Fatalf("the changes' sync: %+v, want a failed partial sync", st)
	}
	if !e.p.needFull || e.p.applied != nil {
		t.Fatal("a failed sync must forget the applied state and ask for a full sync")
	}
	e.nl.InjectError(netlink.OpListLocal, nil)
	e.ipvs.ResetOps()
	st := e.mustSync()
	if !st.Full || st.DriftCheck {
		t.Errorf("after the failure: %+v, want a full sync that is not a drift check", st)
	}
	if ops := e.ipvs.Ops(); ops[ipvs.OpGetAll] != 1 {
		t.Errorf("ops %v: the full sync must read the kernel itself", ops)
	}
	if d := e.ipvs.Dump(); !strings.Contains(d, "-> 10.244.2.2:80") {
		t.Errorf("the change is not programmed:\n%s", d)
	}
	if e.p.resync != nil || e.p.journal != nil {
		t.Error("the read outlived the failure")
	}
}

// TestSlowResyncReadsArePaced: a periodic resync read that took longer than a
// third of the sync period puts the next one resyncPace times its duration
// after the full sync that took it, not a sync period.
func TestSlowResyncReadsArePaced(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5")))
	reads := 0
	e.p.goResync = func(f func()) { // a read that takes 60 s
		reads++
		e.clock.Step(60 * time.Second)
		f()
	}
	e.clock.Step(e.opts.SyncPeriod)
	if st := e.mustSync(); !st.Full || reads != 1 {
		t.Fatalf("a sync period after the start: full %v, %d reads; want a full sync over 1 read", st.Full, reads)
	}
	// 3 x 60 s must pass after that full sync; a sync period is not enough.
	e.clock.Step(e.opts.SyncPeriod)
	if st := e.mustSync(); st.Full || reads != 1 {
		t.Errorf("a sync period after a 60 s read: full %v, %d reads; want no read", st.Full, reads)
	}
	e.clock.Step(resyncPace*60*time.Second - e.opts.SyncPeriod)
	if st := e.mustSync(); !st.Full || reads != 2 {
		t.Errorf("3 x 60 s after it: full %v, %d reads; want the next read", st.Full, reads)
	}
}
