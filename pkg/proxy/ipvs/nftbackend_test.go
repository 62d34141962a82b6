package ipvs

// Addresses as in helpers_test.go.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// useRulesBackend replaces e's proxier (never started) with one of the given
// backend over the same fakes and rs; noTools leaves ipset and iptables out of its
// kernel, as on a node that has neither.
func (e *testEnv) useRulesBackend(backend string, rs nft.Ruleset, noTools bool) {
	e.t.Helper()
	e.opts.RulesBackend = backend
	k := e.kernel()
	if rs != nil {
		k.NFTRules = rs
	}
	if noTools {
		k.IPSet, k.IPTables = nil, nil
	}
	p, err := NewProxier(context.Background(), e.opts, k, e.clock)
	if err != nil {
		e.t.Fatalf("NewProxier: %v", err)
	}
	p.goResync = func(f func()) { f() }
	e.p = p
}

func newNFTEnv(t *testing.T, family v1.IPFamily, rs nft.Ruleset, mods ...func(*Options)) *testEnv {
	t.Helper()
	e := newTestEnv(t, family, mods...)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	return e
}

// nftLines returns the lines of rs's dump that start with one of prefixes.
func nftLines(t *testing.T, rs nft.Ruleset, prefixes ...string) string {
	t.Helper()
	d, err := rs.Dump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.Split(d, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				b.WriteString(l + "\n")
				break
			}
		}
	}
	return b.String()
}

