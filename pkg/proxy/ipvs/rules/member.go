// Package rules is the vocabulary the IPVS proxier and its rules backends share: the
// sets of service addresses and ports that the rules beside IPVS match on, and the
// members of those sets, as Go values. No backend owns it: the iptables backend turns a
// member into an ipset entry, the nftables backend into a set element, and each turns
// what it reads from the kernel back into members.
package rules

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Set is one of the sets of service addresses and ports. The sets are upstream ipvs
// mode's ipsets; String gives the upstream (IPv4) ipset name, which is also the name
// logs and the plan use.
type Set uint8

const (
	LoopBack Set = iota + 1
	ClusterIP
	ExternalIP
	ExternalIPLocal
	LoadBalancer
	LoadBalancerFW
	LoadBalancerLocal
	LoadBalancerSourceIP
	LoadBalancerSourceCIDR
	NodePortTCP
	NodePortLocalTCP
	NodePortUDP
	NodePortLocalUDP
	NodePortSCTP
	NodePortLocalSCTP
	HealthCheckNodePort
	IPVSIPs
	numSets
)

// Sets lists every set, in upstream's creation order.
func Sets() []Set {
	out := make([]Set, 0, numSets-1)
	for s := Set(1); s < numSets; s++ {
		out = append(out, s)
	}
	return out
}

// Shape says which fields a set's members have.
type Shape uint8

const (
	// ShapeAddr members are an address (Addr).
	ShapeAddr Shape = iota + 1
	// ShapePort members are a port (Port); the set says the protocol.
	ShapePort
	// ShapeAddrPort members are an address, a protocol and a port.
	ShapeAddrPort
	// ShapeAddrPortSource members are an address, protocol and port, and a source
	// address (Src, with Bits the address length).
	ShapeAddrPortSource
	// ShapeAddrPortNet members are an address, protocol and port, and a source
	// prefix (Src masked to Bits).
	ShapeAddrPortNet
)

type setInfo struct {
	name  string
	shape Shape
}

var setTable = [numSets]setInfo{
	LoopBack:               {"KUBE-LOOP-BACK", ShapeAddrPortSource},
	ClusterIP:              {"KUBE-CLUSTER-IP", ShapeAddrPort},
	ExternalIP:             {"KUBE-EXTERNAL-IP", ShapeAddrPort},
	ExternalIPLocal:        {"KUBE-EXTERNAL-IP-LOCAL", ShapeAddrPort},
	LoadBalancer:           {"KUBE-LOAD-BALANCER", ShapeAddrPort},
	LoadBalancerFW:         {"KUBE-LOAD-BALANCER-FW", ShapeAddrPort},
	LoadBalancerLocal:      {"KUBE-LOAD-BALANCER-LOCAL", ShapeAddrPort},
	LoadBalancerSourceIP:   {"KUBE-LOAD-BALANCER-SOURCE-IP", ShapeAddrPortSource},
	LoadBalancerSourceCIDR: {"KUBE-LOAD-BALANCER-SOURCE-CIDR", ShapeAddrPortNet},
	NodePortTCP:            {"KUBE-NODE-PORT-TCP", ShapePort},
	NodePortLocalTCP:       {"KUBE-NODE-PORT-LOCAL-TCP", ShapePort},
	NodePortUDP:            {"KUBE-NODE-PORT-UDP", ShapePort},
	NodePortLocalUDP:       {"KUBE-NODE-PORT-LOCAL-UDP", ShapePort},
	NodePortSCTP:           {"KUBE-NODE-PORT-SCTP-HASH", ShapeAddrPort},
	NodePortLocalSCTP:      {"KUBE-NODE-PORT-LOCAL-SCTP-HASH", ShapeAddrPort},
	HealthCheckNodePort:    {"KUBE-HEALTH-CHECK-NODE-PORT", ShapePort},
	IPVSIPs:                {"KUBE-IPVS-IPS", ShapeAddr},
}

// String is the set's upstream ipset name (its IPv4 one).
func (s Set) String() string {
	if s == 0 || s >= numSets {
		return "set(" + strconv.Itoa(int(s)) + ")"
	}
	return setTable[s].name
}

