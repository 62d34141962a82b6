package ipvs

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	libipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
)

// Connection entries of a removed real server.
//
// IPVS has no netlink command that deletes connection entries (ip_vs_ctl.c offers
// services, destinations, daemons, timeouts, zero and flush, and flush keeps the
// connection table), so this package exposes no such operation. What the kernel
// does offer, and what the proxier relies on:
//   - net/ipv4/vs/expire_nodest_conn=1: the next packet of a connection whose
//     destination was deleted expires the entry at once instead of being dropped
//     until the entry times out. That packet is itself dropped while a confirmed
//     netfilter conntrack entry still holds the old NAT binding (always the case
//     with vs/conntrack=1), and is rescheduled otherwise (kernel 5.9+);
//   - the matching netfilter conntrack entries, which otherwise keep the old NAT
//     binding for UDP, are deleted with pkg/util/conntrack.

// Client programs IPVS in one network namespace through generic netlink. It is safe
// for concurrent use (calls are serialised: the moby/ipvs socket is not).
type Client struct {
	mu     sync.Mutex
	handle *libipvs.Handle
	// proc is the namespace's /proc/net/ip_vs, kept open for GetAll (nil when
	// it could not be opened: GetAll then dumps each virtual server).
	proc    *os.File
	procBuf []byte
	// family is the IPVS generic netlink family id, netnsPath the namespace, and
	// writer the socket of pipelined writes (Write), opened on first use.
	family    uint16
	netnsPath string
	writer    *writeSocket
	// perServiceReads counts the destination dumps GetAll made because the
	// proc table did not show a virtual server (tests check it stays 0).
	perServiceReads int
}

var _ Interface = &Client{}

// New opens an IPVS handle in the network namespace at netnsPath (e.g.
// /var/run/netns/x or /proc/PID/ns/net), or in the calling thread's namespace when
// netnsPath is empty. It fails when the kernel has no IPVS.
func New(netnsPath string) (*Client, error) {
	h, err := libipvs.New(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("opening IPVS netlink socket (netns %q): %w", netnsPath, err)
	}
	// moby/ipvs resolves the "IPVS" generic netlink family once per process and,
	// when that fails, goes on sending requests to family 0, which the kernel
	// acknowledges without a reply (and GetConfig then indexes an empty answer).
	// Check the family here so a kernel without ip_vs is a clear error at start-up
	// (generic netlink families are global, so the calling namespace is fine).
	fam, err := netlink.GenlFamilyGet("IPVS")
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("looking up the IPVS generic netlink family (is ip_vs loaded?): %w", err)
	}
	c := &Client{handle: h, family: fam.ID, netnsPath: netnsPath}
	// Without the proc table (no procfs in this mount namespace) GetAll falls
	// back to one destination dump per virtual server.
	c.proc, _ = openProcTable(netnsPath)
	return c, nil
}

// Close releases the netlink socket; the Client must not be used afterwards.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handle != nil {
		c.handle.Close()
		c.handle = nil
	}
	if c.proc != nil {
		c.proc.Close()
		c.proc = nil
	}
	if c.writer != nil {
		c.writer.close()
		c.writer = nil
	}
}

// do runs fn with the handle under the lock, after checking ctx (netlink calls
// themselves cannot be cancelled).
func (c *Client) do(ctx context.Context, fn func(h *libipvs.Handle) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handle == nil {
		return fmt.Errorf("IPVS client is closed")
	}
	return fn(c.handle)
}

func (c *Client) AddVirtualServer(ctx context.Context, vs *VirtualServer) error {
	svc, err := toService(vs)
	if err != nil {
		return fmt.Errorf("adding virtual server: %w", err)
	}
	if err := c.do(ctx, func(h *libipvs.Handle) error { return h.NewService(svc) }); err != nil {
		return errorf(err, "adding virtual server %s", vs)
	}
	return nil
}

func (c *Client) UpdateVirtualServer(ctx context.Context, vs *VirtualServer) error {
	svc, err := toService(vs)
	if err != nil {
		return fmt.Errorf("updating virtual server: %w", err)
	}
	if err := c.do(ctx, func(h *libipvs.Handle) error { return h.UpdateService(svc) }); err != nil {
		return errorf(err, "updating virtual server %s", vs)
	}
	return nil
}

func (c *Client) DeleteVirtualServer(ctx context.Context, vs *VirtualServer) error {
	svc, err := toService(vs)
	if err != nil {
		return fmt.Errorf("deleting virtual server: %w", err)
	}
	if err := c.do(ctx, func(h *libipvs.Handle) error { return h.DelService(svc) }); err != nil {
		return errorf(err, "deleting virtual server %s", vs)
	}
	return nil
}

func (c *Client) GetVirtualServer(ctx context.Context, vs *VirtualServer) (*VirtualServer, error) {
	svc, err := toService(vs)
	if err != nil {
		return nil, fmt.Errorf("getting virtual server: %w", err)
	}
	var got *libipvs.Service
	err = c.do(ctx, func(h *libipvs.Handle) error {
		var err error
		got, err = h.GetService(svc)
		return err
	})
	if err != nil {
		return nil, errorf(err, "getting virtual server %s", vs)
	}
	out, err := toVirtualServer(got)
	if err != nil {
		return nil, errorf(err, "getting virtual server %s", vs)
	}
	return out, nil
}

