package ipvs

// Test address ranges: as in helpers_test.go.

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

func rs(ip string, port uint16, weight int32) desiredRS {
	return desiredRS{key: keyOfRS(net.ParseIP(ip), port), weight: weight}
}

// TestPlanIsData: planSync is a pure function of the desired index, the applied state
// and the touched keys; its output is the ordered list of writes, adds before drains and
// removals, each tagged with its Service.
func TestPlanIsData(t *testing.T) {
	vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.1"), Protocol: ipvs.TCP, Port: 80, Scheduler: "rr"}
	key := keyOfVS(vs)
	owner := types.NamespacedName{Namespace: "ns", Name: "a"}
	ix := newDesiredIndex()
	tch := newTouched()
	ix.set(owner, &serviceState{
		virtualServers: []*desiredVS{{port: &proxy.ServicePortName{NamespacedName: owner}, vs: vs, key: key, realServers: []desiredRS{rs("10.244.2.1", 80, 1), rs("10.244.2.3", 80, 1)}}},
		setEntries:     []rules.Member{member(rules.ClusterIP, "10.96.0.1,tcp:80")},
		bindAddrs:      []string{"10.96.0.1"},
	}, tch)
	oldVS := *vs
	oldVS.Scheduler = "lc"
	applied := &appliedState{
		vs:      map[vsKey]*appliedVS{key: {vs: &oldVS, rs: []desiredRS{rs("10.244.2.1", 80, 0), rs("10.244.2.2", 80, 1), rs("10.244.2.9", 80, 1)}}},
		entries: sets.New(member(rules.ClusterIP, "10.96.0.99,tcp:80")),
		addrs:   sets.New("10.96.0.99"),
	}
	tch.entries.Insert(member(rules.ClusterIP, "10.96.0.99,tcp:80"))
	tch.addrs.Insert("10.96.0.99")
	draining := map[drainKey]bool{{key, rs("10.244.2.9", 80, 1).key}: true}
	in := &planInput{
		index: ix, applied: applied, touched: tch, rules: []byte("rules"),
		draining:         func(k drainKey) bool { return draining[k] },
		drainTerminating: true,
		excluded:         func(net.IP) bool { return false },
	}
	before := applied.vs[key].rs[0]
	got := planSync(in).String()
	want := `set add KUBE-CLUSTER-IP 10.96.0.1 tcp/80
set del KUBE-CLUSTER-IP 10.96.0.99 tcp/80
set add KUBE-IPVS-IPS 10.96.0.1
bind 10.96.0.1
rules (5 bytes)
quiet 10.96.0.1 while schedulers change
ipvs update TCP/10.96.0.1:80 rr (ns/a)
ipvs TCP/10.96.0.1:80 weight 10.244.2.1:80 0 -> 1 (ns/a)
ipvs TCP/10.96.0.1:80 add-rs 10.244.2.3:80 weight 1 (ns/a)
ipvs TCP/10.96.0.1:80 drain-rs 10.244.2.2:80 (ns/a)
loud 10.96.0.1
unbind 10.96.0.99
drain-check 1 real servers
`
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plan (-want +got):\n%s", d)
	}
	// Pure: the inputs are unchanged and a second plan is identical.
	if applied.vs[key].rs[0] != before || applied.vs[key].vs.Scheduler != "lc" || !applied.entries.Has(member(rules.ClusterIP, "10.96.0.99,tcp:80")) {
		t.Errorf("planSync changed its input")
	}
	if again := planSync(in).String(); again != got {
		t.Errorf("second plan differs:\n%s", again)
	}

	// Unchanged rules, the same list shared: nothing to write.
	applied.iptables = []byte("rules")
	applied.vs[key] = &appliedVS{vs: vs, rs: ix.virtualServer(key).realServers}
	applied.entries = sets.New(member(rules.ClusterIP, "10.96.0.1,tcp:80"), member(rules.IPVSIPs, "10.96.0.1"))
	applied.addrs = sets.New("10.96.0.1")
	if pl := planSync(in); pl.writes() != 0 || pl.String() != "" {
		t.Errorf("plan for a converged state: %q", pl.String())
	}
	// UDP real servers are deleted at once, never drained.
	udp := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.2"), Protocol: ipvs.UDP, Port: 53, Scheduler: "rr"}
	ukey := keyOfVS(udp)
	applied.vs[ukey] = &appliedVS{vs: udp, rs: []desiredRS{rs("10.244.2.7", 53, 1)}}
	in.touched = newTouched()
	in.touched.vs.Insert(ukey)
	if got := planSync(in).String(); got != "ipvs delete UDP/10.96.0.2:53\n" {
		t.Errorf("plan for an unwanted UDP virtual server: %q", got)
	}
}

// TestClusterIPWinsWhateverTheOrder: an external address that is another Service's
// ClusterIP and port is given up when that Service appears after it, and taken back
// when it goes.
func TestClusterIPWinsWhateverTheOrder(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("a-x", "thief", clusterIP("10.96.1.1"), port("dns", v1.ProtocolUDP, 53, 0), externalIPs("10.96.0.10")),
		makeSlice("a-x", "thief", "t-1", udp("dns", 53), endpoint("10.244.2.66")))
	if !strings.Contains(e.ipvs.Dump(), "UDP  10.96.0.10:53 rr\n  -> 10.244.2.66:53") {
		t.Fatalf("external IP not programmed while no Service has it as ClusterIP:\n%s", e.ipvs.Dump())
	}
	dns := makeService("kube-system", "kube-dns", clusterIP("10.96.0.10"), port("dns", v1.ProtocolUDP, 53, 0))
	e.add(dns)
	e.add(makeSlice("kube-system", "kube-dns", "d-1", udp("dns", 53), endpoint("10.244.2.10")))
	e.mustSync()
	d := e.ipvs.Dump()
	if !strings.Contains(d, "UDP  10.96.0.10:53 rr\n  -> 10.244.2.10:53 Masq 1 0 0\nUDP") || strings.Contains(d, "10.244.2.66:53 Masq 1 0 0\nUDP  10.96.1.1") {
		t.Errorf("kube-dns does not own its ClusterIP:\n%s", d)
	}
	if strings.Contains(e.setMembers(), "KUBE-EXTERNAL-IP 10.96.0.10") {
		t.Errorf("the refused external IP is still in KUBE-EXTERNAL-IP")
	}
	e.deleteService(dns)
	e.mustSync()
	if !strings.Contains(e.ipvs.Dump(), "UDP  10.96.0.10:53 rr\n  -> 10.244.2.66:53") {
		t.Errorf("external IP not taken back after the ClusterIP went:\n%s", e.ipvs.Dump())
	}
}

