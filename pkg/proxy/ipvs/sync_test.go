package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

func manyServices(n int) []any {
	var objs []any
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		objs = append(objs,
			makeService("ns", name, clusterIP(ip), port("p", v1.ProtocolTCP, 80, 0)),
			makeSlice("ns", name, name+"-1", tcp("p", 8080),
				endpoint(fmt.Sprintf("10.244.2.%d", i%250+1)), endpoint(fmt.Sprintf("10.244.3.%d", i%250+1))))
	}
	return objs
}

// TestFullSyncReadsIPVSInBulk: a full sync reads IPVS with one bulk read, not
// one destination dump per virtual server (10k round trips at 10k Services).
func TestFullSyncReadsIPVSInBulk(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(manyServices(1000)...)
	e.ipvs.ResetOps()
	e.p.needFull = true
	if st := e.mustSync(); !st.Full {
		t.Fatal("expected a full sync")
	}
	if ops := e.ipvs.Ops(); ops[ipvs.OpGetAll] != 1 || ops[ipvs.OpListRS] != 0 || ops[ipvs.OpListVS] != 0 {
		t.Errorf("IPVS ops of a full sync with 1,000 virtual servers = %v, want one GetAll and no other dump", ops)
	}
}

// TestIncrementalSyncIsProportionalToChange: with 1,000 Services, changing one
// endpoint issues O(1) kernel operations and no kernel dump.
func TestIncrementalSyncIsProportionalToChange(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(manyServices(1000)...)
	if got := strings.Count(e.ipvs.Dump(), "\n  -> "); got != 2000 {
		t.Fatalf("expected 2000 real servers after the full sync, got %d", got)
	}
	e.ipvs.ResetOps()
	e.ipset.ResetCounters()
	e.ipt.ResetCounters()
	e.nl.ResetOps()

	old := makeSlice("ns", "svc-7", "svc-7-1", tcp("p", 8080), endpoint("10.244.2.8"), endpoint("10.244.3.8"))
	cur := makeSlice("ns", "svc-7", "svc-7-1", tcp("p", 8080), endpoint("10.244.2.8"), endpoint("10.244.3.8"), endpoint("10.244.4.8"))
	e.updateSlice(old, cur)
	st := e.mustSync()
	if st.Full {
		t.Fatalf("expected a partial sync")
	}
	if st.Services != 1 {
		t.Errorf("rebuilt %d services, want 1", st.Services)
	}
	ops := e.ipvs.Ops()
	if ops[ipvs.OpAddRS] != 1 || ops[ipvs.OpListVS] != 0 || ops[ipvs.OpListRS] != 0 || ops[ipvs.OpGetAll] != 0 {
		t.Errorf("IPVS ops = %v, want exactly one AddRealServer and no dumps", ops)
	}
	total := 0
	for _, n := range ops {
		total += n
	}
	if total > 3 {
		t.Errorf("%d IPVS operations for a one-endpoint change, want <= 3: %v", total, ops)
	}
	if c := e.ipt.Counters(); c.Restores != 0 {
		t.Errorf("iptables restored %d times for an endpoint change, want 0", c.Restores)
	}
	if e.ipset.Applies() > 1 {
		t.Errorf("ipset applied %d batches, want <= 1", e.ipset.Applies())
	}
	if !strings.Contains(e.ipvs.Dump(), "-> 10.244.4.8:8080 Masq 1 0 0") {
		t.Errorf("new real server missing")
	}
}

