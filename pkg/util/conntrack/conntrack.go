package conntrack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Protocol numbers (IPPROTO_*) for Flow.Protocol.
const (
	ProtocolTCP  uint8 = unix.IPPROTO_TCP
	ProtocolUDP  uint8 = unix.IPPROTO_UDP
	ProtocolSCTP uint8 = unix.IPPROTO_SCTP
)

// maxDumpAttempts bounds the retries of a dump the kernel marked interrupted
// (NLM_F_DUMP_INTR: the table changed while it was being read).
const maxDumpAttempts = 3

// Client lists and deletes the conntrack entries of one IP family in the calling
// thread's network namespace over ctnetlink.
type Client struct {
	mu     sync.Mutex
	h      *vnl.Handle
	family vnl.InetFamily
}

var _ Interface = &Client{}

// New opens a ctnetlink socket for family unix.AF_INET or unix.AF_INET6.
func New(family uint8) (*Client, error) {
	if family != unix.AF_INET && family != unix.AF_INET6 {
		return nil, fmt.Errorf("opening conntrack: unsupported address family %d", family)
	}
	h, err := vnl.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening conntrack netlink socket: %w", err)
	}
	return &Client{h: h, family: vnl.InetFamily(family)}, nil
}

// Close releases the socket.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h != nil {
		c.h.Close()
		c.h = nil
	}
}

func (c *Client) familyName() string {
	if c.family == unix.AF_INET6 {
		return "IPv6"
	}
	return "IPv4"
}

// ListFlows dumps the conntrack table and returns the flows of protocol.
func (c *Client) ListFlows(ctx context.Context, protocol uint8) ([]Flow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return nil, fmt.Errorf("conntrack client is closed")
	}
	var entries []*vnl.ConntrackFlow
	var err error
	for range maxDumpAttempts {
		entries, err = c.h.ConntrackTableList(vnl.ConntrackTable, c.family)
		if !errors.Is(err, vnl.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s conntrack entries: %w", c.familyName(), err)
	}
	var out []Flow
	for _, e := range entries {
		if e.Forward.Protocol != protocol {
			continue
		}
		out = append(out, fromConntrackFlow(e))
	}
	return out, nil
}

func fromConntrackFlow(e *vnl.ConntrackFlow) Flow {
	return Flow{
		Protocol:     e.Forward.Protocol,
		OrigSrc:      normalizeIP(e.Forward.SrcIP),
		OrigDst:      normalizeIP(e.Forward.DstIP),
		OrigSrcPort:  e.Forward.SrcPort,
		OrigDstPort:  e.Forward.DstPort,
		ReplySrc:     normalizeIP(e.Reverse.SrcIP),
		ReplySrcPort: e.Reverse.SrcPort,
	}
}

// origKey identifies a flow by its original tuple.
func origKey(protocol uint8, src, dst net.IP, sport, dport uint16) string {
	return strconv.Itoa(int(protocol)) + " " + net.JoinHostPort(src.String(), strconv.Itoa(int(sport))) +
		" " + net.JoinHostPort(dst.String(), strconv.Itoa(int(dport)))
}

// tupleFilter matches the entries whose original tuple is one of a set.
type tupleFilter map[string]bool

func (f tupleFilter) MatchConntrackFlow(e *vnl.ConntrackFlow) bool {
	return f[origKey(e.Forward.Protocol, e.Forward.SrcIP, e.Forward.DstIP, e.Forward.SrcPort, e.Forward.DstPort)]
}

// DeleteFlows deletes the entries whose original tuple equals one of flows'. The
// kernel offers no delete-by-tuple for a set, so this is one dump plus one delete
// per matching entry (vishvananda/netlink's ConntrackDeleteFilters); an entry that
// vanished meanwhile counts as deleted, as the caller wanted it gone.
func (c *Client) DeleteFlows(ctx context.Context, flows []Flow) (int, error) {
	if len(flows) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	filter := tupleFilter{}
	for _, f := range flows {
		filter[origKey(f.Protocol, f.OrigSrc, f.OrigDst, f.OrigSrcPort, f.OrigDstPort)] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return 0, fmt.Errorf("conntrack client is closed")
	}
	total := 0
	var err error
	for range maxDumpAttempts {
		var n uint
		n, err = c.h.ConntrackDeleteFilters(vnl.ConntrackTable, c.family, filter)
		total += int(n)
		// An interrupted dump deleted what it saw; entries it missed are still
		// there and match again on the next pass, deleted ones do not.
		if !errors.Is(err, vnl.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return total, fmt.Errorf("deleting %d %s conntrack flows (%d deleted): %w", len(flows), c.familyName(), total, err)
	}
	return total, nil
}

func normalizeIP(ip net.IP) net.IP {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip
}
