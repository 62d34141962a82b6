package netlink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// IsNotFound reports whether err says a link does not exist (ENODEV).
func IsNotFound(err error) bool {
	return errors.Is(err, unix.ENODEV)
}

// IsExists reports whether err says an address or link already exists (EEXIST).
func IsExists(err error) bool {
	return errors.Is(err, unix.EEXIST)
}

// IsAddressNotAvailable reports whether err says the kernel refuses to bind the
// address to the link (EADDRNOTAVAIL from ipv6_add_addr: an IPv6 multicast
// address, ::, or ::1 on a link other than lo): retrying it unchanged can
// never succeed.
func IsAddressNotAvailable(err error) bool {
	return errors.Is(err, unix.EADDRNOTAVAIL)
}

// Client is the rtnetlink Handle for the calling thread's network namespace.
type Client struct {
	mu sync.Mutex
	h  *vnl.Handle
	// strict is a second rtnetlink socket with NETLINK_GET_STRICT_CHK, on which
	// the kernel (4.20+) filters address dumps by link; nil on older kernels.
	strict *nl.SocketHandle
	// addrMessages counts the address messages read from the kernel (tests).
	addrMessages int
	// lastWatch is the latest WatchLocalAddresses subscription (tests).
	lastWatch *addressWatch
	// links caches the index of the links addresses are bound to and unbound
	// from, so that each write is one request instead of a link lookup and the
	// write (at 10,000 Services: 10,000 round trips fewer, ~9 s under TCG). A
	// write that finds the index gone (ENODEV: the link was deleted, perhaps made
	// again) looks the name up again once; link indexes are not reused at once.
	links map[string]int
	// linkLookups counts the link lookups the address writes made (tests).
	linkLookups int
	// batch is the socket of pipelined address writes (BindAddresses), opened on
	// first use.
	batch *batchSocket
	// linksListed, when set, runs after GetLocalAddresses has listed the links
	// and before it dumps their addresses (tests: a link deleted in between).
	linksListed func()
}

var _ Handle = &Client{}

// New opens an rtnetlink socket in the current network namespace.
func New() (*Client, error) {
	h, err := vnl.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	c := &Client{h: h}
	if s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE); err == nil {
		if err := unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1); err == nil {
			c.strict = &nl.SocketHandle{Socket: s}
		} else {
			s.Close()
		}
	}
	return c, nil
}

// Close releases the socket.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h != nil {
		c.h.Close()
		c.h = nil
	}
	if c.strict != nil {
		c.strict.Close()
		c.strict = nil
	}
	if c.batch != nil {
		unix.Close(c.batch.fd)
		c.batch = nil
	}
}

func (c *Client) handle(ctx context.Context) (*vnl.Handle, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	if c.h == nil {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("netlink client is closed")
	}
	return c.h, c.mu.Unlock, nil
}

// linkByName maps vishvananda's LinkNotFoundError back to the kernel's ENODEV so
// that IsNotFound works on it.
func linkByName(h *vnl.Handle, dev string) (vnl.Link, error) {
	link, err := h.LinkByName(dev)
	if err != nil {
		var nf vnl.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("finding link %s: %w", dev, unix.ENODEV)
		}
		return nil, fmt.Errorf("finding link %s: %w", dev, err)
	}
	return link, nil
}

// addrList retries a dump the kernel interrupted because addresses changed under
// it (NLM_F_DUMP_INTR), which would otherwise give a partial list.
func addrList(h *vnl.Handle, link vnl.Link, af ipfamily.Family) ([]vnl.Addr, error) {
	var err error
	for range 5 {
		var addrs []vnl.Addr
		addrs, err = h.AddrList(link, int(af))
		if err == nil {
			return addrs, nil
		}
		if !errors.Is(err, vnl.ErrDumpInterrupted) {
			return nil, err
		}
	}
	return nil, err
}

func hostNet(ip net.IP) (*net.IPNet, error) {
	if v4 := ip.To4(); v4 != nil {
		return &net.IPNet{IP: v4, Mask: net.CIDRMask(32, 32)}, nil
	}
	if len(ip) == net.IPv6len {
		return &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}, nil
	}
	return nil, fmt.Errorf("invalid IP address %q", ip)
}

