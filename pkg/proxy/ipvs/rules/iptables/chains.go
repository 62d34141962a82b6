package iptables

import (
	"bytes"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	utiliptables "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// Chains upstream's ipvs mode owns.
const (
	chainServices       utiliptables.Chain = "KUBE-SERVICES"
	chainPostrouting    utiliptables.Chain = "KUBE-POSTROUTING"
	chainNodePort       utiliptables.Chain = "KUBE-NODE-PORT"
	chainLoadBalancer   utiliptables.Chain = "KUBE-LOAD-BALANCER"
	chainMarkMasq       utiliptables.Chain = "KUBE-MARK-MASQ"
	chainForward        utiliptables.Chain = "KUBE-FORWARD"
	chainProxyFirewall  utiliptables.Chain = "KUBE-PROXY-FIREWALL"
	chainSourceRangesFW utiliptables.Chain = "KUBE-SOURCE-RANGES-FIREWALL"
	chainIPVSFilter     utiliptables.Chain = "KUBE-IPVS-FILTER"
	chainIPVSOutFilter  utiliptables.Chain = "KUBE-IPVS-OUT-FILTER"
)

// ownedChains are declared (and so flushed and rewritten) by every iptables-restore.
var ownedChains = []struct {
	table utiliptables.Table
	chain utiliptables.Chain
}{
	{utiliptables.TableNAT, chainServices},
	{utiliptables.TableNAT, chainPostrouting},
	{utiliptables.TableNAT, chainNodePort},
	{utiliptables.TableNAT, chainLoadBalancer},
	{utiliptables.TableNAT, chainMarkMasq},
	{utiliptables.TableFilter, chainForward},
	{utiliptables.TableFilter, chainNodePort},
	{utiliptables.TableFilter, chainProxyFirewall},
	{utiliptables.TableFilter, chainSourceRangesFW},
	{utiliptables.TableFilter, chainIPVSFilter},
	{utiliptables.TableFilter, chainIPVSOutFilter},
}

// jumpRules link the built-in chains to ours; upstream's comments are kept so that
// rules left by upstream kube-proxy are recognised and not duplicated.
var jumpRules = []struct {
	table   utiliptables.Table
	from    utiliptables.Chain
	to      utiliptables.Chain
	comment string
}{
	{utiliptables.TableNAT, utiliptables.ChainOutput, chainServices, "kubernetes service portals"},
	{utiliptables.TableNAT, utiliptables.ChainPrerouting, chainServices, "kubernetes service portals"},
	{utiliptables.TableNAT, utiliptables.ChainPostrouting, chainPostrouting, "kubernetes postrouting rules"},
	{utiliptables.TableFilter, utiliptables.ChainForward, chainForward, "kubernetes forwarding rules"},
	{utiliptables.TableFilter, utiliptables.ChainInput, chainNodePort, "kubernetes health check rules"},
	{utiliptables.TableFilter, utiliptables.ChainInput, chainProxyFirewall, "kube-proxy firewall rules"},
	{utiliptables.TableFilter, utiliptables.ChainForward, chainProxyFirewall, "kube-proxy firewall rules"},
	{utiliptables.TableFilter, utiliptables.ChainInput, chainIPVSFilter, "kubernetes ipvs access filter"},
	{utiliptables.TableFilter, utiliptables.ChainOutput, chainIPVSOutFilter, "kubernetes ipvs access filter"},
}

// setJumps are the rules that send traffic matching a set somewhere; a rule is written
// only while its set is non-empty (as upstream). Local sets come before their non-local
// counterparts so that eTP=Local traffic returns before being marked for masquerade.
var setJumps = []struct {
	set       rules.Set
	table     utiliptables.Table
	from      utiliptables.Chain
	to        string
	matchType string
	protocol  string
}{
	{rules.LoopBack, utiliptables.TableNAT, chainPostrouting, "MASQUERADE", "dst,dst,src", ""},
	{rules.LoadBalancer, utiliptables.TableNAT, chainServices, string(chainLoadBalancer), "dst,dst", ""},
	{rules.LoadBalancerLocal, utiliptables.TableNAT, chainLoadBalancer, "RETURN", "dst,dst", ""},
	{rules.NodePortLocalTCP, utiliptables.TableNAT, chainNodePort, "RETURN", "dst", "tcp"},
	{rules.NodePortTCP, utiliptables.TableNAT, chainNodePort, string(chainMarkMasq), "dst", "tcp"},
	{rules.NodePortLocalUDP, utiliptables.TableNAT, chainNodePort, "RETURN", "dst", "udp"},
	{rules.NodePortUDP, utiliptables.TableNAT, chainNodePort, string(chainMarkMasq), "dst", "udp"},
	{rules.NodePortLocalSCTP, utiliptables.TableNAT, chainNodePort, "RETURN", "dst,dst", "sctp"},
	{rules.NodePortSCTP, utiliptables.TableNAT, chainNodePort, string(chainMarkMasq), "dst,dst", "sctp"},
	{rules.LoadBalancerFW, utiliptables.TableFilter, chainProxyFirewall, string(chainSourceRangesFW), "dst,dst", ""},
	{rules.LoadBalancerSourceCIDR, utiliptables.TableFilter, chainSourceRangesFW, "RETURN", "dst,dst,src", ""},
	{rules.LoadBalancerSourceIP, utiliptables.TableFilter, chainSourceRangesFW, "RETURN", "dst,dst,src", ""},
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
	w := &ruleText{in: in}
	w.nat.WriteString("*nat\n")
	w.filter.WriteString("*filter\n")
	w.declareChains()
	w.setJumps()
	w.clusterIPMasquerade()
	w.externalIPs()
	w.servicesTail()
	w.filterRules()
	w.postrouting()
	w.nat.WriteString("COMMIT\n")
	w.filter.WriteString("COMMIT\n")
	w.nat.Write(w.filter.Bytes())
	return w.nat.Bytes()
}

// ruleText is the text of the nat and filter tables being written, in order.
type ruleText struct {
	in          *rulesInput
	nat, filter bytes.Buffer
}

func (w *ruleText) name(set rules.Set) string { return w.in.names[set] }

func (w *ruleText) table(t utiliptables.Table) *bytes.Buffer {
	if t == utiliptables.TableFilter {
		return &w.filter
	}
	return &w.nat
}

func (w *ruleText) declareChains() {
	for _, c := range ownedChains {
		fmt.Fprintf(w.table(c.table), ":%s - [0:0]\n", c.chain)
	}
}

// setJumps writes the rules that send what a non-empty set matches somewhere, after
// letting the node's loopback traffic through.
func (w *ruleText) setJumps() {
	loopback := "127.0.0.0/8"
	if w.in.family == v1.IPv6Protocol {
		loopback = "::1/128"
	}
	fmt.Fprintf(&w.nat, "-A %s -s %s -j RETURN\n", chainServices, loopback)
	for _, j := range setJumps {
		if w.in.setEmpty(j.set) {
			continue
		}
		b := w.table(j.table)
		fmt.Fprintf(b, "-A %s", j.from)
		if j.protocol != "" {
			fmt.Fprintf(b, " -p %s", j.protocol)
		}
		fmt.Fprintf(b, " -m comment --comment %s -m set --match-set %s %s -j %s\n", q(setComment(j.set)), w.name(j.set), j.matchType, j.to)
	}
}

// clusterIPMasquerade marks for masquerade the ClusterIP traffic that needs it.
func (w *ruleText) clusterIPMasquerade() {
	in := w.in
	if in.setEmpty(rules.ClusterIP) {
		return
	}
	prefix := fmt.Sprintf("-A %s -m comment --comment %s -m set --match-set %s", chainServices, q(setComment(rules.ClusterIP)), w.name(rules.ClusterIP))
	switch {
	case in.masqueradeAll:
		fmt.Fprintf(&w.nat, "%s dst,dst -j %s\n", prefix, chainMarkMasq)
	case len(in.localDetectorArgs) > 0:
		// Off-cluster traffic to a service VIP is masqueraded: it may leave the node.
		fmt.Fprintf(&w.nat, "%s dst,dst %s -j %s\n", prefix, joinArgs(in.localDetectorArgs), chainMarkMasq)
	default:
		// Node-originated traffic picks a VIP on kube-ipvs0 as its source; masquerade
		// it so replies come back.
		fmt.Fprintf(&w.nat, "%s src,dst -j %s\n", prefix, chainMarkMasq)
	}
}

// externalIPs writes the rules of the external IP sets.
func (w *ruleText) externalIPs() {
	accept := func(prefix string) {
		// Traffic from off the machine (not from a bridge, not from a local process)...
		fmt.Fprintf(&w.nat, "%s -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT\n", prefix)
		// ...and traffic to external IPs that are local addresses stays local.
		fmt.Fprintf(&w.nat, "%s -m addrtype --dst-type LOCAL -j ACCEPT\n", prefix)
	}
	if !w.in.setEmpty(rules.ExternalIP) {
		prefix := fmt.Sprintf("-A %s -m comment --comment %s -m set --match-set %s dst,dst", chainServices, q(setComment(rules.ExternalIP)), w.name(rules.ExternalIP))
		fmt.Fprintf(&w.nat, "%s -j %s\n", prefix, chainMarkMasq)
		accept(prefix)
	}
	if !w.in.setEmpty(rules.ExternalIPLocal) {
		prefix := fmt.Sprintf("-A %s -m comment --comment %s -m set --match-set %s dst,dst", chainServices, q(setComment(rules.ExternalIPLocal)), w.name(rules.ExternalIPLocal))
		accept(prefix)
	}
}

// servicesTail ends the service chains: node ports, load balancers, the source
// ranges' drop, the out filter, and the accept of what IPVS will handle.
func (w *ruleText) servicesTail() {
	fmt.Fprintf(&w.nat, "-A %s -m addrtype --dst-type LOCAL -j %s\n", chainServices, chainNodePort)
	fmt.Fprintf(&w.nat, "-A %s -j %s\n", chainLoadBalancer, chainMarkMasq)
	fmt.Fprintf(&w.filter, "-A %s -j DROP\n", chainSourceRangesFW)

	out := slices.Clone(w.in.outFilterRules)
	slices.SortFunc(out, rules.CompareOutFilters)
	for _, r := range out {
		fmt.Fprintf(&w.filter, "-A %s %s\n", chainIPVSOutFilter, outFilterRuleText(r))
	}

	// Accept traffic to virtual servers at the end of KUBE-SERVICES, so that other rules
	// cannot drop what IPVS will handle.
	for _, s := range []rules.Set{rules.ClusterIP, rules.LoadBalancer} {
		if !w.in.setEmpty(s) {
			fmt.Fprintf(&w.nat, "-A %s -m set --match-set %s dst,dst -j ACCEPT\n", chainServices, w.name(s))
		}
	}
}

// filterRules writes the forward, health check and kube-ipvs0 filter rules.
func (w *ruleText) filterRules() {
	mark := w.in.masqueradeMark
	fmt.Fprintf(&w.filter, "-A %s -m comment --comment %s -m mark --mark %s/%s -j ACCEPT\n", chainForward, q(rules.ForwardRulesComment), mark, mark)
	fmt.Fprintf(&w.filter, "-A %s -m comment --comment %s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n", chainForward, q(rules.ForwardConntrackComment))
	fmt.Fprintf(&w.filter, "-A %s -m comment --comment %s -m set --match-set %s dst -j ACCEPT\n", chainNodePort, q(setComment(rules.HealthCheckNodePort)), w.name(rules.HealthCheckNodePort))

	// kubernetes#72236: service addresses on kube-ipvs0 must not expose the node's own
	// ports; only the service ports are reachable through them.
	for _, s := range []rules.Set{rules.LoadBalancer, rules.ClusterIP, rules.ExternalIP, rules.ExternalIPLocal} {
		fmt.Fprintf(&w.filter, "-A %s -m set --match-set %s dst,dst -j RETURN\n", chainIPVSFilter, w.name(s))
	}
	fmt.Fprintf(&w.filter, "-A %s -m set --match-set %s dst -j RETURN\n", chainIPVSFilter, w.name(rules.HealthCheckNodePort))
	fmt.Fprintf(&w.filter, "-A %s -m conntrack --ctstate NEW -m set --match-set %s dst -j REJECT\n", chainIPVSFilter, w.name(rules.IPVSIPs))
}

// postrouting masquerades what was marked, once.
func (w *ruleText) postrouting() {
	mark := w.in.masqueradeMark
	fmt.Fprintf(&w.nat, "-A %s -m mark ! --mark %s/%s -j RETURN\n", chainPostrouting, mark, mark)
	// Clear the mark so a packet that traverses the stack again is not masqueraded twice.
	fmt.Fprintf(&w.nat, "-A %s -j MARK --xor-mark %s\n", chainPostrouting, mark)
	// Every supported iptables has --random-fully (1.6.2+); upstream adds it when present.
	fmt.Fprintf(&w.nat, "-A %s -m comment --comment %s -j MASQUERADE --random-fully\n", chainPostrouting, q(rules.MasqueradeComment))
	fmt.Fprintf(&w.nat, "-A %s -j MARK --or-mark %s\n", chainMarkMasq, mark)
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

// rulesInput is what the chains depend on, with the given out-filter rules.
func (b *Backend) rulesInput(d rules.Desired, outRules []rules.OutFilter) *rulesInput {
	return &rulesInput{
		family:            b.cfg.Family,
		names:             b.names,
		setEmpty:          func(s rules.Set) bool { return d.SetSize(s) == 0 },
		masqueradeAll:     b.cfg.MasqueradeAll,
		localDetectorArgs: b.cfg.LocalDetectorArgs,
		masqueradeMark:    b.cfg.MasqueradeMark,
		outFilterRules:    outRules,
	}
}
