package ipvs

// Addresses as in helpers_test.go.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// recordingRuleset keeps the text of every transaction it runs, in order, with
// what the table held just before it ("" when it was refused).
type recordingRuleset struct {
	*nft.FakeRuleset
	txs    []string
	before []string
}

func (r *recordingRuleset) Run(ctx context.Context, tx *nft.Transaction) error {
	before, _ := r.FakeRuleset.Dump(ctx)
	err := r.FakeRuleset.Run(ctx, tx)
	text := strings.TrimSpace(tx.String())
	if err != nil {
		text = "REFUSED " + text
	}
	r.txs = append(r.txs, text)
	r.before = append(r.before, before)
	return err
}

// since returns the transactions recorded after the first n.
func (r *recordingRuleset) since(n int) []string { return r.txs[n:] }

// clockedFake is a fake table whose elements lapse by a clock of its own, which
// step moves with the proxier's. (The proxier's clock runs the quiet set's
// AfterFunc under its lock: the table cannot read that clock.)
type clockedFake struct {
	*recordingRuleset
	clock *testingclock.FakePassiveClock
}

func newClockedFake(e *testEnv) *clockedFake {
	c := testingclock.NewFakePassiveClock(e.clock.Now())
	f := nft.NewFakeRuleset(nftrules.Table())
	f.SetClock(c)
	return &clockedFake{recordingRuleset: &recordingRuleset{FakeRuleset: f}, clock: c}
}

func (f *clockedFake) step(e *testEnv, d time.Duration) {
	e.clock.Step(d)
	f.clock.SetTime(f.clock.Now().Add(d))
}

// aliveTxs lists the transactions that write the liveness element.
func aliveTxs(txs []string) []string {
	var out []string
	for _, tx := range txs {
		if strings.Contains(tx, "element ip-alive") {
			out = append(out, tx)
		}
	}
	return out
}

// TestNFTLivenessTimeoutRefusedAtStart: a bad liveness timeout in the
// environment stops the daemon at start, with the variable's name.
func TestNFTLivenessTimeoutRefusedAtStart(t *testing.T) {
	t.Setenv(nftrules.EnvLivenessTimeout, "soon")
	e := newTestEnv(t, v1.IPv4Protocol)
	e.opts.RulesBackend = RulesBackendNFTables
	k := e.kernel()
	k.NFTRules = nft.NewFakeRuleset(nftrules.Table())
	if _, err := NewProxier(context.Background(), e.opts, k, e.clock); err == nil || !strings.Contains(err.Error(), nftrules.EnvLivenessTimeout) {
		t.Errorf("NewProxier with a bad %s: %v", nftrules.EnvLivenessTimeout, err)
	}
}

// TestNFTLapsedTableTouchesNoPacket: once the liveness element has lapsed, every
// flow of TestPacketFlows ends as if the table were not there at all: nothing is
// rejected, dropped or masqueraded by what it holds.
func TestNFTLapsedTableTouchesNoPacket(t *testing.T) {
	e, cases := packetFlowCases(t)
	nt := e.nftTracer()
	none := &nftTracer{tracer: e.tracer(), st: nft.FakeState{}}
	acted := 0
	for _, tc := range cases {
		if tc.want != none.trace(tc.pkt).String() {
			acted++
		}
	}
	if acted < 5 {
		t.Fatalf("only %d flows differ without the table: the test proves little", acted)
	}
	nt.lapse()
	if els := nt.st.Elements["ip-alive"]; len(els) != 0 {
		t.Fatalf("the liveness element has not lapsed: %v", els)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := nt.trace(tc.pkt).String(), none.trace(tc.pkt).String(); got != want {
				t.Errorf("trace(%+v) through the lapsed table = %q, without the table %q", tc.pkt, got, want)
			}
		})
	}
}