// TestIPSetRefusalHoldsBackOnlyItsService: ipset refusing a member holds back the
// Service that owns it (its virtual server waits for its sets), the sync completes, the
// other Services' changes land, and the held-back one is retried with backoff until it
// lands.
func TestIPSetRefusalHoldsBackOnlyItsService(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))

	fail := errors.New("injected: ipset refused")
	e.ipset.InjectError = func(_ int, line string) error {
		if strings.Contains(line, "10.96.0.2") {
			return fail
		}
		return nil
	}
	e.add(makeService("ns", "b", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)))
	e.add(makeSlice("ns", "b", "b-1", tcp("p", 80), endpoint("10.244.2.2")))
	e.add(makeService("ns", "c", clusterIP("10.96.0.3"), port("p", v1.ProtocolTCP, 80, 0)))
	e.add(makeSlice("ns", "c", "c-1", tcp("p", 80), endpoint("10.244.2.3")))
	e.add(makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.9")))
	st := e.mustSync()
	if st.Failed == 0 {
		t.Fatalf("no failure recorded")
	}
	if e.p.needFull || e.p.applied == nil {
		t.Fatalf("an object's failure must not make the proxier forget its state")
	}
	diff(t, "ipvs", `
TCP  10.96.0.1:80 rr
  -> 10.244.2.1:80 Masq 1 0 0
  -> 10.244.2.9:80 Masq 1 0 0
TCP  10.96.0.3:80 rr
  -> 10.244.2.3:80 Masq 1 0 0
`, e.ipvs.Dump())
	held := e.p.HeldBack()
	if len(held) == 0 {
		t.Fatalf("nothing listed as held back")
	}
	for _, h := range held {
		if len(h.Services) != 1 || h.Services[0] != "ns/b" || h.Reason != heldBackIPSet {
			t.Errorf("held back %+v, want only ns/b for ipset_error", h)
		}
	}
	if e.p.retryWait != time.Second {
		t.Errorf("first retry in %v, want 1s", e.p.retryWait)
	}

	// Still refused: the retry backs off (1 s, 2 s, ...).
	e.clock.Step(time.Second)
	e.mustSync()
	if e.p.retryWait != 2*time.Second {
		t.Errorf("second retry in %v, want 2s", e.p.retryWait)
	}
	// Before it is due, a sync for something else does not retry it.
	e.ipset.ResetCounters()
	e.add(makeSlice("ns", "c", "c-1", tcp("p", 80), endpoint("10.244.2.4")))
	e.mustSync()
	if strings.Contains(e.ipset.Dump(), "10.96.0.2") {
		t.Errorf("held-back member programmed while still refused")
	}

	e.ipset.InjectError = nil
	e.clock.Step(2 * time.Second)
	if st := e.mustSync(); st.Full {
		t.Fatalf("the retry should be a partial sync")
	}
	if !strings.Contains(e.ipvs.Dump(), "TCP  10.96.0.2:80 rr\n  -> 10.244.2.2:80 Masq 1 0 0") {
		t.Errorf("held-back Service not programmed after the fault cleared:\n%s", e.ipvs.Dump())
	}
	if !strings.Contains(e.ipset.Dump(), "10.96.0.2,tcp:80") {
		t.Errorf("held-back member missing after the fault cleared")
	}
	if len(e.p.HeldBack()) != 0 || e.p.retryWait != 0 {
		t.Errorf("still held back after success: %+v", e.p.HeldBack())
	}
}

// TestGlobalFailureRetriesWithFullSync: a failure no object explains (the base
// iptables rules refused) fails the sync, schedules a retry and makes the next sync a
// full one that repairs everything.
func TestGlobalFailureRetriesWithFullSync(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))

	fail := errors.New("injected: iptables-restore failed")
	e.ipt.InjectRestoreError = func([]byte) error { return fail }
	// A first node port makes KUBE-NODE-PORT-TCP non-empty: the rules change.
	e.add(makeService("ns", "b", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 30080)))
	e.add(makeSlice("ns", "b", "b-1", tcp("p", 80), endpoint("10.244.2.2")))
	st := e.sync()
	if st.Err == nil || !errors.Is(st.Err, fail) {
		t.Fatalf("sync error = %v, want the injected failure", st.Err)
	}
	if !e.p.needFull || e.p.applied != nil {
		t.Fatalf("after a failure the proxier must forget its state and force a full sync")
	}
	if e.p.retryDelay <= 0 {
		t.Fatalf("no retry scheduled")
	}
	// The half-done sync must not have programmed b's virtual server before its rules.
	if strings.Contains(e.ipvs.Dump(), ":30080") {
		t.Errorf("virtual server programmed although the rules failed")
	}

	e.ipt.InjectRestoreError = nil
	st = e.mustSync()
	if !st.Full {
		t.Fatalf("sync after a failure must be full")
	}
	diff(t, "ipvs", `
TCP  10.96.0.1:80 rr
  -> 10.244.2.1:80 Masq 1 0 0
TCP  10.96.0.2:80 rr
  -> 10.244.2.2:80 Masq 1 0 0
TCP  192.168.0.10:30080 rr
  -> 10.244.2.2:80 Masq 1 0 0
TCP  192.168.1.10:30080 rr
  -> 10.244.2.2:80 Masq 1 0 0
`, e.ipvs.Dump())
	if e.p.retryDelay != 0 {
		t.Errorf("retry delay not reset after success")
	}
}

// TestIPVSRefusedRealServerIsolated: IPVS refusing one real server leaves the
// Service's other real servers and every other change in place; the refused one lands
// once the kernel takes it.
func TestIPVSRefusedRealServerIsolated(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start()
	e.ipvs.InjectError(ipvs.OpAddRS, errors.New("injected"))
	e.add(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)))
	e.add(makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))
	st := e.mustSync()
	if st.Failed == 0 {
		t.Fatalf("expected the injected error to be recorded")
	}
	diff(t, "ipvs", "TCP  10.96.0.1:80 rr", e.ipvs.Dump())
	e.ipvs.InjectError(ipvs.OpAddRS, nil)
	e.clock.Step(time.Second)
	if st := e.mustSync(); st.Full {
		t.Fatalf("expected a partial retry")
	}
	diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0", e.ipvs.Dump())
}