// EnsureDummyDevice creates dev as a dummy link if it does not exist and leaves
// it down, as upstream kube-proxy does: the kernel installs the local route of an
// address bound to a down link (IPv4 and IPv6), which is all IPVS needs, and a
// down link sends nothing (no IPv6 link-local address, no router solicitations)
// and answers no ARP or ND. An existing link is left as it is.
func (c *Client) EnsureDummyDevice(ctx context.Context, dev string) (bool, error) {
	h, unlock, err := c.handle(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	_, err = linkByName(h, dev)
	if err == nil {
		return true, nil
	}
	if !IsNotFound(err) {
		return false, err
	}
	if err := h.LinkAdd(&vnl.Dummy{LinkAttrs: vnl.LinkAttrs{Name: dev}}); err != nil && !IsExists(err) {
		return false, fmt.Errorf("creating dummy link %s: %w", dev, err)
	}
	return false, nil
}

// DeleteDummyDevice deletes dev; a missing link is not an error.
func (c *Client) DeleteDummyDevice(ctx context.Context, dev string) error {
	h, unlock, err := c.handle(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	link, err := linkByName(h, dev)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting dummy link: %w", err)
	}
	delete(c.links, dev)
	if err := h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("deleting dummy link %s: %w", dev, err)
	}
	return nil
}

// cachedLink returns dev as a link carrying only its index (all an address write
// needs), from the cache or from a lookup. Call with c.mu held.
func (c *Client) cachedLink(h *vnl.Handle, dev string, fresh bool) (vnl.Link, error) {
	idx, ok := c.links[dev]
	if !ok || fresh {
		c.linkLookups++
		link, err := linkByName(h, dev)
		if err != nil {
			delete(c.links, dev)
			return nil, err
		}
		idx = link.Attrs().Index
		if c.links == nil {
			c.links = map[string]int{}
		}
		c.links[dev] = idx
	}
	return &vnl.Dummy{LinkAttrs: vnl.LinkAttrs{Name: dev, Index: idx}}, nil
}

// addrWrite runs write on dev's cached link, and once more on a fresh lookup when
// the cached index is gone.
func (c *Client) addrWrite(h *vnl.Handle, dev string, write func(vnl.Link) error) error {
	link, err := c.cachedLink(h, dev, false)
	if err != nil {
		return err
	}
	err = write(link)
	if errors.Is(err, unix.ENODEV) {
		if link, err = c.cachedLink(h, dev, true); err != nil {
			return err
		}
		err = write(link)
	}
	return err
}

// EnsureAddressBind adds ip with a host prefix and the default (global) scope, as
// upstream kube-proxy does; EEXIST means it was already bound.
func (c *Client) EnsureAddressBind(ctx context.Context, ip net.IP, dev string) (bool, error) {
	ipNet, err := hostNet(ip)
	if err != nil {
		return false, fmt.Errorf("binding address to %s: %w", dev, err)
	}
	h, unlock, err := c.handle(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	err = c.addrWrite(h, dev, func(link vnl.Link) error { return h.AddrAdd(link, &vnl.Addr{IPNet: ipNet}) })
	switch {
	case err == nil:
		return false, nil
	case IsExists(err):
		return true, nil
	}
	return false, fmt.Errorf("binding address %s to %s: %w", ip, dev, err)
}

// UnbindAddress removes ip from dev; an address that is not bound is not an error
// (the kernel says EADDRNOTAVAIL), a missing link is (IsNotFound).
func (c *Client) UnbindAddress(ctx context.Context, ip net.IP, dev string) error {
	ipNet, err := hostNet(ip)
	if err != nil {
		return fmt.Errorf("unbinding address from %s: %w", dev, err)
	}
	h, unlock, err := c.handle(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	err = c.addrWrite(h, dev, func(link vnl.Link) error { return h.AddrDel(link, &vnl.Addr{IPNet: ipNet}) })
	if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("unbinding address %s from %s: %w", ip, dev, err)
	}
	return nil
}

// ListBindAddress lists the addresses of family af on dev, IPv4 first, sorted. IPv6 link-local
// addresses are left out: the kernel adds them itself and they are never service
// addresses, so a reconciler must not try to remove them.
func (c *Client) ListBindAddress(ctx context.Context, dev string, af ipfamily.Family) ([]net.IP, error) {
	h, unlock, err := c.handle(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	link, err := linkByName(h, dev)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	var addrs []vnl.Addr
	if c.strict != nil {
		// Only dev's addresses of that family, filtered by the kernel.
		addrs, err = c.linkAddrs(link.Attrs().Index, af)
	} else {
		addrs, err = addrList(h, link, af)
	}
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", dev, err)
	}
	var out []net.IP
	for _, a := range addrs {
		if ip := a.IP; (ip.To4() != nil || !ip.IsLinkLocalUnicast()) && af.Has(ip) {
			out = append(out, normalizeIP(ip))
		}
	}
	return sortIPs(out), nil
}

// GetLocalAddresses lists the node's addresses on every link but excludeDev,
// leaving out loopback and IPv6 link-local addresses (as upstream's
// GetAllLocalAddressesExcept; IPv4 link-local addresses are kept). Sorted, no
// duplicates.
func (c *Client) GetLocalAddresses(ctx context.Context, excludeDev string) ([]net.IP, error) {
	h, unlock, err := c.handle(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	excludeIndex := -1
	if excludeDev != "" {
		link, err := linkByName(h, excludeDev)
		switch {
		case err == nil:
			excludeIndex = link.Attrs().Index
		case !IsNotFound(err):
			return nil, fmt.Errorf("listing local addresses: %w", err)
		}
	}
	if c.strict == nil {
		// One dump of every address, kube-ipvs0's thousands included.
		addrs, err := addrList(h, nil, ipfamily.Any)
		if err != nil {
			return nil, fmt.Errorf("listing local addresses: %w", err)
		}
		c.addrMessages += len(addrs)
		return localAddresses(addrs, excludeIndex), nil
	}
	// Every sync asks, so the cost must not grow with the Services bound to
	// kube-ipvs0: one kernel-filtered dump per other link.
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	if c.linksListed != nil {
		c.linksListed()
	}
	addrs, err := addrsOfLinks(links, excludeIndex, func(index int) ([]vnl.Addr, error) {
		return c.linkAddrs(index, ipfamily.Any)
	})
	if err != nil {
		return nil, err
	}
	return localAddresses(addrs, excludeIndex), nil
}

// addrsOfLinks dumps the addresses of each link but the one at excludeIndex. A
// link deleted since the list was read (a pod's veth, deleted while a sync runs)
// has no address: the kernel's ENODEV for it is no error.
func addrsOfLinks(links []vnl.Link, excludeIndex int, dump func(index int) ([]vnl.Addr, error)) ([]vnl.Addr, error) {
	var addrs []vnl.Addr
	for _, l := range links {
		idx := l.Attrs().Index
		if idx == excludeIndex {
			continue
		}
		got, err := dump(idx)
		switch {
		case IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("listing the addresses of %s: %w", l.Attrs().Name, err)
		}
		addrs = append(addrs, got...)
	}
	return addrs, nil
}

// linkAddrs dumps the addresses of one link on the strict-check socket, where
// the kernel itself skips the other links' addresses; an interrupted dump is
// retried.
func (c *Client) linkAddrs(index int, af ipfamily.Family) ([]vnl.Addr, error) {
	var err error
	for range 5 {
		req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		msg := nl.NewIfAddrmsg(int(af))
		msg.Index = uint32(index)
		req.AddData(msg)
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: c.strict}
		var addrs []vnl.Addr
		err = req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWADDR, func(m []byte) bool {
			c.addrMessages++
			if a, ok := parseAddrMessage(m); ok && a.LinkIndex == index {
				addrs = append(addrs, a)
			}
			return true
		})
		if err == nil {
			return addrs, nil
		}
		if !errors.Is(err, nl.ErrDumpInterrupted) {
			return nil, err
		}
	}
	return nil, err
}

