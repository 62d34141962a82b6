package ipvs

import (
	"bytes"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// Chains upstream's ipvs mode owns.
const (
	chainServices           iptables.Chain = "KUBE-SERVICES"
	chainPostrouting        iptables.Chain = "KUBE-POSTROUTING"
	chainNodePort           iptables.Chain = "KUBE-NODE-PORT"
	chainLoadBalancer       iptables.Chain = "KUBE-LOAD-BALANCER"
	chainMarkMasq           iptables.Chain = "KUBE-MARK-MASQ"
	chainForward            iptables.Chain = "KUBE-FORWARD"
	chainProxyFirewall      iptables.Chain = "KUBE-PROXY-FIREWALL"
	chainSourceRangesFW     iptables.Chain = "KUBE-SOURCE-RANGES-FIREWALL"
	chainIPVSFilter         iptables.Chain = "KUBE-IPVS-FILTER"
	chainIPVSOutFilter      iptables.Chain = "KUBE-IPVS-OUT-FILTER"
	forwardRulesComment                    = "kubernetes forwarding rules"
	forwardConntrackComment                = "kubernetes forwarding conntrack rule"
	masqueradeComment                      = "kubernetes service traffic requiring SNAT"
)

// ownedChains are declared (and so flushed and rewritten) by every iptables-restore.
var ownedChains = []struct {
	table iptables.Table
	chain iptables.Chain
}{
	{iptables.TableNAT, chainServices},
	{iptables.TableNAT, chainPostrouting},
	{iptables.TableNAT, chainNodePort},
	{iptables.TableNAT, chainLoadBalancer},
	{iptables.TableNAT, chainMarkMasq},
	{iptables.TableFilter, chainForward},
	{iptables.TableFilter, chainNodePort},
	{iptables.TableFilter, chainProxyFirewall},
	{iptables.TableFilter, chainSourceRangesFW},
	{iptables.TableFilter, chainIPVSFilter},
	{iptables.TableFilter, chainIPVSOutFilter},
}

// jumpRules link the built-in chains to ours; upstream's comments are kept so that
// rules left by upstream kube-proxy are recognised and not duplicated.
var jumpRules = []struct {
	table   iptables.Table
	from    iptables.Chain
	to      iptables.Chain
	comment string
}{
	{iptables.TableNAT, iptables.ChainOutput, chainServices, "kubernetes service portals"},
	{iptables.TableNAT, iptables.ChainPrerouting, chainServices, "kubernetes service portals"},
	{iptables.TableNAT, iptables.ChainPostrouting, chainPostrouting, "kubernetes postrouting rules"},
	{iptables.TableFilter, iptables.ChainForward, chainForward, "kubernetes forwarding rules"},
	{iptables.TableFilter, iptables.ChainInput, chainNodePort, "kubernetes health check rules"},
	{iptables.TableFilter, iptables.ChainInput, chainProxyFirewall, "kube-proxy firewall rules"},
	{iptables.TableFilter, iptables.ChainForward, chainProxyFirewall, "kube-proxy firewall rules"},
	{iptables.TableFilter, iptables.ChainInput, chainIPVSFilter, "kubernetes ipvs access filter"},
	{iptables.TableFilter, iptables.ChainOutput, chainIPVSOutFilter, "kubernetes ipvs access filter"},
}

// setJumps are the rules that send traffic matching a set somewhere; a rule is written
// only while its set is non-empty (as upstream). Local sets come before their non-local
// counterparts so that eTP=Local traffic returns before being marked for masquerade.
var setJumps = []struct {
	set       rules.Set
	table     iptables.Table
	from      iptables.Chain
	to        string
	matchType string
	protocol  string
}{
	{setLoopBack, iptables.TableNAT, chainPostrouting, "MASQUERADE", "dst,dst,src", ""},
	{setLoadBalancer, iptables.TableNAT, chainServices, string(chainLoadBalancer), "dst,dst", ""},
	{setLoadBalancerLocal, iptables.TableNAT, chainLoadBalancer, "RETURN", "dst,dst", ""},
	{setNodePortLocalTCP, iptables.TableNAT, chainNodePort, "RETURN", "dst", "tcp"},
	{setNodePortTCP, iptables.TableNAT, chainNodePort, string(chainMarkMasq), "dst", "tcp"},
	{setNodePortLocalUDP, iptables.TableNAT, chainNodePort, "RETURN", "dst", "udp"},
	{setNodePortUDP, iptables.TableNAT, chainNodePort, string(chainMarkMasq), "dst", "udp"},
	{setNodePortLocalSCTP, iptables.TableNAT, chainNodePort, "RETURN", "dst,dst", "sctp"},
	{setNodePortSCTP, iptables.TableNAT, chainNodePort, string(chainMarkMasq), "dst,dst", "sctp"},
	{setLoadBalancerFW, iptables.TableFilter, chainProxyFirewall, string(chainSourceRangesFW), "dst,dst", ""},
	{setLoadBalancerSourceCIDR, iptables.TableFilter, chainSourceRangesFW, "RETURN", "dst,dst,src", ""},
	{setLoadBalancerSourceIP, iptables.TableFilter, chainSourceRangesFW, "RETURN", "dst,dst,src", ""},
}

// rulesInput is everything the iptables text depends on.
type rulesInput struct {
	family        v1.IPFamily
	names         setNames
	setEmpty      func(set rules.Set) bool
	masqueradeAll bool
	// localDetectorArgs, when set, match traffic NOT from a local pod (e.g. "! -s CIDR").
	localDetectorArgs []string
	masqueradeMark    string // e.g. 0x004000
	outFilterRules    []rules.OutFilter
}

func q(s string) string { return `"` + s + `"` }

// buildIPTablesRules writes the nat and filter tables for one iptables-restore
// --noflush run. It does no I/O.
func buildIPTablesRules(in *rulesInput) []byte {
	var nat, filter bytes.Buffer
	nat.WriteString("*nat\n")
	filter.WriteString("*filter\n")
	for _, c := range ownedChains {
		b := &nat
		if c.table == iptables.TableFilter {
			b = &filter
		}
		fmt.Fprintf(b, ":%s - [0:0]\n", c.chain)
	}
	name := func(set rules.Set) string { return in.names[set] }

	loopback := "127.0.0.0/8"
	if in.family == v1.IPv6Protocol {
		loopback = "::1/128"
	}
	fmt.Fprintf(&nat, "-A %s -s %s -j RETURN\n", chainServices, loopback)

	for _, j := range setJumps {
		if in.setEmpty(j.set) {
			continue
		}
		b := &nat
		if j.table == iptables.TableFilter {
			b = &filter
		}
		fmt.Fprintf(b, "-A %s", j.from)
		if j.protocol != "" {
			fmt.Fprintf(b, " -p %s", j.protocol)
		}
		fmt.Fprintf(b, " -m comment --comment %s -m set --match-set %s %s -j %s\n", q(setComment(j.set)), name(j.set), j.matchType, j.to)
	}

	if !in.setEmpty(setClusterIP) {
		prefix := fmt.Sprintf("-A %s -m comment --comment %s -m set --match-set %s", chainServices, q(setComment(setClusterIP)), name(setClusterIP))
		switch {
		case in.masqueradeAll:
			fmt.Fprintf(&nat, "%s dst,dst -j %s\n", prefix, chainMarkMasq)
		case len(in.localDetectorArgs) > 0:
			// Off-cluster traffic to a service VIP is masqueraded: it may leave the node.
			fmt.Fprintf(&nat, "%s dst,dst %s -j %s\n", prefix, joinArgs(in.localDetectorArgs), chainMarkMasq)
		default:
			// Node-originated traffic picks a VIP on kube-ipvs0 as its source; masquerade
			// it so replies come back.
			fmt.Fprintf(&nat, "%s src,dst -j %s\n", prefix, chainMarkMasq)
		}
	}

	externalRules := func(prefix string) {
		// Traffic from off the machine (not from a bridge, not from a local process)...
		fmt.Fprintf(&nat, "%s -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT\n", prefix)
		// ...and traffic to external IPs that are local addresses stays local.
		fmt.Fprintf(&nat, "%s -m addrtype --dst-type LOCAL -j ACCEPT\n", prefix)
	}
	if !in.setEmpty(setExternalIP) {
		prefix := fmt.Sprintf("-A %s -m comment --comment %s -m set --match-set %s dst,dst", chainServices, q(setComment(setExternalIP)), name(setExternalIP))
		fmt.Fprintf(&nat, "%s -j %s\n", prefix, chainMarkMasq)
		externalRules(prefix)
	}
	if !in.setEmpty(setExternalIPLocal) {
		prefix := fmt.Sprintf("-A %s -m comment --comment %s -m set --match-set %s dst,dst", chainServices, q(setComment(setExternalIPLocal)), name(setExternalIPLocal))
		externalRules(prefix)
	}

	fmt.Fprintf(&nat, "-A %s -m addrtype --dst-type LOCAL -j %s\n", chainServices, chainNodePort)
	fmt.Fprintf(&nat, "-A %s -j %s\n", chainLoadBalancer, chainMarkMasq)
	fmt.Fprintf(&filter, "-A %s -j DROP\n", chainSourceRangesFW)

	out := slices.Clone(in.outFilterRules)
	slices.SortFunc(out, rules.CompareOutFilters)
	for _, r := range out {
		fmt.Fprintf(&filter, "-A %s %s\n", chainIPVSOutFilter, outFilterRuleText(r))
	}

	// Accept traffic to virtual servers at the end of KUBE-SERVICES, so that other rules
	// cannot drop what IPVS will handle.
	for _, s := range []rules.Set{setClusterIP, setLoadBalancer} {
		if !in.setEmpty(s) {
			fmt.Fprintf(&nat, "-A %s -m set --match-set %s dst,dst -j ACCEPT\n", chainServices, name(s))
		}
	}

	mark := in.masqueradeMark
	fmt.Fprintf(&filter, "-A %s -m comment --comment %s -m mark --mark %s/%s -j ACCEPT\n", chainForward, q(forwardRulesComment), mark, mark)
	fmt.Fprintf(&filter, "-A %s -m comment --comment %s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n", chainForward, q(forwardConntrackComment))
	fmt.Fprintf(&filter, "-A %s -m comment --comment %s -m set --match-set %s dst -j ACCEPT\n", chainNodePort, q(setComment(setHealthCheckNodePort)), name(setHealthCheckNodePort))

	// kubernetes#72236: service addresses on kube-ipvs0 must not expose the node's own
	// ports; only the service ports are reachable through them.
	for _, s := range []rules.Set{setLoadBalancer, setClusterIP, setExternalIP, setExternalIPLocal} {
		fmt.Fprintf(&filter, "-A %s -m set --match-set %s dst,dst -j RETURN\n", chainIPVSFilter, name(s))
	}
	fmt.Fprintf(&filter, "-A %s -m set --match-set %s dst -j RETURN\n", chainIPVSFilter, name(setHealthCheckNodePort))
	fmt.Fprintf(&filter, "-A %s -m conntrack --ctstate NEW -m set --match-set %s dst -j REJECT\n", chainIPVSFilter, name(setIPVSIPs))

	fmt.Fprintf(&nat, "-A %s -m mark ! --mark %s/%s -j RETURN\n", chainPostrouting, mark, mark)
	// Clear the mark so a packet that traverses the stack again is not masqueraded twice.
	fmt.Fprintf(&nat, "-A %s -j MARK --xor-mark %s\n", chainPostrouting, mark)
	// Every supported iptables has --random-fully (1.6.2+); upstream adds it when present.
	fmt.Fprintf(&nat, "-A %s -m comment --comment %s -j MASQUERADE --random-fully\n", chainPostrouting, q(masqueradeComment))
	fmt.Fprintf(&nat, "-A %s -j MARK --or-mark %s\n", chainMarkMasq, mark)

	nat.WriteString("COMMIT\n")
	filter.WriteString("COMMIT\n")
	nat.Write(filter.Bytes())
	return nat.Bytes()
}

func joinArgs(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	return b.String()
}

// masqueradeMarkFor formats the mark bit as upstream does (0x004000 for bit 14).
func masqueradeMarkFor(bit int) string { return fmt.Sprintf("%#08x", 1<<uint(bit)) }

// iptablesRules is the text of our chains with the given KUBE-IPVS-OUT-FILTER rules.
func (p *Proxier) iptablesRules(outRules []rules.OutFilter) []byte {
	return buildIPTablesRules(p.rulesInput(outRules))
}

// rulesInput is what this proxier's rules depend on, with the given out-filter rules.
func (p *Proxier) rulesInput(outRules []rules.OutFilter) *rulesInput {
	return &rulesInput{
		family:            p.opts.IPFamily,
		names:             p.names,
		setEmpty:          p.index.setEmpty,
		masqueradeAll:     p.opts.MasqueradeAll,
		localDetectorArgs: p.opts.LocalDetectorArgs,
		masqueradeMark:    masqueradeMarkFor(p.opts.MasqueradeBit),
		outFilterRules:    outRules,
	}
}