// TestTamperingRepairedOnFullSync: what someone else removes comes back on the next
// full sync (every syncPeriod).
func TestTamperingRepairedOnFullSync(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))
	wantIPVS, wantSets, wantIPT, wantAddr := e.ipvs.Dump(), e.ipset.Dump(), e.iptablesSave(), e.nl.Dump()

	ctx := context.Background()
	vss, _ := e.ipvs.GetVirtualServers(ctx)
	if err := e.ipvs.DeleteVirtualServer(ctx, vss[0]); err != nil {
		t.Fatal(err)
	}
	tx := &ipset.Transaction{}
	tx.Flush("KUBE-CLUSTER-IP")
	if err := e.ipset.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := e.ipt.FlushChain(ctx, "nat", "KUBE-SERVICES"); err != nil {
		t.Fatal(err)
	}
	if err := e.nl.UnbindAddress(ctx, net.ParseIP("10.96.0.1"), netlink.DefaultDummyDevice); err != nil {
		t.Fatal(err)
	}

	// A partial sync trusts its memory...
	if st := e.mustSync(); st.Full {
		t.Fatalf("expected a partial sync before the period")
	}
	// ...the periodic full sync reads the kernel and repairs.
	e.clock.Step(31 * time.Second)
	st := e.mustSync()
	if !st.Full || !st.DriftCheck {
		t.Fatalf("expected a drift-checking full sync after the sync period, got %+v", st)
	}
	if st.IPVSOps == 0 || st.IPSetOps == 0 || st.AddressOps == 0 {
		t.Errorf("repairs not counted: %+v", st)
	}
	diff(t, "ipvs", wantIPVS, e.ipvs.Dump())
	diff(t, "ipsets", wantSets, e.ipset.Dump())
	diff(t, "iptables", wantIPT, e.iptablesSave())
	diff(t, "addresses", wantAddr, e.nl.Dump())
}

// TestAdoptsUpstreamStateWithoutChurn: the kernel state upstream kube-proxy leaves is
// adopted: no real server is removed and re-added, no virtual server recreated.
func TestAdoptsUpstreamStateWithoutChurn(t *testing.T) {
	first := newTestEnv(t, v1.IPv4Protocol)
	objs := []any{
		makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 30080)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.1.2")),
		makeService("ns", "d", clusterIP("10.96.0.53"), port("dns", v1.ProtocolUDP, 53, 0)),
		makeSlice("ns", "d", "d-1", udp("dns", 53), endpoint("10.244.2.53")),
	}
	first.start(objs...)

	// A new daemon over the same kernel (the fixture upstream leaves is the same state).
	second := newTestEnv(t, v1.IPv4Protocol)
	second.ipvs, second.ipset, second.ipt, second.nl, second.sc = first.ipvs, first.ipset, first.ipt, first.nl, first.sc
	p, err := NewProxier(context.Background(), second.opts, second.kernel(), second.clock)
	if err != nil {
		t.Fatal(err)
	}
	second.p = p
	before := first.ipvs.Dump()
	first.ipvs.ResetOps()
	second.start(objs...)
	ops := first.ipvs.Ops()
	for _, op := range []string{ipvs.OpAddVS, ipvs.OpDelVS, ipvs.OpAddRS, ipvs.OpDelRS, ipvs.OpUpdateRS, ipvs.OpUpdateVS} {
		if ops[op] != 0 {
			t.Errorf("adoption issued %d %s, want 0 (ops %v)", ops[op], op, ops)
		}
	}
	diff(t, "ipvs", before, first.ipvs.Dump())
}

// TestStuckWeightZeroRepairedAfterRestart (kubernetes#99162): a real server left at
// weight 0 by a previous run is restored to weight 1 when its endpoint is ready.
func TestStuckWeightZeroRepairedAfterRestart(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	ctx := context.Background()
	vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.1"), Protocol: "TCP", Port: 80, Scheduler: "rr"}
	if err := e.ipvs.AddVirtualServer(ctx, vs); err != nil {
		t.Fatal(err)
	}
	if err := e.ipvs.AddRealServer(ctx, vs, &ipvs.RealServer{Address: net.ParseIP("10.244.2.1"), Port: 80, Weight: 0}); err != nil {
		t.Fatal(err)
	}
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))
	diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0", e.ipvs.Dump())
}