func nftDump(t *testing.T, rs nft.Ruleset) string {
	t.Helper()
	d, err := rs.Dump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// nftServices are a ClusterIP Service with a local endpoint, a NodePort one with
// externalTrafficPolicy=Local and a LoadBalancer with source ranges (one inside
// another, which the interval set cannot hold both of).
func nftServices() []any {
	return []any{
		makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5"), endpoint("10.244.2.7")),
		makeService("ns", "np", clusterIP("10.96.0.11"), port("dns", v1.ProtocolUDP, 53, 30053), etpLocal(31000)),
		makeSlice("ns", "np", "np-1", udp("dns", 53), endpoint("10.244.2.8")),
		makeService("ns", "lb", clusterIP("10.96.0.12"), port("https", v1.ProtocolTCP, 443, 0),
			lbIngress("203.0.113.7"), sourceRanges("198.18.0.0/15", "198.18.5.0/24")),
		makeSlice("ns", "lb", "lb-1", tcp("https", 8443), endpoint("10.244.2.9")),
	}
}

// TestNFTBackendStartWritesTheTable: with the nftables backend and neither ipset nor
// iptables on the node, the first sync writes the programme and every element in
// the table, and IPVS as the iptables backend would.
func TestNFTBackendStartWritesTheTable(t *testing.T) {
	rs := nft.NewFakeRuleset(nftrules.Table())
	e := newNFTEnv(t, v1.IPv4Protocol, rs)
	e.start(nftServices()...)

	diff(t, "elements", `
element ip-alive ipv4 timeout 2m
element ip-cluster-ip 10.96.0.10 . tcp . 80
element ip-cluster-ip 10.96.0.11 . udp . 53
element ip-cluster-ip 10.96.0.12 . tcp . 443
element ip-ipvs-ips 10.96.0.10
element ip-ipvs-ips 10.96.0.11
element ip-ipvs-ips 10.96.0.12
element ip-ipvs-ips 203.0.113.7
element ip-load-balancer 203.0.113.7 . tcp . 443
element ip-load-balancer-fw 203.0.113.7 . tcp . 443
element ip-load-balancer-source 203.0.113.7 . tcp . 443 . 198.18.0.0/15
element ip-loop-back 10.244.1.5 . tcp . 8080 . 10.244.1.5
element ip-node-port udp . 30053
element ip-node-port-local udp . 30053
`, nftLines(t, rs, "element "))
	// The programme is there: every chain, the base chains hooked, the out-filter
	// rule of the LoadBalancer whose ranges leave out the node.
	for _, want := range []string{
		"chain ip-nat-prerouting type nat hook prerouting priority dstnat policy accept",
		"rule ip-nat-prerouting meta nfproto ipv4 jump ip-services",
		"rule ip-filter-output meta nfproto ipv4 jump ip-ipvs-out-filter",
		"rule ip-ipvs-out-filter ip saddr 203.0.113.7 meta l4proto tcp ct original ip daddr 203.0.113.7 ct original proto-dst 443 drop",
	} {
		if !strings.Contains(nftDump(t, rs), want+"\n") {
			t.Errorf("the table lacks %q", want)
		}
	}
	if got := strings.Count(nftLines(t, rs, "chain ip-"), "\n"); got != 17 {
		t.Errorf("%d chains, want 17", got)
	}
	if !strings.Contains(e.ipvs.Dump(), "TCP  203.0.113.7:443 rr\n  -> 10.244.2.9:8443 Masq 1 0 0") {
		t.Errorf("IPVS:\n%s", e.ipvs.Dump())
	}
	if e.ipset.Dump() != "" || strings.Contains(e.iptablesSave(), "KUBE-") {
		t.Errorf("the nftables backend touched ipset or iptables:\n%s\n%s", e.ipset.Dump(), e.iptablesSave())
	}
	if h := e.p.HeldBack(); len(h) != 0 {
		t.Errorf("held back: %+v", h)
	}

	// A restart over the same table renews the liveness element first, then
	// writes nothing but the programme again (renewing the element with it).
	before, n := nftDump(t, rs), rs.Transactions
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	if n := rs.Transactions - n; n != 3 { // the liveness element, the programme, the out-filter chain
		t.Errorf("a restart took %d transactions, want 3: the liveness element, the programme and the out-filter chain, no element", n)
	}
	diff(t, "table after a restart", before, nftDump(t, rs))
}

// TestNFTBackendChangesAreProportional: a new Service is one transaction of
// elements; an endpoint change of an existing Service writes nothing to nftables.
func TestNFTBackendChangesAreProportional(t *testing.T) {
	rs := nft.NewFakeRuleset(nftrules.Table())
	e := newNFTEnv(t, v1.IPv4Protocol, rs)
	e.start(nftServices()...)

	before := rs.Transactions
	e.add(makeService("ns", "new", clusterIP("10.96.0.20"), port("p", v1.ProtocolTCP, 80, 30080)))
	e.add(makeSlice("ns", "new", "new-1", tcp("p", 80), endpoint("10.244.2.20")))
	if st := e.mustSync(); st.Full {
		t.Fatal("expected a partial sync")
	}
	if n := rs.Transactions - before; n != 1 {
		t.Errorf("a new Service took %d nftables transactions, want 1", n)
	}
	for _, want := range []string{"element ip-cluster-ip 10.96.0.20 . tcp . 80", "element ip-node-port tcp . 30080", "element ip-ipvs-ips 10.96.0.20"} {
		if !strings.Contains(nftDump(t, rs), want+"\n") {
			t.Errorf("the table lacks %q", want)
		}
	}

	before = rs.Transactions
	e.add(makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.1.5"), endpoint("10.244.2.7"), endpoint("10.244.2.77")))
	st := e.mustSync()
	if n := rs.Transactions - before; n != 0 || st.NFTablesOps != 0 {
		t.Errorf("an endpoint change took %d nftables transactions (%d writes), want none", n, st.NFTablesOps)
	}
	if !strings.Contains(e.ipvs.Dump(), "-> 10.244.2.77:8080 Masq 1 0 0") {
		t.Errorf("the endpoint change did not reach IPVS:\n%s", e.ipvs.Dump())
	}

	// Source ranges are written by port: narrowing them is one transaction that
	// deletes the old range before adding the new one. The node (192.168.0.10) is
	// an allowed source now: the LB address is allowed as a source too, and the
	// out-filter rule goes (a second transaction).
	before = rs.Transactions
	lb := makeService("ns", "lb", clusterIP("10.96.0.12"), port("https", v1.ProtocolTCP, 443, 0),
		lbIngress("203.0.113.7"), sourceRanges("198.18.5.0/24", "192.168.0.0/16"))
	e.add(lb)
	e.mustSync()
	if n := rs.Transactions - before; n != 2 {
		t.Errorf("changing source ranges took %d transactions, want 2 (elements, out-filter chain)", n)
	}
	diff(t, "source ranges", `
element ip-load-balancer-source 203.0.113.7 . tcp . 443 . 192.168.0.0/16
element ip-load-balancer-source 203.0.113.7 . tcp . 443 . 198.18.5.0/24
element ip-load-balancer-source 203.0.113.7 . tcp . 443 . 203.0.113.7
`, nftLines(t, rs, "element ip-load-balancer-source "))
	if strings.Contains(nftDump(t, rs), "rule ip-ipvs-out-filter") {
		t.Errorf("the out-filter rule stayed:\n%s", nftLines(t, rs, "rule ip-ipvs-out-filter"))
	}

	// Deleting the Service leaves no element of it.
	e.deleteService(lb)
	e.mustSync()
	if got := nftLines(t, rs, "element "); strings.Contains(got, "203.0.113.7") || strings.Contains(got, "10.96.0.12") {
		t.Errorf("elements of a deleted Service remain:\n%s", got)
	}
	// The index's source ranges by port (what a partial sync reads instead of
	// every entry) went with it.
	if n := len(e.p.index.srcRanges); n != 0 {
		t.Errorf("the index keeps source ranges of %d ports after the Service went: %v", n, e.p.index.srcRanges)
	}
}

// TestNFTBackendRepairsDrift: elements someone removed or added, a chain someone
// deleted and a chain someone flushed are put right by the periodic full sync.
func TestNFTBackendRepairsDrift(t *testing.T) {
	rs := nft.NewFakeRuleset(nftrules.Table())
	e := newNFTEnv(t, v1.IPv4Protocol, rs)
	e.start(nftServices()...)
	want := nftDump(t, rs)

	// A periodic full sync over an untouched table rewrites the programme and the
	// out-filter chain (two transactions) and no element: nothing counts as drift.
	before := rs.Transactions
	e.clock.Step(31 * time.Second)
	if st := e.mustSync(); !st.Full || st.NFTablesOps != 0 || rs.Transactions-before != 2 {
		t.Errorf("a clean full sync: %+v, %d transactions; want a full sync, no element, 2 transactions", st, rs.Transactions-before)
	}

	ctx := context.Background()
	for _, build := range []func(tx *nft.Transaction){
		func(tx *nft.Transaction) { tx.DeleteElements("ip-cluster-ip", []string{"10.96.0.10", "tcp", "80"}) },
		func(tx *nft.Transaction) { tx.AddElements("ip-cluster-ip", []string{"10.96.9.9", "tcp", "80"}) },
		func(tx *nft.Transaction) { tx.AddElements("ip-node-port", []string{"sctp", "30999"}) }, // no entry stands for it
		func(tx *nft.Transaction) {
			tx.DeleteElements("ip-load-balancer-source", []string{"203.0.113.7", "tcp", "443", "198.18.0.0/15"})
		},
		func(tx *nft.Transaction) {
			tx.AddElements("ip-load-balancer-source", []string{"203.0.113.7", "tcp", "443", "10.0.0.0/8"})
		},
		func(tx *nft.Transaction) { tx.FlushChain("ip-nat-prerouting"); tx.DeleteChain("ip-nat-prerouting") },
		func(tx *nft.Transaction) { tx.FlushChain("ip-services") },
		func(tx *nft.Transaction) { tx.FlushChain("ip-ipvs-out-filter") },
		func(tx *nft.Transaction) {
			tx.AddSet(nft.Set{Name: "ip-old", Key: []nft.KeyType{nft.KeyInetService}}) // of an older version of ours
		},
	} {
		tx := nft.NewTransaction()
		build(tx)
		if err := rs.Run(ctx, tx); err != nil {
			t.Fatalf("tampering: %v", err)
		}
	}
	if nftDump(t, rs) == want {
		t.Fatal("the tampering changed nothing: the test proves nothing")
	}
	if st := e.mustSync(); st.Full {
		t.Fatal("expected a partial sync before the period")
	}
	e.clock.Step(31 * time.Second)
	st := e.mustSync()
	if !st.Full || !st.DriftCheck || st.NFTablesOps == 0 {
		t.Fatalf("expected a drift-checking full sync that writes, got %+v", st)
	}
	diff(t, "table", want, nftDump(t, rs))

	// A set someone made again with another type is replaced with every object of
	// the family, and refilled.
	tx := nft.NewTransaction()
	tx.DeleteElements("ip-node-port-local", []string{"udp", "30053"})
	if err := rs.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	for _, build := range []func(tx *nft.Transaction){
		func(tx *nft.Transaction) { tx.FlushChain("ip-node-port") },
		func(tx *nft.Transaction) { tx.DeleteSet("ip-node-port-local") },
		func(tx *nft.Transaction) {
			tx.AddSet(nft.Set{Name: "ip-node-port-local", Key: []nft.KeyType{nft.KeyInetService}})
		},
	} {
		tx := nft.NewTransaction()
		build(tx)
		if err := rs.Run(ctx, tx); err != nil {
			t.Fatalf("tampering: %v", err)
		}
	}
	e.clock.Step(31 * time.Second)
	e.mustSync()
	diff(t, "table after a set of the wrong type", want, nftDump(t, rs))
}

// refusingRuleset refuses, as the kernel refuses an element, every transaction
// that adds an element whose text contains refuse.
type refusingRuleset struct {
	*nft.FakeRuleset
	refuse string
}

func (r *refusingRuleset) Run(ctx context.Context, tx *nft.Transaction) error {
	if r.refuse != "" {
		for _, l := range strings.Split(tx.String(), "\n") {
			if strings.HasPrefix(l, "add element ") && strings.Contains(l, r.refuse) {
				return &nft.OpError{Table: nftrules.Table(), Op: l, Err: fmt.Errorf("injected: %w", unix.EINVAL)}
			}
		}
	}
	return r.FakeRuleset.Run(ctx, tx)
}

// TestNFTBackendRefusedElementHoldsBackOnlyItsService: a refused element holds back
// its Service (its virtual server waits), the other Services' elements and virtual
// servers go in, and the element is retried until it lands.
func TestNFTBackendRefusedElementHoldsBackOnlyItsService(t *testing.T) {
	rs := &refusingRuleset{FakeRuleset: nft.NewFakeRuleset(nftrules.Table())}
	e := newNFTEnv(t, v1.IPv4Protocol, rs)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))

	rs.refuse = "10.96.0.2 . tcp . 80"
	e.add(makeService("ns", "b", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)))
	e.add(makeSlice("ns", "b", "b-1", tcp("p", 80), endpoint("10.244.2.2")))
	e.add(makeService("ns", "c", clusterIP("10.96.0.3"), port("p", v1.ProtocolTCP, 80, 0)))
	e.add(makeSlice("ns", "c", "c-1", tcp("p", 80), endpoint("10.244.2.3")))
	st := e.mustSync()
	if st.Failed == 0 || e.p.applied == nil {
		t.Fatalf("expected a held-back object and a completed sync, got %+v", st)
	}
	diff(t, "ipvs", `
TCP  10.96.0.1:80 rr
  -> 10.244.2.1:80 Masq 1 0 0
TCP  10.96.0.3:80 rr
  -> 10.244.2.3:80 Masq 1 0 0
`, e.ipvs.Dump())
	diff(t, "cluster-ip elements", `
element ip-cluster-ip 10.96.0.1 . tcp . 80
element ip-cluster-ip 10.96.0.3 . tcp . 80
`, nftLines(t, rs, "element ip-cluster-ip "))
	held := e.p.HeldBack()
	if len(held) == 0 {
		t.Fatal("nothing listed as held back")
	}
	for _, h := range held {
		if len(h.Services) != 1 || h.Services[0] != "ns/b" || h.Reason != heldBackNFTables {
			t.Errorf("held back %+v, want only ns/b for nftables_error", h)
		}
	}

	rs.refuse = ""
	e.clock.Step(time.Second)
	if st := e.mustSync(); st.Full {
		t.Fatal("the retry should be a partial sync")
	}
	if !strings.Contains(e.ipvs.Dump(), "TCP  10.96.0.2:80 rr\n  -> 10.244.2.2:80 Masq 1 0 0") {
		t.Errorf("held-back Service not programmed after the refusal ended:\n%s", e.ipvs.Dump())
	}
	if !strings.Contains(nftDump(t, rs), "element ip-cluster-ip 10.96.0.2 . tcp . 80\n") {
		t.Error("held-back element missing after the refusal ended")
	}
	if len(e.p.HeldBack()) != 0 {
		t.Errorf("still held back: %+v", e.p.HeldBack())
	}
}

