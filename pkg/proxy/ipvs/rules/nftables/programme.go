package nftables

// The nftables rules backend's programme (issue 16): the same decisions as the
// iptables + ipset programme of iptables.go and sets.go, as native nftables in one
// table of our own. Unlike the iptables text, the rules here never depend on which
// sets are empty: a Service's arrival or departure changes set elements only, and
// the rules are written once.

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// nftTable holds both families' objects, each named with its family's prefix
// ("ip-" or "ip6-"), so the two family proxiers never write the same object.
var nftTable = nft.Table{Family: nft.FamilyInet, Name: "kube-proxy-ipvs"}

// nftSetInfo is one set of the nftables programme and the ipsets whose members it
// holds.
type nftSetInfo struct {
	name string
	// key lists the fields, with "addr" standing for the family's address type.
	key      []string
	interval bool
	from     []rules.Set // the sets whose members become its elements
	comment  string
}

// nftSetTable lists every set. TCP and UDP node ports share one set keyed by
// protocol and port (the iptables programme needs a bitmap per protocol); SCTP node
// ports keep the node address in the key, as upstream's SCTP ipsets do; the source
// IPs and CIDRs of LoadBalancer source ranges share one interval set.
var nftSetTable = []nftSetInfo{
	{"loop-back", []string{"addr", "proto", "port", "addr"}, false, []rules.Set{rules.LoopBack}, "endpoint, protocol, port and the endpoint as source: hairpin traffic"},
	{"cluster-ip", []string{"addr", "proto", "port"}, false, []rules.Set{rules.ClusterIP}, "cluster IP, protocol and port"},
	{"external-ip", []string{"addr", "proto", "port"}, false, []rules.Set{rules.ExternalIP}, "external IP, protocol and port"},
	{"external-ip-local", []string{"addr", "proto", "port"}, false, []rules.Set{rules.ExternalIPLocal}, "external IP, protocol and port with externalTrafficPolicy=Local"},
	{"load-balancer", []string{"addr", "proto", "port"}, false, []rules.Set{rules.LoadBalancer}, "load-balancer IP, protocol and port"},
	{"load-balancer-fw", []string{"addr", "proto", "port"}, false, []rules.Set{rules.LoadBalancerFW}, "load-balancer IP, protocol and port with source ranges"},
	{"load-balancer-local", []string{"addr", "proto", "port"}, false, []rules.Set{rules.LoadBalancerLocal}, "load-balancer IP, protocol and port with externalTrafficPolicy=Local"},
	{"load-balancer-source", []string{"addr", "proto", "port", "addr"}, true, []rules.Set{rules.LoadBalancerSourceIP, rules.LoadBalancerSourceCIDR}, "load-balancer IP, protocol, port and an allowed source range"},
	{"node-port", []string{"proto", "port"}, false, []rules.Set{rules.NodePortTCP, rules.NodePortUDP}, "TCP and UDP node ports"},
	{"node-port-local", []string{"proto", "port"}, false, []rules.Set{rules.NodePortLocalTCP, rules.NodePortLocalUDP}, "TCP and UDP node ports with externalTrafficPolicy=Local"},
	{"node-port-sctp", []string{"addr", "proto", "port"}, false, []rules.Set{rules.NodePortSCTP}, "node address, protocol and SCTP node port"},
	{"node-port-local-sctp", []string{"addr", "proto", "port"}, false, []rules.Set{rules.NodePortLocalSCTP}, "node address, protocol and SCTP node port with externalTrafficPolicy=Local"},
	{"health-check-node-port", []string{"proto", "port"}, false, []rules.Set{rules.HealthCheckNodePort}, "health check node ports"},
	{"ipvs-ips", []string{"addr"}, false, []rules.Set{rules.IPVSIPs}, "addresses on the IPVS interface"},
}

// nftSetFor returns the nftables set holding a set's members.
func nftSetFor(set rules.Set) (nftSetInfo, bool) {
	for _, s := range nftSetTable {
		if slices.Contains(s.from, set) {
			return s, true
		}
	}
	return nftSetInfo{}, false
}

// nftFamily names one family's objects and fields in the shared table.
type nftFamily struct {
	ipv6   bool
	prefix string
	addr   nft.KeyType
	daddr  nft.Field
	saddr  nft.Field
}