// TestGracefulTermination covers the drain rules (kubernetes#57841, #71514).
func TestGracefulTermination(t *testing.T) {
	svc := makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0))
	vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.1"), Protocol: "TCP", Port: 80, Scheduler: "rr"}
	two := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2"))

	t.Run("terminating endpoint drains at weight 0, then goes when its pod is gone", func(t *testing.T) {
		e := newTestEnv(t, v1.IPv4Protocol)
		e.start(svc, two)
		term := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2", terminating(true)))
		e.updateSlice(two, term)
		e.mustSync()
		diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0\n  -> 10.244.2.2:80 Masq 0 0 0", e.ipvs.Dump())
		gone := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"))
		e.updateSlice(term, gone)
		e.mustSync()
		diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0", e.ipvs.Dump())
	})

	t.Run("vanished endpoint drains until its connections end", func(t *testing.T) {
		e := newTestEnv(t, v1.IPv4Protocol)
		e.start(svc, two)
		setConns(t, e, vs, "10.244.2.2", 3, 1)
		one := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"))
		e.updateSlice(two, one)
		e.mustSync()
		diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0\n  -> 10.244.2.2:80 Masq 0 3 1", e.ipvs.Dump())
		e.clock.Step(3 * time.Second)
		e.mustSync()
		if !strings.Contains(e.ipvs.Dump(), "10.244.2.2") {
			t.Fatalf("real server with connections deleted early")
		}
		setConns(t, e, vs, "10.244.2.2", 0, 0)
		e.clock.Step(3 * time.Second)
		e.mustSync()
		diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0", e.ipvs.Dump())
	})

	t.Run("drain is bounded by the drain timeout", func(t *testing.T) {
		e := newTestEnv(t, v1.IPv4Protocol)
		e.start(svc, two)
		setConns(t, e, vs, "10.244.2.2", 5, 0)
		one := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"))
		e.updateSlice(two, one)
		e.mustSync()
		e.clock.Step(defaultDrainTimeout + time.Second)
		e.mustSync()
		diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0", e.ipvs.Dump())
	})

	t.Run("endpoint that comes back is restored to weight 1", func(t *testing.T) {
		e := newTestEnv(t, v1.IPv4Protocol)
		e.start(svc, two)
		setConns(t, e, vs, "10.244.2.2", 5, 0)
		one := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"))
		e.updateSlice(two, one)
		e.mustSync()
		e.updateSlice(one, two)
		e.mustSync()
		diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0\n  -> 10.244.2.2:80 Masq 1 5 0", e.ipvs.Dump())
		if len(e.p.draining) != 0 {
			t.Errorf("restored real server still draining")
		}
	})

	t.Run("old kernels delete at once (conn_reuse_mode, kubernetes#81775)", func(t *testing.T) {
		e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) { o.KernelVersion = "5.4.0-150-generic" })
		if v, _ := e.sc.GetSysctl("net/ipv4/vs/conn_reuse_mode"); v != 0 {
			t.Errorf("conn_reuse_mode = %d, want 0 on 5.4", v)
		}
		e.start(svc, two)
		setConns(t, e, vs, "10.244.2.2", 5, 0)
		term := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2", terminating(true)))
		e.updateSlice(two, term)
		e.mustSync()
		diff(t, "ipvs", "TCP  10.96.0.1:80 rr\n  -> 10.244.2.1:80 Masq 1 0 0", e.ipvs.Dump())
	})

	t.Run("UDP real servers and their conntrack flows go at once", func(t *testing.T) {
		e := newTestEnv(t, v1.IPv4Protocol)
		dns := makeService("ns", "d", clusterIP("10.96.0.53"), port("dns", v1.ProtocolUDP, 53, 0))
		s2 := makeSlice("ns", "d", "d-1", udp("dns", 53), endpoint("10.244.2.1"), endpoint("10.244.2.2"))
		e.start(dns, s2)
		for i, rs := range []string{"10.244.2.1", "10.244.2.2"} {
			e.ct.AddFlow(conntrack.Flow{Protocol: 17, OrigSrc: net.ParseIP("10.244.1.9"), OrigSrcPort: uint16(4000 + i),
				OrigDst: net.ParseIP("10.96.0.53"), OrigDstPort: 53, ReplySrc: net.ParseIP(rs), ReplySrcPort: 53})
		}
		// An unrelated flow stays.
		e.ct.AddFlow(conntrack.Flow{Protocol: 17, OrigSrc: net.ParseIP("10.244.1.9"), OrigSrcPort: 5000,
			OrigDst: net.ParseIP("8.8.8.8"), OrigDstPort: 53, ReplySrc: net.ParseIP("8.8.8.8"), ReplySrcPort: 53})
		s1 := makeSlice("ns", "d", "d-1", udp("dns", 53), endpoint("10.244.2.1"))
		e.updateSlice(s2, s1)
		e.ct.ResetOps()
		e.mustSync()
		diff(t, "ipvs", "UDP  10.96.0.53:53 rr\n  -> 10.244.2.1:53 Masq 1 0 0", e.ipvs.Dump())
		// Only UDP flows are read: no SCTP virtual server changed.
		if n := e.ct.Ops()[conntrack.OpList]; n != 1 {
			t.Errorf("a UDP endpoint change listed the conntrack table %d times, want once (UDP only)", n)
		}
		flows, _ := e.ct.ListFlows(context.Background(), 17)
		if len(flows) != 2 {
			t.Fatalf("flows after cleanup = %v, want the live endpoint's and the unrelated one", e.ct.Dump())
		}
		for _, f := range flows {
			if f.ReplySrc.String() == "10.244.2.2" {
				t.Errorf("stale flow to the removed endpoint survived: %s", e.ct.Dump())
			}
		}
	})
}

