package netlink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nlattr"
)

// Binding many addresses at once.
//
// A start-up binds one address per Service to kube-ipvs0, and one request at a time,
// each waiting for its acknowledgement, costs a round trip per address: 1.1 s for
// 1,000 addresses in the test VM under TCG, ten times that at 10,000. The kernel's
// netlink input processes every message of one send in order and acknowledges each
// on its own, so BindAddresses sends up to bindChunk requests per send on a socket of
// its own and reads their acknowledgements after: each address still succeeds or
// fails on its own, with the errno EnsureAddressBind gives.

// bindChunk is how many requests one send carries; their acknowledgements must fit
// in the socket's receive buffer.
const bindChunk = 256

// batchSocket is an rtnetlink socket for pipelined address writes.
type batchSocket struct {
	fd  int
	seq uint32
}

// openBatchSocket opens one in the caller's network namespace.
func openBatchSocket() (*batchSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	// Acknowledgements of failed requests carry only the header back.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	return &batchSocket{fd: fd}, nil
}

// BindAddresses binds every ip to dev (host prefix, global scope, as
// EnsureAddressBind) and returns one error per address: nil when it is bound
// (already bound included), IsNotFound when dev is missing.
func (c *Client) BindAddresses(ctx context.Context, ips []net.IP, dev string) []error {
	errs := make([]error, len(ips))
	h, unlock, err := c.handle(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer unlock()
	fail := func(i int, err error) { errs[i] = fmt.Errorf("binding address %s to %s: %w", ips[i], dev, err) }
	if c.batch == nil {
		if c.batch, err = openBatchSocket(); err != nil {
			for i := range ips {
				fail(i, fmt.Errorf("opening an rtnetlink socket: %w", err))
			}
			return errs
		}
	}
	todo := make([]int, len(ips))
	for i := range todo {
		todo[i] = i
	}
	// Once more on a fresh lookup for what found the cached link index gone.
	for fresh := false; ; fresh = true {
		link, err := c.cachedLink(h, dev, fresh)
		if err != nil {
			for _, i := range todo {
				fail(i, err)
			}
			return errs
		}
		codes := c.bindChunks(ctx, ips, todo, link.Attrs().Index)
		var again []int
		for k, i := range todo {
			switch e := codes[k]; {
			case e == nil || errors.Is(e, unix.EEXIST):
			case errors.Is(e, unix.ENODEV) && !fresh:
				again = append(again, i)
			default:
				fail(i, e)
			}
		}
		if len(again) == 0 {
			return errs
		}
		todo = again
	}
}

// bindChunks sends the binds of ips[todo...] to link index idx, bindChunk at a time,
// and returns each one's outcome (a syscall.Errno from the kernel, or what kept it
// from being sent or acknowledged). Callers hold c.mu.
func (c *Client) bindChunks(ctx context.Context, ips []net.IP, todo []int, idx int) []error {
	codes := make([]error, len(todo))
	for start := 0; start < len(todo); start += bindChunk {
		end := min(start+bindChunk, len(todo))
		if err := ctx.Err(); err != nil {
			for k := start; k < len(todo); k++ {
				codes[k] = err
			}
			return codes
		}
		var msgs [][]byte
		for k := start; k < end; k++ {
			msg, err := addrMessage(ips[todo[k]], idx)
			if err != nil {
				codes[k] = err
				msgs = append(msgs, nil)
				continue
			}
			msgs = append(msgs, msg)
		}
		c.batch.send(msgs, unix.RTM_NEWADDR, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, codes[start:end])
	}
	return codes
}

// addrMessage is the ifaddrmsg and attributes binding ip with a host prefix to the
// link of index idx.
func addrMessage(ip net.IP, idx int) ([]byte, error) {
	ipNet, err := hostNet(ip)
	if err != nil {
		return nil, err
	}
	raw, family := ipNet.IP.To4(), byte(unix.AF_INET)
	if raw == nil {
		raw, family = ipNet.IP.To16(), unix.AF_INET6
	}
	ones, _ := ipNet.Mask.Size()
	b := []byte{family, byte(ones), 0, unix.RT_SCOPE_UNIVERSE, 0, 0, 0, 0}
	binary.NativeEndian.PutUint32(b[4:], uint32(idx))
	b = nlattr.Append(b, unix.IFA_LOCAL, raw)
	return nlattr.Append(b, unix.IFA_ADDRESS, raw), nil
}

// send sends msgs (nil ones skipped: their outcome is already in codes) as requests
// of type typ in one send and reads their acknowledgements into codes.
func (s *batchSocket) send(msgs [][]byte, typ, flags uint16, codes []error) {
	var buf []byte
	first := s.seq + 1
	pending := 0
	for i, m := range msgs {
		if m == nil {
			continue
		}
		var h [unix.NLMSG_HDRLEN]byte
		binary.NativeEndian.PutUint32(h[0:], uint32(unix.NLMSG_HDRLEN+len(m)))
		binary.NativeEndian.PutUint16(h[4:], typ)
		binary.NativeEndian.PutUint16(h[6:], flags)
		binary.NativeEndian.PutUint32(h[8:], first+uint32(i))
		buf = append(append(buf, h[:]...), m...)
		pending++
	}
	s.seq = first + uint32(len(msgs))
	failAll := func(err error) {
		for i, m := range msgs {
			if m != nil && codes[i] == nil {
				codes[i] = err
			}
		}
	}
	if pending == 0 {
		return
	}
	if err := unix.Sendto(s.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		failAll(fmt.Errorf("sending %d address requests: %w", pending, err))
		return
	}
	done := make([]bool, len(msgs))
	rb := make([]byte, 64<<10)
	for pending > 0 {
		n, _, err := unix.Recvfrom(s.fd, rb, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		var parsed []syscall.NetlinkMessage
		if err == nil {
			parsed, err = syscall.ParseNetlinkMessage(rb[:n])
		}
		if err != nil {
			// A lost acknowledgement (ENOBUFS) leaves the outcome unknown: say so.
			for i, m := range msgs {
				if m != nil && !done[i] && codes[i] == nil {
					codes[i] = fmt.Errorf("reading address acknowledgements: %w", err)
				}
			}
			return
		}
		for _, m := range parsed {
			i := int(m.Header.Seq - first)
			if m.Header.Type != unix.NLMSG_ERROR || i < 0 || i >= len(msgs) || msgs[i] == nil || done[i] || len(m.Data) < 4 {
				continue
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				codes[i] = syscall.Errno(-code)
			}
			done[i] = true
			pending--
		}
	}
}