// SourceRange says whether the set holds LoadBalancer source ranges.
func (s Set) SourceRange() bool { return s == LoadBalancerSourceIP || s == LoadBalancerSourceCIDR }

// Shape says which fields the set's members have.
func (s Set) Shape() Shape {
	if s == 0 || s >= numSets {
		return 0
	}
	return setTable[s].shape
}

// SetNamed returns the set whose upstream IPv4 name is name.
func SetNamed(name string) (Set, bool) {
	for s := Set(1); s < numSets; s++ {
		if setTable[s].name == name {
			return s, true
		}
	}
	return 0, false
}

// Protocol numbers (IANA), as members and virtual servers hold them.
const (
	TCP  uint8 = 6
	UDP  uint8 = 17
	SCTP uint8 = 132
)

// ProtocolName is the lower-case name of a protocol number ("tcp").
func ProtocolName(p uint8) string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// ProtocolNumber is the number of a protocol name, in any case; 0 if unknown.
func ProtocolNumber(name string) uint8 {
	switch name {
	case "tcp", "TCP":
		return TCP
	case "udp", "UDP":
		return UDP
	case "sctp", "SCTP":
		return SCTP
	}
	return 0
}

// Member is one member of one set. It holds no pointers: the maps keyed by members
// (a hundred thousand at scale) cost the garbage collector nothing to scan. Addresses
// are 16 bytes, IPv4 in its IPv4-mapped form; fields the set's shape lacks are zero.
type Member struct {
	Set   Set
	Proto uint8
	Port  uint16
	Addr  [16]byte
	Src   [16]byte
	// Bits is the source prefix length, counted in the source's own family (32 for
	// one IPv4 address).
	Bits uint8
}

// Addr16 is an address in the 16-byte form members hold.
func Addr16(a netip.Addr) [16]byte { return a.As16() }

// IP16 is a net.IP in the 16-byte form members hold (zero for an invalid one).
func IP16(ip net.IP) [16]byte {
	var out [16]byte
	copy(out[:], ip.To16())
	return out
}

// AddrOf is a 16-byte address in its usual form (IPv4 unmapped).
func AddrOf(a [16]byte) netip.Addr { return netip.AddrFrom16(a).Unmap() }

// AddrMember is a member of a ShapeAddr set.
func AddrMember(s Set, addr netip.Addr) Member { return Member{Set: s, Addr: addr.As16()} }

// PortMember is a member of a ShapePort set.
func PortMember(s Set, port uint16) Member { return Member{Set: s, Port: port} }

// ServiceMember is a member of a ShapeAddrPort set.
func ServiceMember(s Set, addr netip.Addr, proto uint8, port uint16) Member {
	return Member{Set: s, Addr: addr.As16(), Proto: proto, Port: port}
}

// SourceMember is a member of a ShapeAddrPortSource or ShapeAddrPortNet set: src is
// masked to its length.
func SourceMember(s Set, addr netip.Addr, proto uint8, port uint16, src netip.Prefix) Member {
	m := ServiceMember(s, addr, proto, port)
	m.Src, m.Bits = src.Masked().Addr().As16(), uint8(src.Bits())
	return m
}

// IP is the member's address in its usual form (invalid when it has none).
func (m Member) IP() netip.Addr {
	if m.Set.Shape() == ShapePort {
		return netip.Addr{}
	}
	return AddrOf(m.Addr)
}

// Source is the member's source prefix (invalid when it has none).
func (m Member) Source() netip.Prefix {
	switch m.Set.Shape() {
	case ShapeAddrPortSource, ShapeAddrPortNet:
		return netip.PrefixFrom(AddrOf(m.Src), int(m.Bits))
	}
	return netip.Prefix{}
}

// String is the member as logs and the plan print it: "10.96.0.1 tcp/80",
// "10.96.0.1 tcp/80 from 10.0.0.0/8", "30080" (a port set's), "10.96.0.1".
func (m Member) String() string {
	switch m.Set.Shape() {
	case ShapeAddr:
		return m.IP().String()
	case ShapePort:
		return strconv.Itoa(int(m.Port))
	case ShapeAddrPort:
		return m.IP().String() + " " + ProtocolName(m.Proto) + "/" + strconv.Itoa(int(m.Port))
	case ShapeAddrPortSource, ShapeAddrPortNet:
		return m.IP().String() + " " + ProtocolName(m.Proto) + "/" + strconv.Itoa(int(m.Port)) + " from " + m.Source().String()
	}
	return "?"
}