// setConns sets the connection counters the kernel reports for a real server on :80.
func setConns(t *testing.T, e *testEnv, vs *ipvs.VirtualServer, ip string, active, inactive int) {
	t.Helper()
	if err := e.ipvs.SetRealServerConnections(vs, &ipvs.RealServer{Address: net.ParseIP(ip), Port: 80}, active, inactive); err != nil {
		t.Fatal(err)
	}
}

// TestServiceDeletionLeavesNothing: deleting the last Service leaves no virtual
// server, address, ipset member or service rule.
func TestServiceDeletionLeavesNothing(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	svc := makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 30080), externalIPs("203.0.113.5"), lbIngress("203.0.113.6"), sourceRanges("198.18.0.0/24"))
	sl := makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.1.2"))
	e.start(svc, sl)
	if e.ipvs.Dump() == "" || e.setMembers() == "" {
		t.Fatalf("nothing programmed")
	}
	e.deleteService(svc)
	e.deleteSlice(sl)
	e.mustSync()
	diff(t, "ipvs", "", e.ipvs.Dump())
	diff(t, "ipset members", "", e.setMembers())
	diff(t, "addresses", "eth0: 192.168.0.10 fd00:1::10\neth1: 192.168.1.10\nkube-ipvs0 (dummy):\nlo: 127.0.0.1 ::1", e.nl.Dump())
	if strings.Contains(e.iptablesSave(), "KUBE-IPVS-OUT-FILTER -s") {
		t.Errorf("LB out-filter rule left behind")
	}
}

// TestWrongTypeSetReplaced (kubernetes#77265): a set of the wrong type left by an
// older version is replaced while the rules keep referencing a complete set.
func TestWrongTypeSetReplaced(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	ctx := context.Background()
	tx := &ipset.Transaction{}
	tx.Create(&ipset.Set{Name: "KUBE-LOOP-BACK", Type: ipset.HashIPPort, Family: "inet", HashSize: 1024, MaxElem: 65536})
	tx.Add("KUBE-LOOP-BACK", "10.244.1.2,tcp:80")
	if err := e.ipset.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	// An old rule in our chain still uses it; it goes when our chains are rewritten.
	old := "*nat\n:KUBE-POSTROUTING - [0:0]\n-A KUBE-POSTROUTING -m set --match-set KUBE-LOOP-BACK dst,dst -j MASQUERADE\nCOMMIT\n"
	if err := e.ipt.RestoreAll(ctx, []byte(old), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
		t.Fatal(err)
	}
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.1.2")))
	all, _ := e.ipset.SaveAll(ctx)
	lb := all["KUBE-LOOP-BACK"]
	if lb == nil || lb.Type != ipset.HashIPPortIP {
		t.Fatalf("KUBE-LOOP-BACK not replaced: %+v", lb)
	}
	if len(lb.Entries) != 1 || lb.Entries[0] != "10.244.1.2,tcp:80,10.244.1.2" {
		t.Errorf("KUBE-LOOP-BACK entries = %v", lb.Entries)
	}
	for name := range all {
		if strings.Contains(name, "-T") && strings.HasPrefix(name, "KUBE-LOOP-BACK") {
			t.Errorf("temporary set %s left behind", name)
		}
	}
}

// TestIPv6SetNames: the IPv6 proxier uses KUBE-6- sets cut to 31 characters.
func TestIPv6SetNames(t *testing.T) {
	e := newTestEnv(t, v1.IPv6Protocol)
	svc := makeService("ns", "a", clusterIP("fd00:96::1"), port("p", v1.ProtocolSCTP, 80, 30080), lbIngress("2001:db8::5"), sourceRanges("2001:db8:1::/64"), etpLocal(31000))
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
	e.start(svc, makeSlice("ns", "a", "a-1", []slicePort{{"p", v1.ProtocolSCTP, 80}}, endpoint("fd00:244::1:5")))
	all, _ := e.ipset.SaveAll(context.Background())
	for name := range all {
		if len(name) > 31 || !strings.HasPrefix(name, "KUBE-6-") {
			t.Errorf("set %q: want KUBE-6- prefix and at most 31 characters", name)
		}
	}
	for _, want := range []string{"KUBE-6-LOAD-BALANCER-SOURCE-CID", "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"} {
		if all[want] == nil {
			t.Errorf("set %s missing", want)
		}
	}
	diff(t, "ipset members", `
KUBE-6-CLUSTER-IP fd00:96::1,sctp:80
KUBE-6-HEALTH-CHECK-NODE-PORT 31000
KUBE-6-IPVS-IPS 2001:db8::5
KUBE-6-IPVS-IPS fd00:96::1
KUBE-6-LOAD-BALANCER 2001:db8::5,sctp:80
KUBE-6-LOAD-BALANCER-FW 2001:db8::5,sctp:80
KUBE-6-LOAD-BALANCER-LOCAL 2001:db8::5,sctp:80
KUBE-6-LOAD-BALANCER-SOURCE-CID 2001:db8::5,sctp:80,2001:db8:1::/64
KUBE-6-LOOP-BACK fd00:244::1:5,sctp:80,fd00:244::1:5
KUBE-6-NODE-PORT-LOCAL-SCTP-HAS fd00:1::10,sctp:30080
KUBE-6-NODE-PORT-SCTP-HASH fd00:1::10,sctp:30080
`, e.setMembers())
	if !strings.Contains(e.iptablesSave(), "-A KUBE-SERVICES -s ::1/128 -j RETURN") {
		t.Errorf("IPv6 loopback rule missing")
	}
}