// TestNFTAliveWithTheProgramme: a first start turns the rules on only after the
// elements and rules are written; a restart within the element's lifetime renews
// it before anything else and again in the programme's transaction, so the rules
// never go off; a periodic full sync renews it in the programme's transaction and
// writes nothing more.
func TestNFTAliveWithTheProgramme(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	rs := newClockedFake(e)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	txs := rs.since(0)
	if !strings.HasPrefix(txs[0], "REFUSED delete element ip-alive { ipv4 }") {
		t.Errorf("the first write of a start is not the attempt to renew what a predecessor left: %q", txs[0])
	}
	alive := aliveTxs(txs[1:])
	if want := "flush set ip-alive\nadd element ip-alive { ipv4 timeout 2m }"; len(alive) != 1 || alive[0] != want || txs[len(txs)-1] != want {
		t.Errorf("a first start: the liveness element must be written once, last, on its own; transactions:\n%s", strings.Join(txs, "\n---\n"))
	}
	if strings.Contains(rs.before[len(txs)-1], "element ip-cluster-ip") == false {
		t.Errorf("the rules came on before the elements were there")
	}

	// A restart a minute later.
	rs.step(e, time.Minute)
	n := len(rs.txs)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	txs = rs.since(n)
	if want := "delete element ip-alive { ipv4 }\nadd element ip-alive { ipv4 timeout 2m }"; len(txs) == 0 || txs[0] != want {
		t.Errorf("a restart must renew the liveness element first; transactions:\n%s", strings.Join(txs, "\n---\n"))
	}
	if len(txs) < 2 || !strings.Contains(txs[1], "add chain ip-nat-prerouting") || !strings.Contains(txs[1], "flush set ip-alive\nadd element ip-alive { ipv4 timeout 2m }") {
		t.Errorf("a restart's programme must renew the liveness element in its transaction; transactions:\n%s", strings.Join(txs, "\n---\n"))
	}
	if len(aliveTxs(txs)) != 2 {
		t.Errorf("a restart wrote the liveness element in %d transactions, want 2", len(aliveTxs(txs)))
	}
	for i, b := range rs.before[n:] {
		if !strings.Contains(b, "element ip-alive ipv4") {
			t.Errorf("before transaction %d of the restart the rules were off:\n%s", i, txs[i])
		}
	}

	// A periodic full sync: the programme with the element, the out-filter chain.
	rs.step(e, 31*time.Second)
	n = len(rs.txs)
	if st := e.mustSync(); !st.Full {
		t.Fatal("expected a periodic full sync")
	}
	txs = rs.since(n)
	if len(txs) != 2 || len(aliveTxs(txs)) != 1 || !strings.Contains(txs[0], "add chain ip-nat-prerouting") {
		t.Errorf("a periodic full sync: want the programme renewing the element and the out-filter chain; transactions:\n%s", strings.Join(txs, "\n---\n"))
	}
}

// TestNFTAliveRenewedOnlyWhenHalfIsLeft: between full syncs the element is renewed
// by the first run of the sync loop that finds less than half of its lifetime
// left, by one transaction of two operations, and by no other; once the daemon
// stops the element lapses.
func TestNFTAliveRenewedOnlyWhenHalfIsLeft(t *testing.T) {
	t.Setenv(nftrules.EnvLivenessTimeout, "40s")
	e := newTestEnv(t, v1.IPv4Protocol)
	rs := newClockedFake(e)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)

	n := len(rs.txs)
	rs.step(e, 19*time.Second)
	e.add(makeService("ns", "new", clusterIP("10.96.0.20"), port("p", v1.ProtocolTCP, 80, 0)))
	e.add(makeSlice("ns", "new", "new-1", tcp("p", 80), endpoint("10.244.2.20")))
	if st := e.mustSync(); st.Full {
		t.Fatal("expected a partial sync")
	}
	e.mustSync() // nothing to do
	if a := aliveTxs(rs.since(n)); len(a) != 0 {
		t.Errorf("syncs with more than half of the lifetime left wrote the liveness element: %q", a)
	}
	rs.step(e, 2*time.Second) // 21 s of 40 s: less than half left
	n = len(rs.txs)
	st := e.mustSync()
	if want := []string{"delete element ip-alive { ipv4 }\nadd element ip-alive { ipv4 timeout 40s }"}; fmt.Sprint(rs.since(n)) != fmt.Sprint(want) || st.Full {
		t.Errorf("a partial sync with less than half left: transactions %q (full %v), want %q", rs.since(n), st.Full, want)
	}
	if st.ops[opNFTablesTransaction] != 1 {
		t.Errorf("the renewal counted %d nftables transactions in the sync's stats, want 1", st.ops[opNFTablesTransaction])
	}
	rs.step(e, 5*time.Second)
	n = len(rs.txs)
	e.mustSync()
	if len(rs.since(n)) != 0 {
		t.Errorf("a sync right after the renewal wrote %q", rs.since(n))
	}
	// 26 s after the start the first element would have lapsed at 40 s, the
	// renewed one lives until 61 s.
	rs.step(e, 30*time.Second)
	if !strings.Contains(nftDump(t, rs), "element ip-alive ipv4 timeout 40s") {
		t.Errorf("the renewed element lapsed:\n%s", nftDump(t, rs))
	}
	// The daemon is gone: nothing renews it.
	rs.step(e, 10*time.Second)
	if d := nftDump(t, rs); strings.Contains(d, "element ip-alive") || !strings.Contains(d, "element ip-cluster-ip 10.96.0.20 . tcp . 80") {
		t.Errorf("41 s after the last renewal the element is there, or the stale table is gone:\n%s", d)
	}
}