func newNFTFamily(family v1.IPFamily) nftFamily {
	if family == v1.IPv6Protocol {
		return nftFamily{ipv6: true, prefix: "ip6-", addr: nft.KeyIPv6Addr, daddr: nft.IP6Daddr, saddr: nft.IP6Saddr}
	}
	return nftFamily{prefix: "ip-", addr: nft.KeyIPv4Addr, daddr: nft.IPDaddr, saddr: nft.IPSaddr}
}

func (f nftFamily) name(s string) string { return f.prefix + s }

func (f nftFamily) set(s nftSetInfo) nft.Set {
	out := nft.Set{Name: f.name(s.name), Interval: s.interval, Comment: s.comment}
	for _, k := range s.key {
		switch k {
		case "addr":
			out.Key = append(out.Key, f.addr)
		case "proto":
			out.Key = append(out.Key, nft.KeyInetProto)
		case "port":
			out.Key = append(out.Key, nft.KeyInetService)
		}
	}
	return out
}

// nftElement is the nftables set holding m and the fields of m's element there.
func nftElement(m rules.Member) (string, []string, error) {
	s, ok := nftSetFor(m.Set)
	if !ok {
		return "", nil, fmt.Errorf("no nftables set holds members of %s", m.Set)
	}
	port := strconv.Itoa(int(m.Port))
	switch m.Set {
	case rules.NodePortTCP, rules.NodePortLocalTCP:
		return s.name, []string{"tcp", port}, nil
	case rules.NodePortUDP, rules.NodePortLocalUDP:
		return s.name, []string{"udp", port}, nil
	case rules.HealthCheckNodePort:
		// Health checks are served over TCP only.
		return s.name, []string{"tcp", port}, nil
	case rules.IPVSIPs:
		return s.name, []string{m.IP().String()}, nil
	}
	fields := []string{m.IP().String(), rules.ProtocolName(m.Proto), port}
	if src := m.Source(); src.IsValid() {
		v := src.String()
		if src.IsSingleIP() {
			v = src.Addr().String()
		}
		fields = append(fields, v)
	}
	return s.name, fields, nil
}

