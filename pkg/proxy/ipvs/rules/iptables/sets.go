package iptables

import (
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
)

// The ipsets upstream kube-proxy's ipvs mode programs (rules.Set names them). Names
// and comments are part of the compatibility promise: operators' tooling and
// upstream's own cleanup know them.
const (
	ipsetHashSize     = 1024
	ipsetMaxElem      = 65536
	ipsetNameMaxLen   = 31
	ipv6SetPrefix     = "KUBE-6-"
	upstreamSetPrefix = "KUBE-"
)

// setInfo is one row of the ipset table.
type setInfo struct {
	name    rules.Set
	setType ipset.Type
	comment string // also used as the iptables rule comment
}

// ipsetTable lists every set, in creation order.
var ipsetTable = []setInfo{
	{rules.LoopBack, ipset.HashIPPortIP, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
	{rules.ClusterIP, ipset.HashIPPort, "Kubernetes service cluster ip + port for masquerade purpose"},
	{rules.ExternalIP, ipset.HashIPPort, "Kubernetes service external ip + port for masquerade and filter purpose"},
	{rules.ExternalIPLocal, ipset.HashIPPort, "Kubernetes service external ip + port with externalTrafficPolicy=local"},
	{rules.LoadBalancer, ipset.HashIPPort, "Kubernetes service lb portal"},
	{rules.LoadBalancerFW, ipset.HashIPPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
	{rules.LoadBalancerLocal, ipset.HashIPPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
	{rules.LoadBalancerSourceIP, ipset.HashIPPortIP, "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
	{rules.LoadBalancerSourceCIDR, ipset.HashIPPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
	{rules.NodePortTCP, ipset.BitmapPort, "Kubernetes nodeport TCP port for masquerade purpose"},
	{rules.NodePortLocalTCP, ipset.BitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
	{rules.NodePortUDP, ipset.BitmapPort, "Kubernetes nodeport UDP port for masquerade purpose"},
	{rules.NodePortLocalUDP, ipset.BitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
	{rules.NodePortSCTP, ipset.HashIPPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
	{rules.NodePortLocalSCTP, ipset.HashIPPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
	{rules.HealthCheckNodePort, ipset.BitmapPort, "Kubernetes health check node port"},
	{rules.IPVSIPs, ipset.HashIP, "Addresses on the ipvs interface"},
}

// SetTypes are the ipset types of this backend's sets, each once.
func SetTypes() []ipset.Type {
	var types []ipset.Type
	for _, s := range ipsetTable {
		if !slices.Contains(types, s.setType) {
			types = append(types, s.setType)
		}
	}
	return types
}

// setNames maps a set to its ipset name in one family: IPv6 sets are KUBE-6-..., cut
// to ipset's 31-character limit as upstream does.
type setNames map[rules.Set]string

func newSetNames(family v1.IPFamily) setNames {
	names := make(setNames, len(ipsetTable))
	for _, s := range ipsetTable {
		names[s.name] = familySetName(s.name, family)
	}
	return names
}

func familySetName(set rules.Set, family v1.IPFamily) string {
	if family != v1.IPv6Protocol {
		return set.String()
	}
	name := ipv6SetPrefix + strings.TrimPrefix(set.String(), upstreamSetPrefix)
	if len(name) > ipsetNameMaxLen {
		name = name[:ipsetNameMaxLen]
	}
	return name
}

// setSpecs returns the create specs of every set for a family.
func setSpecs(family v1.IPFamily) []*ipset.Set {
	fam := ipset.FamilyInet
	if family == v1.IPv6Protocol {
		fam = ipset.FamilyInet6
	}
	specs := make([]*ipset.Set, 0, len(ipsetTable))
	for _, s := range ipsetTable {
		spec := &ipset.Set{Name: familySetName(s.name, family), Type: s.setType, Comment: s.comment}
		if s.setType == ipset.BitmapPort {
			spec.PortMin, spec.PortMax = 0, 65535
		} else {
			spec.Family, spec.HashSize, spec.MaxElem = fam, ipsetHashSize, ipsetMaxElem
		}
		specs = append(specs, spec)
	}
	return specs
}

func setComment(set rules.Set) string {
	for _, s := range ipsetTable {
		if s.name == set {
			return s.comment
		}
	}
	return ""
}

// ipsetEntry is m as `ipset save` prints it.
func ipsetEntry(m rules.Member) string { return m.Entry() }

// parseIPSetEntry reads a member of set from the text ipset prints for it.
func parseIPSetEntry(set rules.Set, text string) (rules.Member, error) {
	return rules.ParseEntry(set, text)
}

// outFilterRuleText is an out-filter rule as the body of a KUBE-IPVS-OUT-FILTER
// iptables rule.
func outFilterRuleText(r rules.OutFilter) string {
	return "-s " + rules.AddrOf(r.Source).String() + " -m ipvs --vaddr " + rules.AddrOf(r.VAddr).String() +
		" --vproto " + rules.ProtocolName(r.Proto) + " --vport " + strconv.Itoa(int(r.Port)) + " -j DROP"
}