// TestVirtualServerFlags: session affinity, mh and excludeCIDRs.
func TestVirtualServerFlags(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) {
		o.Scheduler = "mh"
		_, c, _ := net.ParseCIDR("10.200.0.0/16")
		o.ExcludeCIDRs = []*net.IPNet{c}
	})
	ctx := context.Background()
	foreign := &ipvs.VirtualServer{Address: net.ParseIP("10.200.0.1"), Protocol: "TCP", Port: 9999, Scheduler: "wrr"}
	if err := e.ipvs.AddVirtualServer(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0), affinity(600)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))
	diff(t, "ipvs", `
TCP  10.96.0.1:80 mh mh-fallback mh-port persistent 600
  -> 10.244.2.1:80 Masq 1 0 0
TCP  10.200.0.1:9999 wrr
`, e.ipvs.Dump())
}

// orderedIPVS records the real-server writes in the order they reach the kernel.
type orderedIPVS struct {
	*ipvs.Fake
	log []string
}

func (o *orderedIPVS) AddRealServer(ctx context.Context, vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	o.log = append(o.log, "add "+rs.Key())
	return o.Fake.AddRealServer(ctx, vs, rs)
}

func (o *orderedIPVS) DeleteRealServer(ctx context.Context, vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	o.log = append(o.log, "del "+rs.Key())
	return o.Fake.DeleteRealServer(ctx, vs, rs)
}

// TestReplacedEndpointAddedBeforeRemoval: replacing the only endpoint of a UDP Service
// (removed at once, no drain) adds the new real server before it deletes the old one,
// so the virtual server never has none. The new address sorts before the old one, so
// a plain walk in key order would delete first.
func TestReplacedEndpointAddedBeforeRemoval(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	rec := &orderedIPVS{Fake: e.ipvs}
	e.p.kernel.IPVS = rec
	svc := makeService("ns", "dns", clusterIP("10.96.0.10"), port("dns", v1.ProtocolUDP, 53, 0))
	old := makeSlice("ns", "dns", "dns-1", udp("dns", 53), endpoint("10.244.1.9"))
	e.start(svc, old)
	rec.log = nil
	cur := makeSlice("ns", "dns", "dns-1", udp("dns", 53), endpoint("10.244.1.1"))
	e.updateSlice(old, cur)
	e.mustSync()
	diff(t, "real-server writes", "add 10.244.1.1:53\ndel 10.244.1.9:53", strings.Join(rec.log, "\n"))
	diff(t, "ipvs", "UDP  10.96.0.10:53 rr\n  -> 10.244.1.1:53 Masq 1 0 0", e.ipvs.Dump())
}

// loopBackServices returns n Services (from first) with 250 endpoints each on
// this node: 250 KUBE-LOOP-BACK members per Service (target port 1000+i).
func loopBackServices(first, n int) []any {
	var objs []any
	for i := first; i < first+n; i++ {
		name := fmt.Sprintf("lb-%d", i)
		eps := make([]discovery.Endpoint, 250)
		for j := range eps {
			eps[j] = endpoint(fmt.Sprintf("10.244.1.%d", j+1))
		}
		objs = append(objs,
			makeService("ns", name, clusterIP(fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)), port("p", v1.ProtocolTCP, 80, 0)),
			makeSlice("ns", name, name+"-1", tcp("p", int32(1000+i)), eps...))
	}
	return objs
}

