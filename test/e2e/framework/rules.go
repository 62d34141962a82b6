package framework

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// The suite runs twice (test/e2e/run.sh): once with our daemon's default rules
// backend (iptables + ipset), once with --ipvs-rules-backend=nftables
// (KPI_E2E_RULES_BACKEND=nftables). The scenarios of the second pass check
// the same kernel state through the helpers here, which read the nftables
// table where the first pass reads ipsets and iptables chains.

// RulesBackend is the rules backend this run of the suite gives our daemon:
// KPI_E2E_RULES_BACKEND, "iptables" (the default) or "nftables".
func RulesBackend() string {
	if b := os.Getenv("KPI_E2E_RULES_BACKEND"); b != "" {
		return b
	}
	return "iptables"
}

// NFTablesPass reports whether this run gives our daemon the nftables backend.
func NFTablesPass() bool { return RulesBackend() == "nftables" }

// CheckRulesBackend refuses a KPI_E2E_RULES_BACKEND the suite does not know.
func CheckRulesBackend() error {
	switch b := RulesBackend(); b {
	case "iptables", "nftables":
		return nil
	default:
		return fmt.Errorf("KPI_E2E_RULES_BACKEND=%q: want iptables or nftables", b)
	}
}

// withBackend adds this pass's backend flag to a daemon's flags, unless they
// choose a backend themselves.
func withBackend(flags []string) []string {
	for _, f := range flags {
		if strings.HasPrefix(f, "--ipvs-rules-backend") {
			return flags
		}
	}
	if NFTablesPass() {
		return append(slices.Clone(flags), NFTablesBackend)
	}
	return flags
}

// nftSetOf maps an ipset (IPv4 name) to the nftables backend's set holding its
// members (pkg/proxy/ipvs/nftprogramme.go), and, for the sets keyed by protocol
// and port alone, the protocol whose elements are its members.
var nftSetOf = map[string]struct{ set, proto string }{
	"KUBE-LOOP-BACK":                 {"loop-back", ""},
	"KUBE-CLUSTER-IP":                {"cluster-ip", ""},
	"KUBE-EXTERNAL-IP":               {"external-ip", ""},
	"KUBE-EXTERNAL-IP-LOCAL":         {"external-ip-local", ""},
	"KUBE-LOAD-BALANCER":             {"load-balancer", ""},
	"KUBE-LOAD-BALANCER-FW":          {"load-balancer-fw", ""},
	"KUBE-LOAD-BALANCER-LOCAL":       {"load-balancer-local", ""},
	"KUBE-LOAD-BALANCER-SOURCE-IP":   {"load-balancer-source", ""},
	"KUBE-LOAD-BALANCER-SOURCE-CIDR": {"load-balancer-source", ""},
	"KUBE-NODE-PORT-TCP":             {"node-port", "tcp"},
	"KUBE-NODE-PORT-UDP":             {"node-port", "udp"},
	"KUBE-NODE-PORT-LOCAL-TCP":       {"node-port-local", "tcp"},
	"KUBE-NODE-PORT-LOCAL-UDP":       {"node-port-local", "udp"},
	"KUBE-NODE-PORT-SCTP-HASH":       {"node-port-sctp", ""},
	"KUBE-NODE-PORT-LOCAL-SCTP-HASH": {"node-port-local-sctp", ""},
	"KUBE-HEALTH-CHECK-NODE-PORT":    {"health-check-node-port", "tcp"},
	"KUBE-IPVS-IPS":                  {"ipvs-ips", ""},
}

// NFTSetFor returns the nftables set (with its family's prefix) that holds
// ipset name's members, and the protocol that selects them in a set keyed by
// protocol and port. IPv6 names are upstream's KUBE-6- ones, cut to ipset's 31
// characters as upstream cuts them.
func NFTSetFor(name string) (set, proto string, err error) {
	prefix, base := "ip-", name
	if rest, ok := strings.CutPrefix(name, "KUBE-6-"); ok {
		prefix, base = "ip6-", "KUBE-"+rest
	}
	for n, s := range nftSetOf {
		if n == base || (prefix == "ip6-" && len(name) == 31 && strings.HasPrefix(n, base)) {
			return prefix + s.set, s.proto, nil
		}
	}
	return "", "", fmt.Errorf("no nftables set holds the members of ipset %s", name)
}

// nftMembersAwk turns `nft list set` output into ipset entries, one per line:
// "a . tcp . 80" -> "a,tcp:80", "a . tcp . 80 . b" -> "a,tcp:80,b", and
// "tcp . 80" -> "80" when tcp is the wanted protocol (awk -v proto=...).
// (No single quote and no percent sign: it goes into shell scripts and
// Sprintf formats.)
const nftMembersAwk = `/elements = [{]/ { on = 1; sub(/.*elements = [{]/, "") }
on {
	last = index($0, "}") > 0
	sub(/[}].*/, "")
	n = split($0, es, ",")
	for (i = 1; i <= n; i++) {
		e = es[i]; gsub(/^[ \t]+|[ \t]+$/, "", e)
		if (e == "") continue
		m = split(e, f, / [.] /)
		if (m == 1) print e
		else if (m == 2) { if (f[1] == proto) print f[2] }
		else if (m == 3) print f[1] "," f[2] ":" f[3]
		else if (m == 4) print f[1] "," f[2] ":" f[3] "," f[4]
	}
	if (last) on = 0
}`

// ListSet is a guest script printing the members of ipset name, one per line
// in ipset's entry form ("10.96.0.10,tcp:80", "30080"), for the backend of
// this pass: the ipset itself, or the elements of the nftables set that holds
// its members (the IP and CIDR source-range ipsets share one nftables set, so
// either lists both; a /32 range prints as the bare address). A set that does
// not exist prints nothing.
func ListSet(name string) string {
	if !NFTablesPass() {
		return "ipset list " + name + " 2>/dev/null | sed '1,/^Members:/d'"
	}
	set, proto, err := NFTSetFor(name)
	if err != nil {
		// A scenario asking for a set the backend has no counterpart for is a
		// bug in the scenario: fail its script loudly.
		return fmt.Sprintf("echo %q >&2; false", err.Error())
	}
	return fmt.Sprintf("nft list set %s %s 2>/dev/null | awk -v proto=%s '%s'", NFTablesTable, set, proto, nftMembersAwk)
}

// ServicesRuleUsesClusterIPs is a guest script that succeeds when the rules of
// this pass's backend send traffic to the family's cluster IPs into the
// masquerade decision: KUBE-SERVICES matching KUBE-CLUSTER-IP (KUBE-6-
// CLUSTER-IP), or the table's services chain matching its cluster-ip set.
func ServicesRuleUsesClusterIPs(ipv6 bool) string {
	switch {
	case NFTablesPass() && ipv6:
		return "nft list chain " + NFTablesTable + " ip6-services | grep -q -- 'ip6 daddr . meta l4proto . th dport @ip6-cluster-ip jump ip6-mark-masq'"
	case NFTablesPass():
		return "nft list chain " + NFTablesTable + " ip-services | grep -q -- 'ip daddr . meta l4proto . th dport @ip-cluster-ip jump ip-mark-masq'"
	case ipv6:
		return "ip6tables-save -t nat | grep -q -- '-A KUBE-SERVICES .*--match-set KUBE-6-CLUSTER-IP dst,dst'"
	default:
		return "iptables-save -t nat | grep -q -- '-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst'"
	}
}