// Compare orders members by set, address, protocol, port and source.
func Compare(a, b Member) int {
	return cmp.Or(cmp.Compare(a.Set, b.Set), bytes.Compare(a.Addr[:], b.Addr[:]), cmp.Compare(a.Proto, b.Proto),
		cmp.Compare(a.Port, b.Port), bytes.Compare(a.Src[:], b.Src[:]), cmp.Compare(a.Bits, b.Bits))
}

// ServicePort is a virtual address, protocol and port: a LoadBalancer's source
// ranges are kept and rewritten per ServicePort.
type ServicePort struct {
	Addr  [16]byte
	Proto uint8
	Port  uint16
}

// ServicePort is the member's address, protocol and port.
func (m Member) ServicePort() ServicePort { return ServicePort{m.Addr, m.Proto, m.Port} }

// OutFilter is a rule of the out filter: a packet from Source leaving for the virtual
// server VAddr:Port (Proto) is dropped (kubernetes#119656: the node's own access to a
// LoadBalancer address whose source ranges do not include the node).
type OutFilter struct {
	Source [16]byte
	VAddr  [16]byte
	Proto  uint8
	Port   uint16
}

// String is the rule as logs and the plan print it.
func (r OutFilter) String() string {
	return "drop from " + AddrOf(r.Source).String() + " to virtual server " + AddrOf(r.VAddr).String() + " " +
		ProtocolName(r.Proto) + "/" + strconv.Itoa(int(r.Port))
}

// CompareOutFilters orders out-filter rules.
func CompareOutFilters(a, b OutFilter) int {
	return cmp.Or(bytes.Compare(a.VAddr[:], b.VAddr[:]), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port),
		bytes.Compare(a.Source[:], b.Source[:]))
}

// Entry is m in the entry form, the text ipset prints for members of its set's
// type: "10.96.0.1,tcp:80", "10.96.0.1,tcp:80,10.244.0.0/16" (a host-length source
// without its length), "30080", "10.96.0.1". Tests write members this way.
func (m Member) Entry() string {
	port := strconv.Itoa(int(m.Port))
	switch m.Set.Shape() {
	case ShapeAddr:
		return m.IP().String()
	case ShapePort:
		return port
	}
	e := m.IP().String() + "," + ProtocolName(m.Proto) + ":" + port
	if src := m.Source(); src.IsValid() {
		if src.IsSingleIP() {
			return e + "," + src.Addr().String()
		}
		return e + "," + src.String()
	}
	return e
}

// ParseEntry reads a member of set from its entry form (Entry).
func ParseEntry(set Set, text string) (Member, error) {
	bad := func() (Member, error) {
		return Member{}, fmt.Errorf("set %s: entry %q has not the form of its members", set, text)
	}
	switch set.Shape() {
	case ShapeAddr:
		a, err := netip.ParseAddr(text)
		if err != nil {
			return bad()
		}
		return AddrMember(set, a.Unmap()), nil
	case ShapePort:
		port, err := strconv.ParseUint(text, 10, 16)
		if err != nil {
			return bad()
		}
		return PortMember(set, uint16(port)), nil
	}
	parts := strings.Split(text, ",")
	want := 2
	if set.Shape() != ShapeAddrPort {
		want = 3
	}
	if len(parts) != want {
		return bad()
	}
	a, err := netip.ParseAddr(parts[0])
	protoText, portText, ok := strings.Cut(parts[1], ":")
	port, perr := strconv.ParseUint(portText, 10, 16)
	proto := ProtocolNumber(protoText)
	if err != nil || !ok || perr != nil || proto == 0 {
		return bad()
	}
	m := ServiceMember(set, a.Unmap(), proto, uint16(port))
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
	if set.Shape() == ShapeAddrPortSource && !src.IsSingleIP() {
		return bad()
	}
	return SourceMember(set, a.Unmap(), proto, uint16(port), src), nil
}