type healthRecorder struct{ updated, queued int }

func (h *healthRecorder) QueuedUpdate(v1.IPFamily) { h.queued++ }
func (h *healthRecorder) Updated(v1.IPFamily)      { h.updated++ }

// TestHeldBackKeepsNodeHealthy: syncs that complete with objects held back still
// report the node healthy; only a sync that fails as a whole does not.
func TestHeldBackKeepsNodeHealthy(t *testing.T) {
	metrics.RegisterMetrics()
	hz := &healthRecorder{}
	e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) { o.HealthzServer = hz })
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)))
	e.ipvs.InjectError(ipvs.OpAddRS, errRefused)
	e.add(makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))
	n := hz.updated
	if st := e.mustSync(); st.Failed == 0 {
		t.Fatalf("no refusal")
	}
	if hz.updated != n+1 {
		t.Errorf("a completed sync with a held-back object did not report health")
	}
	if got := metricValue(t, metrics.HeldBackObjects.WithLabelValues("IPv4", heldBackIPVS)); got != 1 {
		t.Errorf("held_back_objects{reason=ipvs_error} = %v, want 1", got)
	}
	e.ipt.InjectRestoreError = func([]byte) error { return errRefused }
	e.clock.Step(31 * time.Second)
	if st := e.sync(); st.Err == nil {
		t.Fatalf("expected a global failure")
	}
	if hz.updated != n+1 {
		t.Errorf("a failed sync reported health")
	}
}

// TestKernelOperationsCounted: kubeproxy_ipvs_kernel_operations_total counts each
// request by subsystem and operation, as its help text says.
func TestKernelOperationsCounted(t *testing.T) {
	metrics.RegisterMetrics()
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1")))
	c := func(sub, op string) float64 {
		return metricValue(t, metrics.KernelOperationsTotal.WithLabelValues(sub, op))
	}
	addRS, bind, restore := c("ipvs", "add_real_server"), c("netlink", "bind_address"), c("ipset", "restore")
	e.add(makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.2.1"), endpoint("10.244.2.2"), endpoint("10.244.2.3")))
	e.add(makeService("ns", "b", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)))
	e.mustSync()
	if d := c("ipvs", "add_real_server") - addRS; d != 2 {
		t.Errorf("add_real_server grew by %v, want 2", d)
	}
	if d := c("netlink", "bind_address") - bind; d != 1 {
		t.Errorf("bind_address grew by %v, want 1", d)
	}
	if d := c("ipset", "restore") - restore; d != 1 {
		t.Errorf("ipset restore grew by %v, want 1", d)
	}
}

// metricValue reads a gauge or counter child.
func metricValue(t *testing.T, m any) float64 {
	t.Helper()
	w, ok := m.(interface{ Write(*dto.Metric) error })
	if !ok {
		t.Fatalf("%T cannot be read", m)
	}
	var d dto.Metric
	if err := w.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

// TestJumpRulesReadOnce: a full sync reads the two tables once and writes only a
// missing jump, in one iptables-restore (never one `iptables -C/-I` pair per
// jump); the jumps a first start writes all at once end in the order one
// `iptables -I` per jump left them.
func TestJumpRulesReadOnce(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)))
	var jumps []string
	for _, l := range strings.Split(e.iptablesSave(), "\n") {
		if strings.HasPrefix(l, "-A ") && !strings.HasPrefix(l, "-A KUBE-") {
			jumps = append(jumps, l)
		}
	}
	want := []string{
		`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
		`-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
		`-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`,
		`-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER`,
		`-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL`,
		`-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT`,
		`-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL`,
		`-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`,
		`-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER`,
	}
	if diff := cmp.Diff(want, jumps); diff != "" {
		t.Errorf("jumps after the first start (-want +got):\n%s", diff)
	}
	// A failure's full sync (in the loop) reads the two tables once and writes the
	// rules; a deleted jump goes back in the same way, one restore, no ensure call.
	e.p.needFull = true
	st := e.mustSync()
	if !st.Full || st.ops[opIPTablesRestore] != 1 || st.ops[opIPTablesSave] != 2 {
		t.Fatalf("full sync with every jump in place: restores %d (the rules), saves %d; want 1 and 2", st.ops[opIPTablesRestore], st.ops[opIPTablesSave])
	}
	if err := e.ipt.DeleteRule(context.Background(), "nat", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"); err != nil {
		t.Fatal(err)
	}
	e.p.needFull = true
	st = e.mustSync()
	if st.ops[opIPTablesRestore] != 2 || st.ops[opIPTablesEnsureRule] != 0 || !strings.Contains(e.iptablesSave(), "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES") {
		t.Errorf("a deleted jump: %d restores (want the rules' and the jump's), %d ensure calls (want 0), and the jump back", st.ops[opIPTablesRestore], st.ops[opIPTablesEnsureRule])
	}
}
