package ipvs

import (
	"bytes"
	"cmp"
	"net"
	"net/netip"
	"strconv"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// vsKey identifies a virtual server the way the kernel does: address, protocol and
// port. It holds no pointers, so building one allocates nothing and the maps keyed by
// it (tens of thousands of entries) cost the garbage collector nothing to scan. The
// string form ("TCP/10.0.0.1:80") is made only for logs and errors.
type vsKey struct {
	addr  [16]byte // IPv4 in its IPv4-mapped IPv6 form
	port  uint16
	proto uint8 // IANA protocol number
}

// rsKey identifies a real server within its virtual server.
type rsKey struct {
	addr [16]byte
	port uint16
}

// desiredRS is one real server a virtual server should have.
type desiredRS struct {
	key    rsKey
	weight int32
}

// drainKey names one draining real server.
type drainKey struct {
	vs vsKey
	rs rsKey
}

func protoNum(p string) uint8 {
	switch p {
	case ipvs.TCP:
		return 6
	case ipvs.UDP:
		return 17
	case ipvs.SCTP:
		return 132
	}
	return 0
}

func protoName(n uint8) string {
	switch n {
	case 6:
		return ipvs.TCP
	case 17:
		return ipvs.UDP
	case 132:
		return ipvs.SCTP
	}
	return strconv.Itoa(int(n))
}

func keyOfVS(vs *ipvs.VirtualServer) vsKey {
	k := vsKey{port: vs.Port, proto: protoNum(vs.Protocol)}
	copy(k.addr[:], vs.Address.To16())
	return k
}

func makeVSKey(protocol string, ip net.IP, port uint16) vsKey {
	k := vsKey{port: port, proto: protoNum(protocol)}
	copy(k.addr[:], ip.To16())
	return k
}

func keyOfRS(ip net.IP, port uint16) rsKey {
	k := rsKey{port: port}
	copy(k.addr[:], ip.To16())
	return k
}

// rsKeyOf is the key of an endpoint's real server; ok is false for a port no real
// server can have.
func rsKeyOf(ep *proxy.Endpoint) (rsKey, bool) {
	if ep.Port <= 0 || ep.Port > 65535 {
		return rsKey{}, false
	}
	return rsKey{addr: ep.Addr16(), port: uint16(ep.Port)}, true
}

// keyIP is the address of a key in its usual form (4 bytes for IPv4).
func keyIP(addr [16]byte) net.IP {
	a := netip.AddrFrom16(addr).Unmap()
	return net.IP(a.AsSlice())
}

func keyAddrString(addr [16]byte) string { return netip.AddrFrom16(addr).Unmap().String() }

func (k vsKey) String() string {
	return protoName(k.proto) + "/" + net.JoinHostPort(keyAddrString(k.addr), strconv.Itoa(int(k.port)))
}

func (k rsKey) String() string {
	return net.JoinHostPort(keyAddrString(k.addr), strconv.Itoa(int(k.port)))
}

// realServer is the kernel's form of a real server, made only when one is written.
func (k rsKey) realServer(weight int32) *ipvs.RealServer {
	return &ipvs.RealServer{Address: keyIP(k.addr), Port: k.port, Weight: int(weight)}
}

func compareVSKeys(a, b vsKey) int {
	return cmp.Or(cmp.Compare(a.proto, b.proto), bytes.Compare(a.addr[:], b.addr[:]), cmp.Compare(a.port, b.port))
}

func compareRSKeys(a, b rsKey) int {
	return cmp.Or(bytes.Compare(a.addr[:], b.addr[:]), cmp.Compare(a.port, b.port))
}
