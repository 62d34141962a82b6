package ipvs

import (
	"fmt"
	"net"
	"syscall"

	libipvs "github.com/moby/ipvs"
)

// Protocol numbers as the kernel knows them (IPPROTO_*).
const (
	protoTCP  = syscall.IPPROTO_TCP  // 6
	protoUDP  = syscall.IPPROTO_UDP  // 17
	protoSCTP = syscall.IPPROTO_SCTP // 132
)

func protocolNumber(p string) (uint16, error) {
	switch p {
	case TCP:
		return protoTCP, nil
	case UDP:
		return protoUDP, nil
	case SCTP:
		return protoSCTP, nil
	}
	return 0, fmt.Errorf("unsupported protocol %q", p)
}

func protocolName(n uint16) (string, error) {
	switch n {
	case protoTCP:
		return TCP, nil
	case protoUDP:
		return UDP, nil
	case protoSCTP:
		return SCTP, nil
	}
	return "", fmt.Errorf("unsupported protocol number %d", n)
}

// family returns the address family of ip and the netmask IPVS expects for a
// single-address service of that family: a 32-bit mask for IPv4, a prefix length
// for IPv6 (the kernel rejects an IPv6 netmask outside 1..128 with EINVAL).
func family(ip net.IP) (af uint16, netmask uint32, err error) {
	if ip.To4() != nil {
		return syscall.AF_INET, 0xffffffff, nil
	}
	if len(ip) == net.IPv6len {
		return syscall.AF_INET6, 128, nil
	}
	return 0, 0, fmt.Errorf("invalid IP address %q", ip)
}

// normalizeIP returns the 4-byte form of IPv4 addresses so that values read back
// from the kernel compare and print like the ones written.
func normalizeIP(ip net.IP) net.IP {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip
}

func toService(vs *VirtualServer) (*libipvs.Service, error) {
	if vs == nil {
		return nil, fmt.Errorf("nil virtual server")
	}
	af, mask, err := family(vs.Address)
	if err != nil {
		return nil, fmt.Errorf("virtual server %s: %w", vs, err)
	}
	proto, err := protocolNumber(vs.Protocol)
	if err != nil {
		return nil, fmt.Errorf("virtual server %s: %w", vs, err)
	}
	return &libipvs.Service{
		Address:   vs.Address,
		Protocol:  proto,
		Port:      vs.Port,
		SchedName: vs.Scheduler,
		// The kernel sets the hashed flag itself and refuses to hash a service that
		// arrives with it already set, so it is never sent.
		Flags:         vs.Flags &^ FlagHashed,
		Timeout:       vs.Timeout,
		Netmask:       mask,
		AddressFamily: af,
	}, nil
}

// toVirtualServer converts a service read from the kernel. Flags are kept as the
// kernel reports them, hashed flag included (VirtualServer.Equal ignores it).
func toVirtualServer(svc *libipvs.Service) (*VirtualServer, error) {
	proto, err := protocolName(svc.Protocol)
	if err != nil {
		return nil, fmt.Errorf("service %s:%d: %w", svc.Address, svc.Port, err)
	}
	return &VirtualServer{
		Address:   normalizeIP(svc.Address),
		Protocol:  proto,
		Port:      svc.Port,
		Scheduler: svc.SchedName,
		Flags:     svc.Flags,
		Timeout:   svc.Timeout,
		Stats: Counters{
			Connections: uint64(svc.Stats.Connections),
			PacketsIn:   uint64(svc.Stats.PacketsIn),
			PacketsOut:  uint64(svc.Stats.PacketsOut),
			BytesIn:     svc.Stats.BytesIn,
			BytesOut:    svc.Stats.BytesOut,
		},
	}, nil
}

func toDestination(rs *RealServer) (*libipvs.Destination, error) {
	if rs == nil {
		return nil, fmt.Errorf("nil real server")
	}
	af, _, err := family(rs.Address)
	if err != nil {
		return nil, fmt.Errorf("real server %s: %w", rs, err)
	}
	if rs.Weight < 0 {
		return nil, fmt.Errorf("real server %s: negative weight %d", rs, rs.Weight)
	}
	return &libipvs.Destination{
		Address:         rs.Address,
		Port:            rs.Port,
		Weight:          rs.Weight,
		ConnectionFlags: libipvs.ConnectionFlagMasq,
		AddressFamily:   af,
	}, nil
}

func toRealServer(d *libipvs.Destination) *RealServer {
	return &RealServer{
		Address:      normalizeIP(d.Address),
		Port:         d.Port,
		Weight:       d.Weight,
		ActiveConn:   d.ActiveConnections,
		InactiveConn: d.InactiveConnections,
	}
}

// checkSameFamily rejects a real server of the other address family than its
// virtual server. The kernel would need IPVS_DEST_ATTR_ADDR_FAMILY to tell (and
// then refuses mixed families for masquerading with EINVAL), but moby/ipvs never
// sends that attribute: the kernel then reads the address in the service's family
// and stores a garbled destination (fd01::1 becomes 253.1.0.0). So the check is
// made here, with the errno the kernel would give.
func checkSameFamily(vs *VirtualServer, rs *RealServer) error {
	if (vs.Address.To4() == nil) != (rs.Address.To4() == nil) {
		return fmt.Errorf("real server %s is not in the address family of %s: %w", rs, vs, syscall.EINVAL)
	}
	return nil
}
