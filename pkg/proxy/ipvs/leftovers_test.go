package ipvs

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// Addresses: Service 10.96.0.1:80 (endpoint 10.244.1.2), a Service without
// endpoints 10.96.0.9:80, both as upstream's iptables mode left them.

// iptablesModeNode is what upstream's iptables mode (v1.37) leaves on a node,
// trimmed to one Service with an endpoint and one without, next to the
// kubelet's chains and another program's.
const iptablesModeNode = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SVC-ERIFXISQEP7F7OF4 - [0:0]
:KUBE-SEP-Z6JCHCWTSDXQNTWQ - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:OTHER-NAT - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -j OTHER-NAT
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment "ns/a:p cluster IP" -m tcp --dport 80 -j KUBE-SVC-ERIFXISQEP7F7OF4
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-ERIFXISQEP7F7OF4 -j KUBE-SEP-Z6JCHCWTSDXQNTWQ
-A KUBE-SEP-Z6JCHCWTSDXQNTWQ -p tcp -m tcp -j DNAT --to-destination 10.244.1.2:80
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A OTHER-NAT -s 10.0.0.0/8 -j RETURN
COMMIT
*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-ROUTER-INPUT - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
-A INPUT -j KUBE-ROUTER-INPUT
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-SERVICES -d 10.96.0.9/32 -p tcp -m comment --comment "ns/empty:p has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -j DROP
-A KUBE-ROUTER-INPUT -j RETURN
COMMIT
*mangle
:KUBE-PROXY-CANARY - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
`

// chainsOf lists "table chain" for every KUBE- or other non-built-in chain.
func chainsOf(t *testing.T, ipt *iptables.Fake) []string {
	t.Helper()
	var out []string
	for _, table := range []iptables.Table{iptables.TableNAT, iptables.TableFilter, iptables.TableMangle} {
		var buf bytes.Buffer
		if err := ipt.SaveInto(context.Background(), table, &buf); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.HasPrefix(line, ":") && !strings.Contains(line, " ACCEPT ") {
				out = append(out, string(table)+" "+strings.Fields(line[1:])[0])
			}
		}
	}
	sort.Strings(out)
	return out
}

// rulesTo lists the rules of table's built-in chains that jump to chain.
func rulesTo(t *testing.T, ipt *iptables.Fake, table iptables.Table, chain string) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := ipt.SaveInto(context.Background(), table, &buf); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(buf.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && iptablesrules.JumpTarget(f) == chain {
			out = append(out, line)
		}
	}
	return out
}

// failingRestore refuses every iptables-restore while fail is set.
type failingRestore struct {
	*iptables.Fake
	fail bool
}

func (f *failingRestore) RestoreAll(ctx context.Context, data []byte, flush iptables.FlushFlag, counters iptables.CounterFlag) error {
	if f.fail {
		return errors.New("injected iptables-restore failure")
	}
	return f.Fake.RestoreAll(ctx, data, flush, counters)
}

// TestOtherModesLeftoversRemovedAfterFirstSync: on a node upstream's iptables
// and nftables modes programmed, the proxier removes their leftovers once its
// first full sync has succeeded, never before (a failed first sync leaves them
// serving); the chains both modes share are rewritten, not removed; the
// kubelet's and other programs' chains and rules stay; each family removes its
// own nftables table; later syncs do not look again.
func TestOtherModesLeftoversRemovedAfterFirstSync(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, v1.IPv4Protocol)
	if err := e.ipt.RestoreAll(ctx, []byte(iptablesModeNode), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
		t.Fatal(err)
	}
	e.nft.Tables[nftables.Table{Family: nftables.FamilyIPv4, Name: "kube-proxy"}] = true
	e.nft.Tables[nftables.Table{Family: nftables.FamilyIPv6, Name: "kube-proxy"}] = true
	e.nft.Tables[nftables.Table{Family: nftables.FamilyIPv4, Name: "other"}] = true
	faulty := &failingRestore{Fake: e.ipt, fail: true}
	k := e.kernel()
	k.IPTables = faulty
	p, err := NewProxier(ctx, e.opts, k, e.clock)
	if err != nil {
		t.Fatal(err)
	}
	p.goResync = func(f func()) { f() } // as newTestEnv: a periodic resync reads at once
	e.p = p
	before := chainsOf(t, e.ipt)

	for _, o := range []any{
		makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.1.2")),
		makeService("ns", "empty", clusterIP("10.96.0.9"), port("p", v1.ProtocolTCP, 80, 0)),
	} {
		e.add(o)
	}
	e.p.OnServiceSynced()
	e.p.OnEndpointSlicesSynced()
	if st := e.sync(); st.Err == nil {
		t.Fatal("the first sync succeeded despite the injected iptables-restore failure")
	}
	if diff := cmp.Diff(before, chainsOf(t, e.ipt)); diff != "" {
		t.Errorf("a failed first sync changed the chains (-before +after):\n%s", diff)
	}
	if got := e.nft.Dump(); got != "table ip kube-proxy\ntable ip other\ntable ip6 kube-proxy" {
		t.Errorf("a failed first sync changed the nftables tables:\n%s", got)
	}

	faulty.fail = false
	st := e.mustSync()
	if !st.Full {
		t.Fatal("the sync after a failure is not a full one")
	}
	wantChains := []string{
		"filter KUBE-FIREWALL",
		"filter KUBE-FORWARD",
		"filter KUBE-IPVS-FILTER",
		"filter KUBE-IPVS-OUT-FILTER",
		"filter KUBE-NODE-PORT",
		"filter KUBE-PROXY-FIREWALL",
		"filter KUBE-ROUTER-INPUT",
		"filter KUBE-SOURCE-RANGES-FIREWALL",
		"mangle KUBE-KUBELET-CANARY",
		"nat KUBE-KUBELET-CANARY",
		"nat KUBE-LOAD-BALANCER",
		"nat KUBE-MARK-MASQ",
		"nat KUBE-NODE-PORT",
		"nat KUBE-POSTROUTING",
		"nat KUBE-SERVICES",
		"nat OTHER-NAT",
	}
	if diff := cmp.Diff(wantChains, chainsOf(t, e.ipt)); diff != "" {
		t.Errorf("chains after the first sync (-want +got):\n%s", diff)
	}
	if got := rulesTo(t, e.ipt, iptables.TableFilter, "KUBE-PROXY-FIREWALL"); len(got) != 2 || strings.Contains(strings.Join(got, "\n"), "load balancer firewall") {
		t.Errorf("jumps to KUBE-PROXY-FIREWALL: want only ours (INPUT, FORWARD), got:\n%s", strings.Join(got, "\n"))
	}
	for _, c := range []struct {
		table iptables.Table
		chain string
	}{{iptables.TableFilter, "KUBE-FIREWALL"}, {iptables.TableFilter, "KUBE-ROUTER-INPUT"}, {iptables.TableNAT, "OTHER-NAT"}} {
		if len(rulesTo(t, e.ipt, c.table, c.chain)) == 0 {
			t.Errorf("the jump to %s %s is gone", c.table, c.chain)
		}
	}
	if dump := e.iptablesSave(); !strings.Contains(dump, "-A KUBE-FIREWALL -m comment --comment \"block incoming localnet connections\" -j DROP") ||
		strings.Contains(dump, "has no endpoints") || strings.Contains(dump, "DNAT") {
		t.Errorf("after the first sync: want the kubelet's rule kept and no iptables-mode REJECT or DNAT left:\n%s", dump)
	}
	if got := e.nft.Dump(); got != "table ip other\ntable ip6 kube-proxy" {
		t.Errorf("nftables tables after the IPv4 proxier's first sync: want the ip kube-proxy table gone, got:\n%s", got)
	}
	if st.ops[opNFTablesDeleteTable] != 1 {
		t.Errorf("the first sync counted %d nftables table deletions, want 1", st.ops[opNFTablesDeleteTable])
	}

	// Later full syncs do not look again.
	e.clock.Step(e.opts.SyncPeriod)
	if st := e.mustSync(); !st.Full || st.ops[opNFTablesDeleteTable] != 0 {
		t.Errorf("a later full sync (full=%v) looked for leftovers again (%d nftables operations)", st.Full, st.ops[opNFTablesDeleteTable])
	}

	// The IPv6 proxier removes its family's table.
	e6 := newTestEnv(t, v1.IPv6Protocol)
	e6.nft = e.nft
	p6, err := NewProxier(ctx, e6.opts, e6.kernel(), e6.clock)
	if err != nil {
		t.Fatal(err)
	}
	p6.goResync = func(f func()) { f() }
	e6.p = p6
	e6.start(makeService("ns", "a6", clusterIP("fd00:96::1"), port("p", v1.ProtocolTCP, 80, 0)))
	if got := e.nft.Dump(); got != "table ip other" {
		t.Errorf("nftables tables after the IPv6 proxier's first sync: want only the foreign table, got:\n%s", got)
	}
}