// TestIPSetGrowsPast65536: KUBE-LOOP-BACK goes from 50,000 to 75,000 members in
// a partial sync, past the 65,536 upstream creates every set with
// (kubernetes#129389): the set is resized by a swap in the same sync, nothing is
// held back, and the next full sync leaves it alone.
func TestIPSetGrowsPast65536(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(loopBackServices(0, 200)...)
	maxElem := func() (int, int) {
		t.Helper()
		sets, err := e.ipset.ListSets(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		entries, err := e.ipset.ListEntries(t.Context(), rules.LoopBack.String())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if s.Name == rules.LoopBack.String() {
				return s.MaxElem, len(entries)
			}
		}
		t.Fatalf("no %s", rules.LoopBack)
		return 0, 0
	}
	if m, n := maxElem(); m != 65536 || n != 50000 {
		t.Fatalf("after 200 Services: maxelem %d, %d members; want 65536, 50000", m, n)
	}
	e.ipset.ResetCounters()
	for _, o := range loopBackServices(200, 100) {
		e.add(o)
	}
	st := e.mustSync()
	if st.Full {
		t.Fatal("expected a partial sync")
	}
	if m, n := maxElem(); m != 262144 || n != 75000 {
		t.Errorf("after 300 Services: maxelem %d, %d members; want 262144, 75000", m, n)
	}
	if ops := e.ipset.Ops(); ops.Swap != 1 {
		t.Errorf("ipset ops %+v, want one swap (the resize)", ops)
	}
	e.ipset.ResetCounters()
	e.p.needFull = true
	if st := e.mustSync(); !st.Full {
		t.Fatal("expected a full sync")
	}
	if ops := e.ipset.Ops(); ops.Swap != 0 || ops.Add != 0 {
		t.Errorf("the next full sync changed the sets: %+v", ops)
	}
}

// TestPartialSyncReadsNoNodeAddresses: the node's addresses come from the
// netlink watch, so a partial sync reads nothing from the kernel; an address
// notification makes the next sync read them (a new node address gets its
// NodePort virtual server).
func TestPartialSyncReadsNoNodeAddresses(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(
		makeService("ns", "np", clusterIP("10.96.0.50"), port("p", v1.ProtocolTCP, 80, 30050)),
		makeSlice("ns", "np", "np-1", tcp("p", 8080), endpoint("10.244.2.50")))
	e.nl.ResetOps()
	e.updateSlice(
		makeSlice("ns", "np", "np-1", tcp("p", 8080), endpoint("10.244.2.50")),
		makeSlice("ns", "np", "np-1", tcp("p", 8080), endpoint("10.244.2.50"), endpoint("10.244.2.51")))
	if st := e.mustSync(); st.Full {
		t.Fatal("expected a partial sync")
	}
	if ops := e.nl.Ops(); len(ops) != 0 {
		t.Errorf("netlink ops of a partial sync = %v, want none", ops)
	}
	e.nl.AddLink("eth1", "192.0.2.77")
	if st := e.mustSync(); st.Full {
		t.Fatal("expected a partial sync")
	}
	if ops := e.nl.Ops(); ops[netlink.OpListLocal] != 1 {
		t.Errorf("netlink ops after an address notification = %v, want one ListLocal", ops)
	}
	if !strings.Contains(e.ipvs.Dump(), "TCP  192.0.2.77:30050 rr") {
		t.Errorf("no NodePort virtual server on the new node address:\n%s", e.ipvs.Dump())
	}
}

// TestSyncPhases: a full sync accounts for its time part by part, in order (the
// log line that says where a slow full sync spent it); a partial sync reads nothing
// and has no observe part. A part of the plan with nothing to write is not listed.
func TestSyncPhases(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(manyServices(3)...)
	names := func(st SyncStats) string {
		var n []string
		for _, ph := range st.phases {
			n = append(n, ph.name)
		}
		return strings.Join(n, " ")
	}
	// A full sync after the start (the leftovers of other modes are looked for only
	// until removed once, at start).
	e.p.needFull = true
	full := e.mustSync()
	if got, want := names(full), "build observe-ipvs observe-sets observe-addrs touch prepare plan sets rules jumps ipvs health+conntrack"; got != want {
		t.Errorf("full sync phases %q, want %q", got, want)
	}
	if !strings.Contains(full.phaseList(), " observe-ipvs=") {
		t.Errorf("phase list %q has no observe part", full.phaseList())
	}
	e.add(makeService("ns", "late", clusterIP("10.96.9.9"), port("p", v1.ProtocolTCP, 80, 0)))
	if got, want := names(e.mustSync()), "build plan sets binds ipvs health+conntrack"; got != want {
		t.Errorf("partial sync phases %q, want %q", got, want)
	}
}

// setReads records which sets a proxier reads.
type setReads struct {
	ipset.Interface
	saveAll int
	read    []string
}

func (r *setReads) SaveAll(ctx context.Context) (map[string]*ipset.SetWithEntries, error) {
	r.saveAll++
	return r.Interface.SaveAll(ctx)
}

func (r *setReads) SaveSets(ctx context.Context, names []string) (map[string]*ipset.SetWithEntries, error) {
	r.read = append(r.read, names...)
	return r.Interface.SaveSets(ctx, names)
}