// TestNFTBackendFamiliesShareTheTable: the IPv4 and IPv6 proxiers write one table;
// neither full syncs, repairs nor a switch of one family back to iptables touch the
// other family's objects.
func TestNFTBackendFamiliesShareTheTable(t *testing.T) {
	rs := nft.NewFakeRuleset(nftrules.Table())
	v4 := newNFTEnv(t, v1.IPv4Protocol, rs)
	v6 := newNFTEnv(t, v1.IPv6Protocol, rs)
	v4.start(nftServices()...)
	v6.start(makeService("ns", "web6", clusterIP("fd00:96::10"), port("http", v1.ProtocolTCP, 80, 30080)),
		makeSlice("ns", "web6", "web6-1", tcp("http", 8080), endpoint("fd00:244::15")))
	family6 := func() string { return nftLines(t, rs, "chain ip6-", "rule ip6-", "set ip6-", "element ip6-") }
	family4 := func() string { return nftLines(t, rs, "chain ip-", "rule ip-", "set ip-", "element ip-") }
	want6, want4 := family6(), family4()
	if !strings.Contains(want6, "element ip6-cluster-ip fd00:96::10 . tcp . 80\n") || !strings.Contains(want4, "element ip-cluster-ip 10.96.0.10 . tcp . 80\n") {
		t.Fatalf("both families should be in the table:\n%s", nftDump(t, rs))
	}

	// Each family's full resync and changes leave the other's objects as they are.
	v4.clock.Step(31 * time.Second)
	v4.add(makeService("ns", "other", clusterIP("10.96.0.30"), port("p", v1.ProtocolTCP, 80, 0)))
	v4.mustSync()
	diff(t, "IPv6 objects after an IPv4 full sync", want6, family6())
	v6.clock.Step(31 * time.Second)
	// The elements read back are the entries written, IPv6 text included:
	// nothing to rewrite.
	if st := v6.mustSync(); !st.Full || st.NFTablesOps != 0 {
		t.Errorf("the IPv6 full sync: %+v, want a full sync that writes no element", st)
	}
	want4 = family4()
	diff(t, "IPv6 objects after their own full sync", want6, family6())

	// An IPv4 proxier switched back to iptables removes the IPv4 objects only.
	v4.useRulesBackend(RulesBackendIPTables, rs, false)
	v4.start(nftServices()...)
	diff(t, "IPv6 objects after IPv4 left the table", want6, family6())
	if got := family4(); got != "" {
		t.Errorf("IPv4 objects left behind:\n%s", got)
	}
	if want4 == "" {
		t.Error("the IPv4 objects were never there: the test proves nothing")
	}
	// The IPv6 one too: the table goes with its last objects.
	v6.useRulesBackend(RulesBackendIPTables, rs, false)
	v6.start(makeService("ns", "web6", clusterIP("fd00:96::10"), port("http", v1.ProtocolTCP, 80, 30080)))
	if d := nftDump(t, rs); d != "" {
		t.Errorf("the table should be gone:\n%s", d)
	}
}

