package ipvs

import (
	"fmt"
	"net/netip"
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
	setLoopBack               = rules.LoopBack
	setClusterIP              = rules.ClusterIP
	setExternalIP             = rules.ExternalIP
	setExternalIPLocal        = rules.ExternalIPLocal
	setLoadBalancer           = rules.LoadBalancer
	setLoadBalancerFW         = rules.LoadBalancerFW
	setLoadBalancerLocal      = rules.LoadBalancerLocal
	setLoadBalancerSourceIP   = rules.LoadBalancerSourceIP
	setLoadBalancerSourceCIDR = rules.LoadBalancerSourceCIDR
	setNodePortTCP            = rules.NodePortTCP
	setNodePortLocalTCP       = rules.NodePortLocalTCP
	setNodePortUDP            = rules.NodePortUDP
	setNodePortLocalUDP       = rules.NodePortLocalUDP
	setNodePortSCTP           = rules.NodePortSCTP
	setNodePortLocalSCTP      = rules.NodePortLocalSCTP
	setHealthCheckNodePort    = rules.HealthCheckNodePort
	setIPVSIPs                = rules.IPVSIPs
	ipsetHashSize             = 1024
	ipsetMaxElem              = 65536
	ipsetNameMaxLen           = 31
	ipv6SetPrefix             = "KUBE-6-"
	upstreamSetPrefix         = "KUBE-"
)

// setInfo is one row of the ipset table.
type setInfo struct {
	name    rules.Set
	setType ipset.Type
	comment string // also used as the iptables rule comment
}

// ipsetTable lists every set, in creation order.
var ipsetTable = []setInfo{
	{setLoopBack, ipset.HashIPPortIP, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
	{setClusterIP, ipset.HashIPPort, "Kubernetes service cluster ip + port for masquerade purpose"},
	{setExternalIP, ipset.HashIPPort, "Kubernetes service external ip + port for masquerade and filter purpose"},
	{setExternalIPLocal, ipset.HashIPPort, "Kubernetes service external ip + port with externalTrafficPolicy=local"},
	{setLoadBalancer, ipset.HashIPPort, "Kubernetes service lb portal"},
	{setLoadBalancerFW, ipset.HashIPPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
	{setLoadBalancerLocal, ipset.HashIPPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
	{setLoadBalancerSourceIP, ipset.HashIPPortIP, "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
	{setLoadBalancerSourceCIDR, ipset.HashIPPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
	{setNodePortTCP, ipset.BitmapPort, "Kubernetes nodeport TCP port for masquerade purpose"},
	{setNodePortLocalTCP, ipset.BitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
	{setNodePortUDP, ipset.BitmapPort, "Kubernetes nodeport UDP port for masquerade purpose"},
	{setNodePortLocalUDP, ipset.BitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
	{setNodePortSCTP, ipset.HashIPPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
	{setNodePortLocalSCTP, ipset.HashIPPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
	{setHealthCheckNodePort, ipset.BitmapPort, "Kubernetes health check node port"},
	{setIPVSIPs, ipset.HashIP, "Addresses on the ipvs interface"},
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

// ipsetEntry is m in the text form `ipset save` prints: "10.96.0.1,tcp:80",
// "10.96.0.1,tcp:80,10.244.0.0/16" (a host-length source without its length),
// "30080", "10.96.0.1".
func ipsetEntry(m rules.Member) string {
	port := strconv.Itoa(int(m.Port))
	switch m.Set.Shape() {
	case rules.ShapeAddr:
		return m.IP().String()
	case rules.ShapePort:
		return port
	}
	e := m.IP().String() + "," + rules.ProtocolName(m.Proto) + ":" + port
	if src := m.Source(); src.IsValid() {
		if src.IsSingleIP() {
			return e + "," + src.Addr().String()
		}
		return e + "," + src.String()
	}
	return e
}

// parseIPSetEntry reads a member of set from the text ipset prints for it.
func parseIPSetEntry(set rules.Set, text string) (rules.Member, error) {
	bad := func() (rules.Member, error) {
		return rules.Member{}, fmt.Errorf("ipset %s: entry %q has not the form of its type", set, text)
	}
	switch set.Shape() {
	case rules.ShapeAddr:
		a, err := netip.ParseAddr(text)
		if err != nil {
			return bad()
		}
		return rules.AddrMember(set, a.Unmap()), nil
	case rules.ShapePort:
		port, err := strconv.ParseUint(text, 10, 16)
		if err != nil {
			return bad()
		}
		return rules.PortMember(set, uint16(port)), nil
	}
	parts := strings.Split(text, ",")
	want := 2
	if set.Shape() != rules.ShapeAddrPort {
		want = 3
	}
	if len(parts) != want {
		return bad()
	}
	a, err := netip.ParseAddr(parts[0])
	protoText, portText, ok := strings.Cut(parts[1], ":")
	port, perr := strconv.ParseUint(portText, 10, 16)
	proto := rules.ProtocolNumber(protoText)
	if err != nil || !ok || perr != nil || proto == 0 {
		return bad()
	}
	m := rules.ServiceMember(set, a.Unmap(), proto, uint16(port))
	if want == 2 {
		return m, nil
	}
	src, err := netip.ParsePrefix(parts[2])
	if err != nil {
		sa, aerr := netip.ParseAddr(parts[2])
		if aerr != nil {
			return bad()
		}
		src = netip.PrefixFrom(sa.Unmap(), sa.Unmap().BitLen())
	}
	if set.Shape() == rules.ShapeAddrPortSource && !src.IsSingleIP() {
		return bad()
	}
	return rules.SourceMember(set, a.Unmap(), proto, uint16(port), src), nil
}

// outFilterRuleText is an out-filter rule as the body of a KUBE-IPVS-OUT-FILTER
// iptables rule.
func outFilterRuleText(r rules.OutFilter) string {
	return "-s " + rules.AddrOf(r.Source).String() + " -m ipvs --vaddr " + rules.AddrOf(r.VAddr).String() +
		" --vproto " + rules.ProtocolName(r.Proto) + " --vport " + strconv.Itoa(int(r.Port)) + " -j DROP"
}
