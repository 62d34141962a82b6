package ipvs

import (
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
)

// The ipsets upstream kube-proxy's ipvs mode programs. Names and comments are part of
// the compatibility promise: operators' tooling and upstream's own cleanup know them.
const (
	setLoopBack               = "KUBE-LOOP-BACK"
	setClusterIP              = "KUBE-CLUSTER-IP"
	setExternalIP             = "KUBE-EXTERNAL-IP"
	setExternalIPLocal        = "KUBE-EXTERNAL-IP-LOCAL"
	setLoadBalancer           = "KUBE-LOAD-BALANCER"
	setLoadBalancerFW         = "KUBE-LOAD-BALANCER-FW"
	setLoadBalancerLocal      = "KUBE-LOAD-BALANCER-LOCAL"
	setLoadBalancerSourceIP   = "KUBE-LOAD-BALANCER-SOURCE-IP"
	setLoadBalancerSourceCIDR = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
	setNodePortTCP            = "KUBE-NODE-PORT-TCP"
	setNodePortLocalTCP       = "KUBE-NODE-PORT-LOCAL-TCP"
	setNodePortUDP            = "KUBE-NODE-PORT-UDP"
	setNodePortLocalUDP       = "KUBE-NODE-PORT-LOCAL-UDP"
	setNodePortSCTP           = "KUBE-NODE-PORT-SCTP-HASH"
	setNodePortLocalSCTP      = "KUBE-NODE-PORT-LOCAL-SCTP-HASH"
	setHealthCheckNodePort    = "KUBE-HEALTH-CHECK-NODE-PORT"
	setIPVSIPs                = "KUBE-IPVS-IPS"
	ipsetHashSize             = 1024
	ipsetMaxElem              = 65536
	ipsetNameMaxLen           = 31
	ipv6SetPrefix             = "KUBE-6-"
	upstreamSetPrefix         = "KUBE-"
)

// setInfo is one row of the ipset table.
type setInfo struct {
	name    string
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

// setNames maps a set's base (IPv4) name to its name in one family: IPv6 sets are
// KUBE-6-..., cut to ipset's 31-character limit as upstream does.
type setNames map[string]string

func newSetNames(family v1.IPFamily) setNames {
	names := make(setNames, len(ipsetTable))
	for _, s := range ipsetTable {
		names[s.name] = familySetName(s.name, family)
	}
	return names
}

func familySetName(base string, family v1.IPFamily) string {
	if family != v1.IPv6Protocol {
		return base
	}
	name := ipv6SetPrefix + strings.TrimPrefix(base, upstreamSetPrefix)
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

func setComment(base string) string {
	for _, s := range ipsetTable {
		if s.name == base {
			return s.comment
		}
	}
	return ""
}