// GetVirtualServers lists every address/port/protocol virtual server. Firewall-mark
// services (created by other tools; kube-proxy never makes them) cannot be
// represented by VirtualServer and are left out.
func (c *Client) GetVirtualServers(ctx context.Context) ([]*VirtualServer, error) {
	var svcs []*libipvs.Service
	err := c.do(ctx, func(h *libipvs.Handle) error {
		var err error
		svcs, err = h.GetServices()
		return err
	})
	if err != nil {
		return nil, errorf(err, "listing virtual servers")
	}
	out := make([]*VirtualServer, 0, len(svcs))
	for _, svc := range svcs {
		if svc.FWMark != 0 {
			continue
		}
		vs, err := toVirtualServer(svc)
		if err != nil {
			return nil, errorf(err, "listing virtual servers")
		}
		out = append(out, vs)
	}
	return out, nil
}

func (c *Client) AddRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error {
	return c.destinationOp(ctx, "adding", vs, rs, (*libipvs.Handle).NewDestination)
}

func (c *Client) UpdateRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error {
	return c.destinationOp(ctx, "updating", vs, rs, (*libipvs.Handle).UpdateDestination)
}

func (c *Client) DeleteRealServer(ctx context.Context, vs *VirtualServer, rs *RealServer) error {
	return c.destinationOp(ctx, "deleting", vs, rs, (*libipvs.Handle).DelDestination)
}

func (c *Client) destinationOp(ctx context.Context, verb string, vs *VirtualServer, rs *RealServer,
	op func(*libipvs.Handle, *libipvs.Service, *libipvs.Destination) error) error {
	svc, err := toService(vs)
	if err != nil {
		return fmt.Errorf("%s real server %s: %w", verb, rs, err)
	}
	dst, err := toDestination(rs)
	if err != nil {
		return fmt.Errorf("%s real server of %s: %w", verb, vs, err)
	}
	preposition := "of"
	if verb == "adding" {
		preposition = "to"
	}
	err = checkSameFamily(vs, rs)
	if err == nil {
		err = c.do(ctx, func(h *libipvs.Handle) error { return op(h, svc, dst) })
	}
	if err != nil {
		return errorf(err, "%s real server %s %s %s", verb, rs, preposition, vs)
	}
	return nil
}

// GetRealServers lists the real servers of vs with their connection counters. As
// in the kernel, a missing virtual server yields an empty list, not an error.
func (c *Client) GetRealServers(ctx context.Context, vs *VirtualServer) ([]*RealServer, error) {
	svc, err := toService(vs)
	if err != nil {
		return nil, fmt.Errorf("listing real servers: %w", err)
	}
	var dsts []*libipvs.Destination
	err = c.do(ctx, func(h *libipvs.Handle) error {
		var err error
		dsts, err = h.GetDestinations(svc)
		return err
	})
	if err != nil {
		return nil, errorf(err, "listing real servers of %s", vs)
	}
	out := make([]*RealServer, 0, len(dsts))
	for _, d := range dsts {
		out = append(out, toRealServer(d))
	}
	return out, nil
}

// ConfigureTimeouts sets the IPVS tcp, tcpfin and udp timeouts. A zero argument
// keeps the current value: the current configuration is read first and sent back
// for those, because recent kernels store a 0 from SET_CONFIG as is.
func (c *Client) ConfigureTimeouts(ctx context.Context, tcp, tcpfin, udp time.Duration) error {
	if tcp == 0 && tcpfin == 0 && udp == 0 {
		return nil
	}
	if tcp < 0 || tcpfin < 0 || udp < 0 {
		return fmt.Errorf("configuring IPVS timeouts: negative timeout (tcp %v, tcpfin %v, udp %v)", tcp, tcpfin, udp)
	}
	err := c.do(ctx, func(h *libipvs.Handle) error {
		cur, err := getConfig(h)
		if err != nil {
			return fmt.Errorf("reading current timeouts: %w", err)
		}
		cfg := libipvs.Config{
			TimeoutTCP:    keepOrSet(cur.TimeoutTCP, tcp),
			TimeoutTCPFin: keepOrSet(cur.TimeoutTCPFin, tcpfin),
			TimeoutUDP:    keepOrSet(cur.TimeoutUDP, udp),
		}
		return h.SetConfig(&cfg)
	})
	if err != nil {
		return errorf(err, "configuring IPVS timeouts (tcp %v, tcpfin %v, udp %v)", tcp, tcpfin, udp)
	}
	return nil
}

// keepOrSet returns cur when want is 0, else want rounded up to whole seconds (the
// kernel's unit; a sub-second value must not become 0).
func keepOrSet(cur, want time.Duration) time.Duration {
	if want == 0 {
		return cur
	}
	if want%time.Second != 0 {
		want = want.Truncate(time.Second) + time.Second
	}
	return want
}

// getConfig guards against moby/ipvs indexing an empty GET_CONFIG answer.
func getConfig(h *libipvs.Handle) (cfg *libipvs.Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, fmt.Errorf("malformed GET_CONFIG answer: %v", r)
		}
	}()
	return h.GetConfig()
}

func (c *Client) Flush(ctx context.Context) error {
	if err := c.do(ctx, func(h *libipvs.Handle) error { return h.Flush() }); err != nil {
		return errorf(err, "flushing IPVS virtual servers")
	}
	return nil
}