// nftSourceRanges turns the allowed sources of LoadBalancer ports (the fields of
// load-balancer-source elements: address, protocol, port, source range) into the
// elements the interval set may hold. Recent kernels (6.18) refuse an interval that
// overlaps another with EEXIST, and two ranges of one port overlap whenever one
// contains the other (a source range holding the LB address itself, which the
// programme also allows, or a range listed inside a wider one): only the widest
// ranges of each port are kept, which allow exactly the same sources.
func nftSourceRanges(elems [][]string) ([][]string, error) {
	type port struct{ addr, proto, port string }
	ranges := map[port][]netip.Prefix{}
	var order []port
	for _, e := range elems {
		if len(e) != 4 {
			return nil, fmt.Errorf("source range element %q: want 4 fields", strings.Join(e, " . "))
		}
		p, err := netip.ParsePrefix(e[3])
		if err != nil {
			a, aerr := netip.ParseAddr(e[3])
			if aerr != nil {
				return nil, fmt.Errorf("source range element %q: %w", strings.Join(e, " . "), err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		k := port{e[0], e[1], e[2]}
		if _, ok := ranges[k]; !ok {
			order = append(order, k)
		}
		ranges[k] = append(ranges[k], p.Masked())
	}
	var out [][]string
	for _, k := range order {
		ps := ranges[k]
		for i, p := range ps {
			covered := false
			for j, q := range ps {
				// Drop p when a wider q holds it, or an equal q comes first.
				if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
					covered = true
					break
				}
			}
			if covered {
				continue
			}
			v := p.String()
			if p.IsSingleIP() {
				v = p.Addr().String()
			}
			out = append(out, []string{k.addr, k.proto, k.port, v})
		}
	}
	return out, nil
}

// nftProgramme is every set definition, chain and rule of one family.
type nftProgramme struct {
	sets   []nft.Set
	chains []nft.Chain
	rules  map[string][]nft.Rule
}

// buildNFTProgramme writes the decisions of buildIPTablesRules as nftables. It
// does no I/O.
// programmeInput is what the programme depends on.
type programmeInput struct {
	cfg rules.Config
	out []rules.OutFilter
}

func buildNFTProgramme(in *programmeInput) (*nftProgramme, error) {
	f := newNFTFamily(in.cfg.Family)
	w := &programmeWriter{f: f, p: &nftProgramme{rules: map[string][]nft.Rule{}}}
	for _, s := range nftSetTable {
		w.p.sets = append(w.p.sets, f.set(s))
	}
	mark64, err := strconv.ParseUint(in.cfg.MasqueradeMark, 0, 32)
	if err != nil {
		return nil, fmt.Errorf("masquerade mark %q: %w", in.cfg.MasqueradeMark, err)
	}
	mark := uint32(mark64)
	detector, err := nftLocalDetector(f, in.cfg.LocalDetectorArgs)
	if err != nil {
		return nil, err
	}
	w.baseChains()
	w.servicesRules(in.cfg.MasqueradeAll, detector)
	w.natRules(mark)
	w.filterRules(mark)
	for _, r := range in.out {
		rule, err := nftOutFilterRule(f, r)
		if err != nil {
			return nil, err
		}
		w.p.rules[w.f.name("ipvs-out-filter")] = append(w.p.rules[w.f.name("ipvs-out-filter")], rule)
	}
	return w.p, nil
}

// programmeWriter adds one family's chains and rules to a programme.
type programmeWriter struct {
	f nftFamily
	p *nftProgramme
}

// base adds a base chain: the gate first (alive.go: while the daemon does not run,
// the family's alive set is empty and nothing after the gate applies), then first,
// then a jump to each of targets.
func (w *programmeWriter) base(name string, t nft.ChainType, h nft.Hook, prio int, first []nft.Rule, targets ...string) {
	n := w.f.name
	guard := nft.NFProto{IPv6: w.f.ipv6}
	w.p.chains = append(w.p.chains, nft.Chain{Name: n(name), Type: t, Hook: h, Priority: prio})
	w.p.rules[n(name)] = append([]nft.Rule{w.f.nftGate()}, first...)
	for _, to := range targets {
		w.p.rules[n(name)] = append(w.p.rules[n(name)], nft.Rule{Stmts: []nft.Stmt{guard, nft.JumpTo(n(to))}})
	}
}

func (w *programmeWriter) add(chain, comment string, stmts ...nft.Stmt) {
	w.p.rules[w.f.name(chain)] = append(w.p.rules[w.f.name(chain)], nft.Rule{Stmts: stmts, Comment: comment})
}

// dst matches a packet's destination address, protocol and port in set.
func (w *programmeWriter) dst(set string) nft.InSet {
	return nft.InSet{Fields: []nft.Field{w.f.daddr, nft.L4Proto, nft.THDport}, Set: w.f.name(set)}
}

// dstSrc matches those and the source address in set.
func (w *programmeWriter) dstSrc(set string) nft.InSet {
	return nft.InSet{Fields: []nft.Field{w.f.daddr, nft.L4Proto, nft.THDport, w.f.saddr}, Set: w.f.name(set)}
}

// port matches the protocol and destination port in set.
func (w *programmeWriter) port(set string) nft.InSet {
	return nft.InSet{Fields: []nft.Field{nft.L4Proto, nft.THDport}, Set: w.f.name(set)}
}

func (w *programmeWriter) jump(c string) nft.Stmt { return nft.JumpTo(w.f.name(c)) }

// baseChains adds the alive and quiet sets, the base chains the iptables programme
// hooks into (at iptables' priorities) and the regular chains.
func (w *programmeWriter) baseChains() {
	f, n := w.f, w.f.name
	w.p.sets = append(w.p.sets, nft.Set{Name: n(nftAliveSet), Key: []nft.KeyType{nft.KeyNFProto}, Timeout: true, Comment: nftAliveComment})
	w.base("nat-prerouting", nft.ChainTypeNAT, nft.HookPrerouting, -100, nil, "services")
	w.base("nat-output", nft.ChainTypeNAT, nft.HookOutput, -100, nil, "services")
	w.base("nat-postrouting", nft.ChainTypeNAT, nft.HookPostrouting, 100, nil, "postrouting")
	w.base("filter-forward", nft.ChainTypeFilter, nft.HookForward, 0, nil, "forward", "proxy-firewall")
	w.base("filter-input", nft.ChainTypeFilter, nft.HookInput, 0, nil, "node-port-filter", "proxy-firewall", "ipvs-filter")
	// While schedulers change, the port unreachables IPVS sends from those
	// addresses are dropped: first on output, after the gate.
	w.p.sets = append(w.p.sets, nft.Set{Name: n(nftQuietSet), Key: []nft.KeyType{f.addr}, Comment: "service addresses whose scheduler changes"})
	quiet := nft.Rule{Stmts: []nft.Stmt{nft.InSet{Fields: []nft.Field{f.saddr}, Set: n(nftQuietSet)},
		nft.PortUnreachable{IPv6: f.ipv6}, nft.DropVerdict}, Comment: rules.QuietComment}
	w.base("filter-output", nft.ChainTypeFilter, nft.HookOutput, 0, []nft.Rule{quiet}, "ipvs-out-filter")
	for _, c := range []string{"services", "postrouting", "node-port", "load-balancer", "mark-masq",
		"forward", "node-port-filter", "proxy-firewall", "source-ranges-firewall", "ipvs-filter", "ipvs-out-filter"} {
		w.p.chains = append(w.p.chains, nft.Chain{Name: n(c)})
	}
}

// servicesRules is what KUBE-SERVICES does (nat).
func (w *programmeWriter) servicesRules(masqueradeAll bool, detector []nft.Stmt) {
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	if w.f.ipv6 {
		loopback = netip.MustParsePrefix("::1/128")
	}
	w.add("services", "", nft.AddrIn{Field: w.f.saddr, Prefix: loopback}, nft.ReturnVerdict)
	w.add("services", "", w.dst("load-balancer"), w.jump("load-balancer"))
	switch {
	case masqueradeAll:
		w.add("services", "", w.dst("cluster-ip"), w.jump("mark-masq"))
	case len(detector) > 0:
		// Off-cluster traffic to a service VIP is masqueraded: it may leave the node.
		w.add("services", "", append(append([]nft.Stmt{}, detector...), w.dst("cluster-ip"), w.jump("mark-masq"))...)
	default:
		// Node-originated traffic picks a VIP on kube-ipvs0 as its source.
		w.add("services", "", nft.InSet{Fields: []nft.Field{w.f.saddr, nft.L4Proto, nft.THDport}, Set: w.f.name("cluster-ip")}, w.jump("mark-masq"))
	}
	w.add("services", "", w.dst("external-ip"), w.jump("mark-masq"))
	for _, s := range []string{"external-ip", "external-ip-local"} {
		// Traffic from off the machine (not through a bridge, not from the node)...
		w.add("services", "", w.dst(s), nft.IifKind{Kind: "bridge", Negate: true}, nft.FibLocal{Source: true, Negate: true}, nft.AcceptVerdict)
		// ...and traffic to external IPs that are local addresses stays local.
		w.add("services", "", w.dst(s), nft.FibLocal{}, nft.AcceptVerdict)
	}
	w.add("services", "", nft.FibLocal{}, w.jump("node-port"))
	w.add("services", "", w.dst("cluster-ip"), nft.AcceptVerdict)
	w.add("services", "", w.dst("load-balancer"), nft.AcceptVerdict)
}

// natRules are the load-balancer, node-port, mark and postrouting chains.
func (w *programmeWriter) natRules(mark uint32) {
	w.add("load-balancer", "", w.dst("load-balancer-local"), nft.ReturnVerdict)
	w.add("load-balancer", "", w.jump("mark-masq"))

	w.add("node-port", "", w.port("node-port-local"), nft.ReturnVerdict)
	w.add("node-port", "", w.port("node-port"), w.jump("mark-masq"))
	w.add("node-port", "", w.dst("node-port-local-sctp"), nft.ReturnVerdict)
	w.add("node-port", "", w.dst("node-port-sctp"), w.jump("mark-masq"))

	w.add("mark-masq", "", nft.MarkSet{Bits: mark})

	w.add("postrouting", "", w.dstSrc("loop-back"), nft.Masquerade{})
	w.add("postrouting", "", nft.MarkHas{Mask: mark, Negate: true}, nft.ReturnVerdict)
	// Clear the mark so a packet that traverses the stack again is not masqueraded twice.
	w.add("postrouting", "", nft.MarkSet{Bits: mark, Xor: true})
	w.add("postrouting", rules.MasqueradeComment, nft.Masquerade{FullyRandom: true})
}

// filterRules are the forward, health check, firewall and kube-ipvs0 filter chains.
func (w *programmeWriter) filterRules(mark uint32) {
	w.add("forward", rules.ForwardRulesComment, nft.MarkHas{Mask: mark}, nft.AcceptVerdict)
	w.add("forward", rules.ForwardConntrackComment, nft.CTState{States: []string{"related", "established"}}, nft.AcceptVerdict)
	w.add("node-port-filter", "", w.port("health-check-node-port"), nft.AcceptVerdict)
	w.add("proxy-firewall", "", w.dst("load-balancer-fw"), w.jump("source-ranges-firewall"))
	w.add("source-ranges-firewall", "", w.dstSrc("load-balancer-source"), nft.ReturnVerdict)
	w.add("source-ranges-firewall", "", nft.DropVerdict)
	// kubernetes#72236: service addresses on kube-ipvs0 must not expose the node's
	// own ports; only the service ports are reachable through them.
	for _, s := range []string{"load-balancer", "cluster-ip", "external-ip", "external-ip-local"} {
		w.add("ipvs-filter", "", w.dst(s), nft.ReturnVerdict)
	}
	w.add("ipvs-filter", "", w.port("health-check-node-port"), nft.ReturnVerdict)
	w.add("ipvs-filter", "", nft.CTState{States: []string{"new"}}, nft.InSet{Fields: []nft.Field{w.f.daddr}, Set: w.f.name("ipvs-ips")}, nft.Reject{})
}

// nftLocalDetector turns the local-traffic detector's iptables arguments ("! -s
// CIDR", "! -i NAME", "! -i PREFIX+") into nftables matches.
func nftLocalDetector(f nftFamily, args []string) ([]nft.Stmt, error) {
	if len(args) == 0 {
		return nil, nil
	}
	if len(args) != 3 || args[0] != "!" {
		return nil, fmt.Errorf("local traffic detector %q: not a form this backend knows", strings.Join(args, " "))
	}
	switch args[1] {
	case "-s":
		p, err := netip.ParsePrefix(args[2])
		if err != nil || p.Addr().Is6() != f.ipv6 {
			return nil, fmt.Errorf("local traffic detector %q: not a CIDR of the family", strings.Join(args, " "))
		}
		return []nft.Stmt{nft.AddrIn{Field: f.saddr, Prefix: p.Masked(), Negate: true}}, nil
	case "-i":
		name := args[2]
		if strings.HasSuffix(name, "+") {
			name = strings.TrimSuffix(name, "+") + "*"
		}
		return []nft.Stmt{nft.IifName{Name: name, Negate: true}}, nil
	}
	return nil, fmt.Errorf("local traffic detector %q: not a form this backend knows", strings.Join(args, " "))
}

// nftOutFilterRule turns an out-filter rule (the node may not reach its own
// LoadBalancer address when the node is not an allowed source) into a rule on the
// connection's original destination, which IPVS keeps in conntrack.
func nftOutFilterRule(f nftFamily, r rules.OutFilter) (nft.Rule, error) {
	src, vaddr := rules.AddrOf(r.Source), rules.AddrOf(r.VAddr)
	proto, err := nft.ProtoNumber(rules.ProtocolName(r.Proto))
	if err != nil || src.Is6() != f.ipv6 || vaddr.Is6() != f.ipv6 {
		return nft.Rule{}, fmt.Errorf("out-filter rule %q: bad address family or protocol", r)
	}
	return nft.Rule{Stmts: []nft.Stmt{
		nft.AddrIn{Field: f.saddr, Prefix: netip.PrefixFrom(src, src.BitLen())},
		nft.L4ProtoIs{Proto: proto},
		nft.CTOriginal{Daddr: vaddr, Port: r.Port},
		nft.DropVerdict,
	}}, nil
}

// writeAll adds the whole programme to tx: the table, every set and chain, and
// every chain's rules after flushing it, except the chains named in keep, which are
// made if missing and otherwise left as they are. Set elements are not touched.
func (p *nftProgramme) writeAll(tx *nft.Transaction, keep ...string) {
	tx.AddTable()
	for _, s := range p.sets {
		tx.AddSet(s)
	}
	for _, c := range p.chains {
		tx.AddChain(c)
	}
	for _, c := range p.chains {
		if slices.Contains(keep, c.Name) {
			continue
		}
		tx.FlushChain(c.Name)
		for _, r := range p.rules[c.Name] {
			tx.AddRule(c.Name, r)
		}
	}
}