// TestRulesBackendSwitch: a node switched from the iptables backend to nftables
// keeps its iptables chains and ipsets until the table is written, then holds only
// the table; switched back, only the chains and ipsets.
func TestRulesBackendSwitch(t *testing.T) {
	rs := nft.NewFakeRuleset(nftrules.Table())
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(nftServices()...)
	wantSets, wantIPT, wantIPVS := e.ipset.Dump(), e.iptablesSave(), e.ipvs.Dump()
	if !strings.Contains(wantIPT, "KUBE-SERVICES") || !strings.Contains(wantSets, "KUBE-CLUSTER-IP") {
		t.Fatalf("the iptables backend wrote nothing:\n%s\n%s", wantIPT, wantSets)
	}

	// To nftables: the iptables state goes only once the table is complete.
	refusing := &refusingRuleset{FakeRuleset: rs, refuse: "10.96.0.10 . tcp . 80"}
	e.useRulesBackend(RulesBackendNFTables, refusing, false)
	e.start(nftServices()...)
	if !strings.Contains(e.iptablesSave(), "KUBE-SERVICES") || e.ipset.Dump() != wantSets {
		t.Fatalf("the iptables state went while an element was held back:\n%s", e.iptablesSave())
	}
	refusing.refuse = ""
	e.clock.Step(time.Second)
	e.mustSync() // the retry lands the element
	e.clock.Step(31 * time.Second)
	e.mustSync() // the next full sync removes the other backend's state
	if got := e.iptablesSave(); strings.Contains(got, "KUBE-") {
		t.Errorf("iptables chains left after the switch to nftables:\n%s", got)
	}
	if got := e.ipset.Dump(); got != "" {
		t.Errorf("ipsets left after the switch to nftables:\n%s", got)
	}
	if !strings.Contains(nftDump(t, rs), "element ip-cluster-ip 10.96.0.10 . tcp . 80\n") {
		t.Errorf("the table is not complete:\n%s", nftDump(t, rs))
	}
	diff(t, "ipvs", wantIPVS, e.ipvs.Dump())

	// And back: the table goes, the chains and sets come back as they were.
	e.useRulesBackend(RulesBackendIPTables, rs, false)
	e.start(nftServices()...)
	if d := nftDump(t, rs); d != "" {
		t.Errorf("the table should be gone:\n%s", d)
	}
	diff(t, "ipsets", wantSets, e.ipset.Dump())
	diff(t, "iptables", wantIPT, e.iptablesSave())
	diff(t, "ipvs", wantIPVS, e.ipvs.Dump())
}