// TestNFTRollForwardAfterALapse: our daemon comes back after a rollback (its table
// lapsed, and the Services changed meanwhile: one deleted, another made on its
// ClusterIP with another port). The lapsed element is not renewed; the rules come
// on only after the elements are right.
func TestNFTRollForwardAfterALapse(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	rs := newClockedFake(e)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	rs.step(e, 3*time.Minute)
	if strings.Contains(nftDump(t, rs), "element ip-alive") {
		t.Fatal("the element did not lapse")
	}

	n := len(rs.txs)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	objs := nftServices()[2:]
	objs = append(objs,
		makeService("ns", "web2", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 8080, 0)),
		makeSlice("ns", "web2", "web2-1", tcp("http", 8080), endpoint("10.244.1.5")))
	e.start(objs...)
	txs := rs.since(n)
	if !strings.HasPrefix(txs[0], "REFUSED delete element ip-alive") {
		t.Errorf("the first write is not the (refused) renewal: %q", txs[0])
	}
	last := len(txs) - 1
	if a := aliveTxs(txs[1:]); len(a) != 1 || a[0] != txs[last] || !strings.HasPrefix(txs[last], "flush set ip-alive") {
		t.Fatalf("the lapsed element must come back once, last; transactions:\n%s", strings.Join(txs, "\n---\n"))
	}
	before := rs.before[n+last]
	if strings.Contains(before, "element ip-cluster-ip 10.96.0.10 . tcp . 80\n") || !strings.Contains(before, "element ip-cluster-ip 10.96.0.10 . tcp . 8080\n") {
		t.Errorf("the rules came back on over stale elements:\n%s", before)
	}
	if !strings.Contains(nftDump(t, rs), "element ip-alive ipv4 timeout 2m") {
		t.Errorf("the rules are not on after the first full sync")
	}
}

// TestNFTAliveRepaired: the element deleted behind our back comes back with the
// next full sync's programme, or at once when the sync loop finds it gone; the
// table deleted comes back with the element after its elements.
func TestNFTAliveRepaired(t *testing.T) {
	ctx := context.Background()
	del := func(rs *clockedFake, build func(tx *nft.Transaction)) {
		t.Helper()
		tx := nft.NewTransaction()
		build(tx)
		if err := rs.FakeRuleset.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	alive := func(rs *clockedFake, d string) bool {
		return strings.Contains(nftDump(t, rs), "element ip-alive ipv4 timeout "+d)
	}
	e := newTestEnv(t, v1.IPv4Protocol)
	rs := newClockedFake(e)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)

	// Gone at a periodic full sync: back with the programme.
	del(rs, func(tx *nft.Transaction) { tx.DeleteElements("ip-alive", []string{"ipv4"}) })
	rs.step(e, 31*time.Second)
	n := len(rs.txs)
	if st := e.mustSync(); !st.Full || !alive(rs, "2m") || len(aliveTxs(rs.since(n))) != 1 {
		t.Errorf("the element gone at a periodic full sync: full %v, back %v, transactions:\n%s", st.Full, alive(rs, "2m"), strings.Join(rs.since(n), "\n---\n"))
	}

	// The table deleted: the element comes last, over the elements.
	want := nftDump(t, rs)
	del(rs, func(tx *nft.Transaction) { tx.DeleteTable() })
	rs.step(e, 31*time.Second)
	n = len(rs.txs)
	e.mustSync()
	txs := rs.since(n)
	if len(txs) == 0 || !strings.HasPrefix(txs[len(txs)-1], "flush set ip-alive") || !strings.Contains(rs.before[len(rs.txs)-1], "element ip-cluster-ip") {
		t.Errorf("the table deleted: transactions:\n%s", strings.Join(txs, "\n---\n"))
	}
	diff(t, "table", want, nftDump(t, rs))

	// Found gone by a renewal between full syncs (a lifetime shorter than two sync
	// periods): the same run of the loop is a full sync, which brings it back.
	t.Setenv(nftrules.EnvLivenessTimeout, "40s")
	e = newTestEnv(t, v1.IPv4Protocol, func(o *Options) { o.SyncPeriod = 10 * time.Minute })
	rs = newClockedFake(e)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	del(rs, func(tx *nft.Transaction) { tx.DeleteElements("ip-alive", []string{"ipv4"}) })
	rs.step(e, 21*time.Second)
	if st := e.mustSync(); !st.Full || !alive(rs, "40s") {
		t.Errorf("the element found gone: full sync %v, the element back %v", st.Full, alive(rs, "40s"))
	}
}

