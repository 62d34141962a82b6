package ipvs

// The packet-flow tracer for the nftables programme: it loads the programme of a
// proxier's state (its rule inputs and the members of its ipsets, turned into set
// elements) into the nftables Fake, interprets the typed rules there, and answers
// where a packet goes, with the same IPVS table and local addresses as the iptables
// tracer. TestNFTProgrammeFlows runs every flow of TestPacketFlows through both:
// the nftables programme must send every packet where the iptables one does.

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

type nftTracer struct {
	*tracer // the IPVS table, local addresses and helpers
	st      nft.FakeState
	fake    *nft.FakeRuleset
	clock   *testingclock.FakePassiveClock
}

// nftTracer loads the desired state of e's proxier into a fake table through the
// nftables backend itself: the programme, every member, the out filter and the
// liveness element, as a full sync writes them.
func (e *testEnv) nftTracer() *nftTracer {
	t := e.t
	p := e.p
	fake := nft.NewFakeRuleset(nftrules.Table())
	clk := testingclock.NewFakePassiveClock(e.clock.Now())
	fake.SetClock(clk)
	b, err := nftrules.New(p.rulesConfig(), rules.Kernel{NFTRules: fake})
	if err != nil {
		t.Fatal(err)
	}
	var changes []rules.Change
	for _, set := range rules.Sets() {
		for _, m := range p.index.Members(set) {
			changes = append(changes, rules.Change{Member: m, Add: true})
		}
	}
	outs := p.outFilterRules(nil)
	var stats SyncStats
	for _, step := range []rules.Step{rules.Prepare{Out: outs}, rules.Members{Changes: changes, Full: true},
		rules.Rules{Out: outs, Text: b.Text(p.index, outs)}, rules.Jumps{}} {
		var out rules.Outcome
		if err := b.Apply(context.Background(), p.index, step, &stats, &out); err != nil || len(out.Refused) > 0 {
			t.Fatalf("loading the nftables programme (%s): %v %v", step, err, out.Refused)
		}
	}
	return &nftTracer{tracer: e.tracer(), st: fake.State(), fake: fake, clock: clk}
}

// lapse lets the liveness element lapse, as when the daemon has stopped for good.
func (tr *nftTracer) lapse() {
	tr.clock.SetTime(tr.clock.Now().Add(24 * time.Hour))
	tr.st = tr.fake.State()
}

// hookChains are the base chains of a hook (and chain type), in priority order.
func (tr *nftTracer) hookChains(t nft.ChainType, h nft.Hook) []string {
	var out []string
	for n, c := range tr.st.Chains {
		if c.Hook == h && c.Type == t {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := tr.st.Chains[out[i]], tr.st.Chains[out[j]]
		return a.Priority < b.Priority || a.Priority == b.Priority && out[i] < out[j]
	})
	return out
}

// run evaluates a chain: "ACCEPT", "DROP", "REJECT" or "MASQUERADE" end the base
// chain, "" falls through (or returns).
func (tr *nftTracer) run(chain string, st *pktState, depth int) string {
	if depth > 10 {
		tr.t.Fatalf("nftables jump loop at %s", chain)
	}
	for _, r := range tr.st.Rules[chain] {
		res, matched := tr.rule(r, st, depth)
		if matched && res != "" {
			if res == "RETURN" {
				return ""
			}
			return res
		}
	}
	return ""
}

// rule evaluates one rule: whether every match held, and the verdict it ended with.
func (tr *nftTracer) rule(r nft.Rule, st *pktState, depth int) (string, bool) {
	p := st.p
	v6 := strings.Contains(p.src, ":")
	for _, s := range r.Stmts {
		switch s := s.(type) {
		case nft.NFProto:
			if s.IPv6 != v6 {
				return "", false
			}
		case nft.AddrIn:
			if tr.addrIn(tr.field(s.Field, st), s.Prefix) == s.Negate {
				return "", false
			}
		case nft.InSet:
			if tr.inSet(s, st) == s.Negate {
				return "", false
			}
		case nft.FibLocal:
			a := st.dstIP
			if s.Source {
				a = p.src
			}
			if (tr.local[a] || strings.HasPrefix(a, "127.") || a == "::1") == s.Negate {
				return "", false
			}
		case nft.IifKind:
			if s.Kind != "bridge" {
				tr.t.Fatalf("iifkind %q unsupported", s.Kind)
			}
			if p.fromBridge == s.Negate {
				return "", false
			}
		case nft.CTState:
			// Every traced packet is NEW.
			if !slices.Contains(s.States, "new") {
				return "", false
			}
		case nft.MarkHas:
			if st.mark == s.Negate {
				return "", false
			}
		case nft.L4ProtoIs:
			if nft.ProtoName(s.Proto) != p.proto {
				return "", false
			}
		case nft.PortUnreachable:
			// Traced packets are TCP, UDP or SCTP, never ICMP.
			return "", false
		case nft.CTOriginal:
			// The connection IPVS handles to Daddr:Port.
			if p.dst != s.Daddr.String() || p.port != int(s.Port) || tr.findVS(p) == nil {
				return "", false
			}
		case nft.MarkSet:
			if s.Xor {
				st.mark = !st.mark
			} else {
				st.mark = true
			}
		case nft.Masquerade:
			return "MASQUERADE", true
		case nft.Reject:
			return "REJECT", true
		case nft.Verdict:
			switch s.Kind {
			case nft.Accept:
				return "ACCEPT", true
			case nft.Drop:
				return "DROP", true
			case nft.Return:
				return "RETURN", true
			case nft.Jump:
				return tr.run(s.Chain, st, depth+1), true
			default:
				tr.t.Fatalf("verdict %s unsupported", s.Kind)
			}
		default:
			tr.t.Fatalf("statement %T unsupported", s)
		}
	}
	return "", true
}

