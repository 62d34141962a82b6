package ipvs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	libipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// The virtual server dump of one family.
//
// IPVS has no family filter: a service dump returns every virtual server of both
// families. The IPv6 proxier of an IPv4-only node used to take 10,000 IPv4 virtual
// servers apart (every attribute, the counters, a Service each) to keep none: 2.7 s
// in the test VM under TCG, at every full sync and resync read. dumpServices reads
// the dump on the pipelined writes' socket and looks at a virtual server's address
// family (the first attribute the kernel writes) before anything else, so another
// family's virtual servers cost a few comparisons each.

const (
	cmdGetService = 4

	svcAttrFWMark = 5
	svcAttrStats  = 10

	statsAttrConns    = 1
	statsAttrInPkts   = 2
	statsAttrOutPkts  = 3
	statsAttrInBytes  = 4
	statsAttrOutBytes = 5

	nlaTypeMask = 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// dumpServices returns the virtual servers of address family af (0: both) as
// moby/ipvs's GetServices would. Callers hold c.mu.
func (c *Client) dumpServices(af ipfamily.Family) ([]*libipvs.Service, error) {
	s, err := c.socket()
	if err != nil {
		return nil, err
	}
	s.seq++
	seq := s.seq
	req := appendNlmsg(nil, c.family, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, seq, []byte{cmdGetService, ipvsGenlVersion, 0, 0})
	if err := unix.Sendto(s.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sending the service dump request: %w", err)
	}
	var out []*libipvs.Service
	rb := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(s.fd, rb, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return nil, fmt.Errorf("reading the service dump: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			return nil, fmt.Errorf("parsing the service dump: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // an acknowledgement left over from an abandoned write
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
						return nil, fmt.Errorf("service dump: %w", syscall.Errno(-code))
					}
				}
				return out, nil
			case c.family:
				svc, err := parseServiceMessage(m.Data, uint16(af))
				if err != nil {
					return nil, err
				}
				if svc != nil {
					out = append(out, svc)
				}
			}
		}
	}
}

// parseServiceMessage parses one service message (genlmsghdr and attributes); nil
// when it is of another family than af (0: any).
func parseServiceMessage(b []byte, af uint16) (*libipvs.Service, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("service dump: short message")
	}
	var nested []byte
	for typ, v := range attrs(b[4:]) {
		if typ == cmdAttrService {
			nested = v
			break
		}
	}
	if nested == nil {
		return nil, fmt.Errorf("service dump: message without a service")
	}
	svc := &libipvs.Service{}
	var addr []byte
	for typ, v := range attrs(nested) {
		switch {
		case typ == svcAttrAF && len(v) >= 2:
			// The kernel writes the family first (ip_vs_genl_fill_service): another
			// family's virtual server ends here.
			if svc.AddressFamily = binary.NativeEndian.Uint16(v); af != 0 && svc.AddressFamily != af {
				return nil, nil
			}
		case typ == svcAttrProtocol && len(v) >= 2:
			svc.Protocol = binary.NativeEndian.Uint16(v)
		case typ == svcAttrAddr:
			addr = v
		case typ == svcAttrPort && len(v) >= 2:
			svc.Port = binary.BigEndian.Uint16(v)
		case typ == svcAttrFWMark && len(v) >= 4:
			svc.FWMark = binary.NativeEndian.Uint32(v)
		case typ == svcAttrSchedName:
			svc.SchedName = cString(v)
		case typ == svcAttrFlags && len(v) >= 4:
			svc.Flags = binary.NativeEndian.Uint32(v)
		case typ == svcAttrTimeout && len(v) >= 4:
			svc.Timeout = binary.NativeEndian.Uint32(v)
		case typ == svcAttrNetmask && len(v) >= 4:
			svc.Netmask = binary.NativeEndian.Uint32(v)
		case typ == svcAttrStats:
			svc.Stats = parseStats(v)
		}
	}
	if af != 0 && svc.AddressFamily != af {
		return nil, nil
	}
	if addr != nil {
		switch {
		case svc.AddressFamily == unix.AF_INET && len(addr) >= 4:
			svc.Address = net.IP(append([]byte(nil), addr[:4]...))
		case svc.AddressFamily == unix.AF_INET6 && len(addr) >= 16:
			svc.Address = net.IP(append([]byte(nil), addr[:16]...))
		default:
			return nil, fmt.Errorf("service dump: address %x of family %d", addr, svc.AddressFamily)
		}
	}
	return svc, nil
}

func parseStats(b []byte) libipvs.SvcStats {
	var s libipvs.SvcStats
	for typ, v := range attrs(b) {
		switch {
		case typ == statsAttrConns && len(v) >= 4:
			s.Connections = binary.NativeEndian.Uint32(v)
		case typ == statsAttrInPkts && len(v) >= 4:
			s.PacketsIn = binary.NativeEndian.Uint32(v)
		case typ == statsAttrOutPkts && len(v) >= 4:
			s.PacketsOut = binary.NativeEndian.Uint32(v)
		case typ == statsAttrInBytes && len(v) >= 8:
			s.BytesIn = binary.NativeEndian.Uint64(v)
		case typ == statsAttrOutBytes && len(v) >= 8:
			s.BytesOut = binary.NativeEndian.Uint64(v)
		}
	}
	return s
}

// attrs iterates the netlink attributes in b: type (flags masked off) and value.
// It stops at the first malformed one.
func attrs(b []byte) func(yield func(uint16, []byte) bool) {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= unix.NLA_HDRLEN {
			l := int(binary.NativeEndian.Uint16(b[0:2]))
			if l < unix.NLA_HDRLEN || l > len(b) {
				return
			}
			if !yield(binary.NativeEndian.Uint16(b[2:4])&nlaTypeMask, b[unix.NLA_HDRLEN:l]) {
				return
			}
			l = (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
			if l > len(b) {
				return
			}
			b = b[l:]
		}
	}
}

// cString is a NUL-terminated attribute as a string.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
