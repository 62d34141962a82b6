// Package ipvs is the kernel boundary for IPVS: virtual servers, real servers and
// timeouts, over generic netlink (github.com/moby/ipvs) with a kernel-faithful Fake.
package ipvs

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// Protocol names as kube-proxy uses them.
const (
	TCP  = "TCP"
	UDP  = "UDP"
	SCTP = "SCTP"
)

// Virtual server flags (linux/ip_vs.h IP_VS_SVC_F_*).
const (
	FlagPersistent = 0x0001 // session affinity (persistence)
	FlagHashed     = 0x0002 // set by the kernel on every service; ignored on compare
	FlagOnePacket  = 0x0004
	FlagSchedSH1   = 0x0008 // mh / sh: source-hash fallback
	FlagSchedSH2   = 0x0010 // mh / sh: source-hash port
)

// VirtualServer is one IPVS service keyed by (Address, Protocol, Port).
type VirtualServer struct {
	Address   net.IP
	Protocol  string // TCP, UDP or SCTP
	Port      uint16
	Scheduler string
	Flags     uint32
	Timeout   uint32 // persistence timeout in seconds, with FlagPersistent
	// Stats are the kernel's cumulative counters, filled by GetVirtualServers and
	// ignored everywhere else (Equal, Add, Update).
	Stats Counters
}

// Counters are a virtual server's cumulative statistics.
type Counters struct {
	Connections uint64
	PacketsIn   uint64
	PacketsOut  uint64
	BytesIn     uint64
	BytesOut    uint64
}

// Key identifies a virtual server: "TCP/10.0.0.1:80" or "TCP/[fd00::1]:80".
func (vs *VirtualServer) Key() string {
	return vs.Protocol + "/" + net.JoinHostPort(vs.Address.String(), strconv.Itoa(int(vs.Port)))
}

func (vs *VirtualServer) String() string { return vs.Key() }

// Equal compares every programmable field (the kernel's hashed flag excluded).
func (vs *VirtualServer) Equal(o *VirtualServer) bool {
	return vs.Address.Equal(o.Address) && vs.Protocol == o.Protocol && vs.Port == o.Port &&
		vs.Scheduler == o.Scheduler && vs.Flags&^FlagHashed == o.Flags&^FlagHashed && vs.Timeout == o.Timeout
}

// RealServer is one destination of a virtual server, always in masquerade (NAT) mode.
type RealServer struct {
	Address      net.IP
	Port         uint16
	Weight       int
	ActiveConn   int // read-only, filled by GetRealServers
	InactiveConn int // read-only, filled by GetRealServers
}

// Key identifies a real server within its virtual server: "10.1.0.5:8080".
func (rs *RealServer) Key() string {
	return net.JoinHostPort(rs.Address.String(), strconv.Itoa(int(rs.Port)))
}

func (rs *RealServer) String() string { return rs.Key() }

// Interface is what the proxier needs from IPVS. Errors wrap the errno so that
// IsNotFound / IsExists work on them.
type Interface interface {
	AddVirtualServer(ctx context.Context, vs *VirtualServer) error
	UpdateVirtualServer(ctx context.Context, vs *VirtualServer) error
	DeleteVirtualServer(ctx context.Context, vs *VirtualServer) error
	GetVirtualServer(ctx context.Context, vs *VirtualServer) (*VirtualServer, error)
	GetVirtualServers(ctx context.Context) ([]*VirtualServer, error)

	AddRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error
	UpdateRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error
	DeleteRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error
	GetRealServers(ctx context.Context, vs *VirtualServer) ([]*RealServer, error)
	// GetAll returns every virtual server of family af (ipfamily.Any: both) that keep
	// accepts (nil: all) with its real servers: the answer of GetVirtualServers
	// plus GetRealServers for each, read in bulk (a full reconcile at 10k virtual
	// servers would otherwise make 10k round trips). Another family's virtual
	// servers are passed over before they are parsed; when keep accepts none, no
	// real server is read.
	GetAll(ctx context.Context, af ipfamily.Family, keep func(*VirtualServer) bool) ([]VirtualServerDump, error)
	// Write applies many changes in order, pipelined (many requests per send,
	// the acknowledgements read after), and returns one error per write: each
	// succeeds or fails on its own, exactly as the single calls would.
	Write(ctx context.Context, writes []Write) []error

	// ConfigureTimeouts sets the tcp, tcpfin and udp timeouts; 0 keeps a value.
	ConfigureTimeouts(ctx context.Context, tcp, tcpfin, udp time.Duration) error
	// Flush removes every virtual server (used only by tests and never by --cleanup,
	// which removes only ours).
	Flush(ctx context.Context) error
}

// errorf wraps err with what failed and where.
func errorf(err error, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, err)...)
}