// TestRulesBackendRefusedWithoutItsKernel: each backend needs its interfaces, and an
// unknown one is refused.
func TestRulesBackendRefusedWithoutItsKernel(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	for _, c := range []struct {
		backend string
		kernel  func(k *Kernel)
		want    string
	}{
		{RulesBackendNFTables, func(k *Kernel) {}, "needs an nftables ruleset"},
		{RulesBackendNFTables, func(k *Kernel) { k.NFTRules = nft.NewFakeRuleset(nft.Table{Family: nft.FamilyInet, Name: "x"}) }, "writes table inet kube-proxy-ipvs"},
		{RulesBackendIPTables, func(k *Kernel) { k.IPSet = nil }, "needs ipset and iptables"},
		{"pf", func(k *Kernel) {}, `unknown rules backend "pf"`},
	} {
		opts := e.opts
		opts.RulesBackend = c.backend
		k := e.kernel()
		c.kernel(&k)
		if _, err := NewProxier(context.Background(), opts, k, e.clock); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.backend, err, c.want)
		}
	}
}

// TestCleanupRemovesBothBackends: --cleanup removes the nftables backend's table
// (both families) and the virtual servers whose node ports only its sets record,
// as well as the iptables backend's chains and ipsets.
func TestCleanupRemovesBothBackends(t *testing.T) {
	ctx := context.Background()
	rs := nft.NewFakeRuleset(nftrules.Table())
	e := newNFTEnv(t, v1.IPv4Protocol, rs)
	e.start(makeService("ns", "np", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 30080)),
		makeSlice("ns", "np", "np-1", tcp("p", 80), endpoint("10.244.2.1")))
	v6 := newNFTEnv(t, v1.IPv6Protocol, rs)
	v6.start(makeService("ns", "a6", clusterIP("fd00:96::1"), port("p", v1.ProtocolTCP, 80, 0)))
	if !strings.Contains(e.ipvs.Dump(), "TCP  192.168.1.10:30080 rr") {
		t.Fatalf("no node port virtual server to clean up:\n%s", e.ipvs.Dump())
	}
	// An ipset of the iptables backend's, from an earlier run.
	tx := &ipset.Transaction{}
	tx.Create(iptablesrules.SetSpecs(v1.IPv4Protocol)[1])
	if err := e.ipset.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	third := &ipvs.VirtualServer{Address: net.ParseIP("192.168.0.10"), Protocol: "TCP", Port: 8443, Scheduler: "wlc"}
	if err := e.ipvs.AddVirtualServer(ctx, third); err != nil {
		t.Fatal(err)
	}

	k := CleanupKernel{IPVS: e.ipvs, IPSet: e.ipset, IPTables: []iptables.Interface{e.ipt}, Netlink: e.nl, NFTRules: rs}
	if err := Cleanup(ctx, k, nil); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	diff(t, "ipvs", "TCP  192.168.0.10:8443 wlc", e.ipvs.Dump())
	if d := nftDump(t, rs); d != "" {
		t.Errorf("the table survived --cleanup:\n%s", d)
	}
	if d := e.ipset.Dump(); d != "" {
		t.Errorf("ipsets survived --cleanup:\n%s", d)
	}
	if err := Cleanup(ctx, k, nil); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
}

// TestNFTBackendFlows: every flow of TestPacketFlows, traced through the table the
// nftables backend wrote (not a programme loaded beside the proxier), ends where
// the iptables backend's rules send it.
func TestNFTBackendFlows(t *testing.T) {
	_, cases := packetFlowCases(t)
	rs := nft.NewFakeRuleset(nftrules.Table())
	e := newNFTEnv(t, v1.IPv4Protocol, rs, func(o *Options) {
		o.LocalDetectorArgs = []string{"!", "-s", "10.244.0.0/16"}
	})
	e.start(packetFlowObjects()...)
	nt := &nftTracer{tracer: e.tracer(), st: rs.State()}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := nt.trace(tc.pkt).String(); got != tc.want {
				t.Errorf("trace(%+v) = %q, want %q", tc.pkt, got, tc.want)
			}
		})
	}
}