func (tr *nftTracer) field(f nft.Field, st *pktState) string {
	switch f {
	case nft.IPSaddr, nft.IP6Saddr:
		return st.p.src
	case nft.IPDaddr, nft.IP6Daddr:
		return st.dstIP
	case nft.L4Proto:
		return st.p.proto
	case nft.THDport:
		return strconv.Itoa(st.dstPort)
	case nft.MetaNFProto:
		if strings.Contains(st.p.src, ":") {
			return "ipv6"
		}
		return "ipv4"
	}
	tr.t.Fatalf("field %v unsupported", f)
	return ""
}

func (tr *nftTracer) addrIn(a string, p netip.Prefix) bool {
	addr, err := netip.ParseAddr(a)
	return err == nil && p.Contains(addr)
}

// inSet looks the packet's fields up in a set: an address element may be a prefix.
func (tr *nftTracer) inSet(s nft.InSet, st *pktState) bool {
	def, ok := tr.st.Sets[s.Set]
	if !ok {
		tr.t.Fatalf("rule references missing set %s", s.Set)
	}
	for _, e := range tr.st.Elements[s.Set] {
		match := true
		for i, f := range s.Fields {
			v := tr.field(f, st)
			switch def.Key[i] {
			case nft.KeyIPv4Addr, nft.KeyIPv6Addr:
				if strings.Contains(e[i], "/") {
					match = tr.addrIn(v, netip.MustParsePrefix(e[i]))
				} else {
					match = v == e[i]
				}
			default:
				match = v == e[i]
			}
			if !match {
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// trace follows a packet as tracer.trace does: the nat chains of its path, the
// filter chains, IPVS, and nat postrouting for every live real server.
func (tr *nftTracer) trace(p packet) verdict {
	st := &pktState{p: p, dstIP: p.dst, dstPort: p.port}
	natHook, filterHook := nft.HookPrerouting, nft.HookInput
	if p.fromNode {
		natHook, filterHook = nft.HookOutput, nft.HookOutput
	}
	for _, c := range tr.hookChains(nft.ChainTypeNAT, natHook) {
		tr.run(c, st, 0)
	}
	for _, c := range tr.hookChains(nft.ChainTypeFilter, filterHook) {
		switch tr.run(c, st, 0) {
		case "DROP":
			return verdict{dropped: true}
		case "REJECT":
			return verdict{rejected: true}
		}
	}
	return tr.throughIPVS(st, func(st *pktState) bool {
		masq := false
		for _, c := range tr.hookChains(nft.ChainTypeNAT, nft.HookPostrouting) {
			if tr.run(c, st, 0) == "MASQUERADE" {
				masq = true
			}
		}
		return masq
	})
}

// TestNFTProgrammeFlows sends every flow of TestPacketFlows through the nftables
// programme of the same proxier state: each must end where the iptables programme
// sends it (the iptables tracer is asked too, so the two are compared, not only
// each with the table).
func TestNFTProgrammeFlows(t *testing.T) {
	e, cases := packetFlowCases(t)
	ipt := e.tracer()
	nt := e.nftTracer()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, viaIPTables := nt.trace(tc.pkt).String(), ipt.trace(tc.pkt).String()
			if got != tc.want || got != viaIPTables {
				t.Errorf("nftables: trace(%+v) = %q; iptables: %q; want %q", tc.pkt, got, viaIPTables, tc.want)
			}
		})
	}
	if e.p.opts.IPFamily != v1.IPv4Protocol {
		t.Fatalf("the flows are IPv4")
	}
}