// parseAddrMessage reads the link and address of one RTM_NEWADDR message: the
// local address (IFA_LOCAL) when there is one, else IFA_ADDRESS, as iproute2.
func parseAddrMessage(m []byte) (vnl.Addr, bool) {
	if len(m) < unix.SizeofIfAddrmsg {
		return vnl.Addr{}, false
	}
	msg := nl.DeserializeIfAddrmsg(m)
	attrs, err := nl.ParseRouteAttr(m[msg.Len():])
	if err != nil {
		return vnl.Addr{}, false
	}
	var local, address net.IP
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFA_LOCAL:
			local = append(net.IP(nil), a.Value...)
		case unix.IFA_ADDRESS:
			address = append(net.IP(nil), a.Value...)
		}
	}
	ip := local
	if ip == nil {
		ip = address
	}
	if ip == nil {
		return vnl.Addr{}, false
	}
	bits := 8 * len(ip)
	return vnl.Addr{LinkIndex: int(msg.Index), IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(int(msg.Prefixlen), bits)}}, true
}

func localAddresses(addrs []vnl.Addr, excludeIndex int) []net.IP {
	seen := map[string]bool{}
	var out []net.IP
	for _, a := range addrs {
		if a.LinkIndex == excludeIndex || a.IPNet == nil {
			continue
		}
		ip := a.IP
		if !isNodeAddress(ip) || seen[ip.String()] {
			continue
		}
		seen[ip.String()] = true
		out = append(out, normalizeIP(ip))
	}
	return sortIPs(out)
}

func isNodeAddress(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() {
		return false
	}
	return ip.To4() != nil || !ip.IsLinkLocalUnicast()
}

func normalizeIP(ip net.IP) net.IP {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip
}

// sortIPs sorts IPv4 before IPv6, numerically within a family.
func sortIPs(ips []net.IP) []net.IP {
	sort.Slice(ips, func(i, j int) bool {
		a4, b4 := ips[i].To4(), ips[j].To4()
		if (a4 == nil) != (b4 == nil) {
			return a4 != nil
		}
		return string(ips[i].To16()) < string(ips[j].To16())
	})
	return ips
}