// TestFullSyncReadsOnlyItsFamilysSets: the IPv6 proxier of a node whose IPv4 sets
// hold every Service (and where other software keeps sets) reads only its own sets
// in a full sync: at 1,000 Services under TCG, `ipset save` of everything made the
// empty family's first full sync cost as much as the full one's.
func TestFullSyncReadsOnlyItsFamilysSets(t *testing.T) {
	e := newTestEnv(t, v1.IPv6Protocol)
	tx := &ipset.Transaction{}
	tx.Create(&ipset.Set{Name: "KUBE-CLUSTER-IP", Type: ipset.HashIPPort, Family: ipset.FamilyInet})
	tx.Create(&ipset.Set{Name: "cali40all-hosts", Type: ipset.HashIP, Family: ipset.FamilyInet})
	for i := 0; i < 1000; i++ {
		tx.Add("KUBE-CLUSTER-IP", fmt.Sprintf("10.96.%d.%d,tcp:80", i/250, i%250+1))
	}
	if err := e.ipset.Apply(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	rec := &setReads{Interface: e.p.kernel.IPSet}
	e.p.kernel.IPSet = rec
	e.reloadRules()
	e.start()
	e.p.needFull = true
	e.mustSync()
	if rec.saveAll != 0 {
		t.Errorf("full syncs read every set %d times", rec.saveAll)
	}
	if len(rec.read) == 0 {
		t.Fatal("full syncs read no set at all")
	}
	for _, name := range rec.read {
		if !strings.HasPrefix(name, "KUBE-6-") {
			t.Errorf("the IPv6 proxier read set %q", name)
		}
	}
}

// familyReads records the family the proxier asks the kernel's reads for.
type familyReads struct {
	ipvs.Interface
	netlink.Handle
	ipvsAF, addrAF []ipfamily.Family
}

func (r *familyReads) GetAll(ctx context.Context, af ipfamily.Family, keep func(*ipvs.VirtualServer) bool) ([]ipvs.VirtualServerDump, error) {
	r.ipvsAF = append(r.ipvsAF, af)
	return r.Interface.GetAll(ctx, af, keep)
}

func (r *familyReads) ListBindAddress(ctx context.Context, dev string, af ipfamily.Family) ([]net.IP, error) {
	r.addrAF = append(r.addrAF, af)
	return r.Handle.ListBindAddress(ctx, dev, af)
}

// TestFullSyncReadsOnlyItsFamilysKernelState: the IPv6 proxier asks IPVS and
// kube-ipvs0 for IPv6 only (the reads leave the other family out), and the IPv4
// family's virtual servers and addresses it never sees stay as they are.
func TestFullSyncReadsOnlyItsFamilysKernelState(t *testing.T) {
	e := newTestEnv(t, v1.IPv6Protocol)
	ctx := context.Background()
	vs4 := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.1"), Protocol: ipvs.TCP, Port: 80, Scheduler: "rr"}
	if err := e.ipvs.AddVirtualServer(ctx, vs4); err != nil {
		t.Fatal(err)
	}
	if err := e.ipvs.AddRealServer(ctx, vs4, &ipvs.RealServer{Address: net.ParseIP("10.244.1.1"), Port: 80, Weight: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.nl.EnsureDummyDevice(ctx, netlink.DefaultDummyDevice); err != nil {
		t.Fatal(err)
	}
	if _, err := e.nl.EnsureAddressBind(ctx, net.ParseIP("10.96.0.1"), netlink.DefaultDummyDevice); err != nil {
		t.Fatal(err)
	}
	rec := &familyReads{Interface: e.ipvs, Handle: e.nl}
	e.p.kernel.IPVS, e.p.kernel.Netlink = rec, rec
	e.start()
	e.clock.Step(e.opts.SyncPeriod)
	e.mustSync() // a periodic resync
	if len(rec.ipvsAF) < 1 || len(rec.addrAF) < 1 {
		t.Fatalf("reads: IPVS %v, addresses %v; want the full syncs' reads", rec.ipvsAF, rec.addrAF)
	}
	for _, af := range append(rec.ipvsAF, rec.addrAF...) {
		if af != ipfamily.IPv6 {
			t.Errorf("the IPv6 proxier read family %d (IPVS %v, addresses %v)", af, rec.ipvsAF, rec.addrAF)
		}
	}
	if d := e.ipvs.Dump() + e.nl.Dump(); !strings.Contains(d, "10.96.0.1:80") || !strings.Contains(d, "-> 10.244.1.1:80") {
		t.Errorf("the IPv4 family's virtual server or address went:\n%s", d)
	}
	if bound, _ := e.nl.ListBindAddress(ctx, netlink.DefaultDummyDevice, ipfamily.IPv4); len(bound) != 1 {
		t.Errorf("kube-ipvs0's IPv4 addresses %v, want 10.96.0.1 kept", bound)
	}
}