// TestNFTUpgradeFromAnUngatedTable: a table an older version of ours wrote has no
// alive set and no gates, its rules always on. The upgraded daemon's first
// programme adds both with the element in one transaction: no moment without
// rules.
func TestNFTUpgradeFromAnUngatedTable(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	rs := newClockedFake(e)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	// What the older version left: the same programme without gate and alive set.
	st := rs.State()
	tx := nft.NewTransaction()
	for name, c := range st.Chains {
		if c.Hook == "" {
			continue
		}
		tx.FlushChain(name)
		for _, r := range st.Rules[name][1:] { // the gate is every base chain's first rule
			tx.AddRule(name, r)
		}
	}
	tx.DeleteSet("ip-alive")
	if err := rs.FakeRuleset.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	if d := nftDump(t, rs); strings.Contains(d, "ip-alive") || !strings.Contains(d, "element ip-cluster-ip 10.96.0.10 . tcp . 80") {
		t.Fatalf("not an older version's table:\n%s", d)
	}

	n := len(rs.txs)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	txs := rs.since(n)
	if len(txs) < 2 || !strings.HasPrefix(txs[0], "REFUSED delete element ip-alive") ||
		!strings.Contains(txs[1], "add set ip-alive") || !strings.Contains(txs[1], "add element ip-alive { ipv4 timeout 2m }") {
		t.Fatalf("the upgrade's programme must bring the gates and the element together; transactions:\n%s", strings.Join(txs, "\n---\n"))
	}
	if a := aliveTxs(txs[1:]); len(a) != 1 {
		t.Errorf("the element was written %d times, want once, with the programme:\n%s", len(a), strings.Join(a, "\n---\n"))
	}
	for i, b := range rs.before[n+2:] {
		if !strings.Contains(b, "element ip-alive ipv4") {
			t.Errorf("the rules were off before transaction %d of the upgrade:\n%s", i+2, txs[i+2])
		}
	}
}

// TestNFTAliveRenewedBesideALongSync: one run of the sync loop can take longer
// than the liveness element's lifetime (4 min at 100,000 Services, against 2 min);
// the renewal beside the loop keeps the rules on meanwhile, and when it finds the
// element gone (someone deleted it) the next sync is a full one.
func TestNFTAliveRenewedBesideALongSync(t *testing.T) {
	t.Setenv(nftrules.EnvLivenessTimeout, "40s")
	e := newTestEnv(t, v1.IPv4Protocol)
	rs := newClockedFake(e)
	e.useRulesBackend(RulesBackendNFTables, rs, true)
	e.start(nftServices()...)
	// 200 s without a sync (one long run of the loop), the renewal every 10 s.
	for range 20 {
		rs.step(e, keepAliveEvery)
		e.p.renewBeside()
	}
	if d := nftDump(t, rs); !strings.Contains(d, "element ip-alive ipv4 timeout 40s") {
		t.Fatalf("the rules lapsed during a 200 s run of the loop with the renewal beside it:\n%s", d)
	}
	if e.p.rulesLapsed.Load() {
		t.Error("renewals of a living element asked for a full sync")
	}
	e.mustSync() // a periodic resync, due after 200 s

	tx := nft.NewTransaction()
	tx.DeleteElements("ip-alive", []string{"ipv4"})
	if err := rs.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	rs.step(e, 25*time.Second) // less than half of the lifetime left: renewal due
	e.p.renewBeside()
	if !e.p.rulesLapsed.Load() {
		t.Fatal("the renewal beside the loop found the element gone and did not ask for a full sync")
	}
	if st := e.mustSync(); !st.Full {
		t.Error("the sync after the element was found gone was not a full one")
	}
	if d := nftDump(t, rs); !strings.Contains(d, "element ip-alive ipv4 timeout 40s") {
		t.Errorf("the full sync did not turn the rules on again:\n%s", d)
	}
}
