package netlink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Node addresses by event.
//
// The proxier needs the node's addresses (NodePort virtual servers, external
// IP decisions) on every sync, but they change rarely. Instead of reading them
// from the kernel on every sync, it subscribes to the rtnetlink link and
// address groups and reads them again only after a notification says they may
// have changed, so a partial sync reads nothing from the kernel.
//
// The excluded device is kube-ipvs0, which gains an address per Service: the
// subscription must not wake the proxier for those, and should not even queue
// them (10,000 binds at start-up are 10,000 notifications). A classic BPF
// socket filter drops address notifications of that link in the kernel; the
// same check is made again in user space for the notifications queued before
// the filter knew the link's index (the link is created after the watch
// starts on a first run).

// watchReceiveBuffer is the socket's receive buffer: room for bursts of link
// and address notifications. An overrun is not lost: it counts as a change.
const watchReceiveBuffer = 4 << 20

// WatchLocalAddresses subscribes to the kernel's link and address
// notifications in the Client's network namespace and calls changed after any
// notification that may change what GetLocalAddresses(ctx, excludeDev)
// returns: an address added to or removed from a link other than excludeDev, a
// link removed, a link renamed to or from excludeDev, and lost notifications
// (receive buffer overrun). changed is called from one goroutine, never
// concurrently, and must not block; it receives no detail: the caller reads
// the addresses again. WatchLocalAddresses returns once subscribed, so a change
// made after it returns is reported; the watch ends when ctx is done.
func (c *Client) WatchLocalAddresses(ctx context.Context, excludeDev string, changed func()) error {
	s, err := nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_LINK, unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR)
	if err != nil {
		return fmt.Errorf("subscribing to address notifications: %w", err)
	}
	if err := s.SetReceiveBufferSize(watchReceiveBuffer, true); err != nil {
		// Without CAP_NET_ADMIN the forced size is refused; the default
		// still works, overruns only cost a re-read.
		_ = s.SetReceiveBufferSize(watchReceiveBuffer, false)
	}
	w := &addressWatch{sock: s, excludeDev: excludeDev, excludeIndex: -1, changed: changed}
	// The index is looked up after subscribing: a link created in between is
	// announced on the socket.
	if excludeDev != "" {
		h, unlock, err := c.handle(ctx)
		if err != nil {
			s.Close()
			return err
		}
		link, err := linkByName(h, excludeDev)
		unlock()
		switch {
		case err == nil:
			w.setExcluded(link.Attrs().Index)
		case !IsNotFound(err):
			s.Close()
			return fmt.Errorf("watching local addresses: %w", err)
		}
	}
	c.mu.Lock()
	c.lastWatch = w
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, s.Close) // unblocks Receive
	go func() {
		defer stop()
		w.run(ctx)
	}()
	return nil
}

// addressWatch is one subscription.
type addressWatch struct {
	sock         *nl.NetlinkSocket
	excludeDev   string
	excludeIndex int
	changed      func()

	mu       sync.Mutex
	messages int // notifications received (tests)
}

func (w *addressWatch) run(ctx context.Context) {
	for {
		msgs, _, err := w.sock.Receive()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				w.changed() // notifications were dropped: assume anything changed
				continue
			}
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			// A broken socket cannot tell changes any more: say so once more
			// (the caller re-reads) and stop.
			w.changed()
			return
		}
		w.mu.Lock()
		w.messages += len(msgs)
		w.mu.Unlock()
		dirty := false
		for _, m := range msgs {
			if w.handle(m) {
				dirty = true
			}
		}
		if dirty {
			w.changed()
		}
	}
}

// handle applies one notification and reports whether the local addresses may
// have changed.
func (w *addressWatch) handle(m syscall.NetlinkMessage) bool {
	switch m.Header.Type {
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		if len(m.Data) < unix.SizeofIfAddrmsg {
			return true
		}
		return int(nl.DeserializeIfAddrmsg(m.Data).Index) != w.excludeIndex
	case unix.RTM_NEWLINK:
		index, name, ok := parseLinkMessage(m.Data)
		if !ok {
			return true
		}
		switch {
		case name == w.excludeDev && index != w.excludeIndex:
			// Created, or another link renamed to it: its addresses leave the list.
			w.setExcluded(index)
			return true
		case name != w.excludeDev && index == w.excludeIndex:
			// Renamed away: its addresses join the list.
			w.setExcluded(-1)
			return true
		}
		return false // a state change: GetLocalAddresses does not look at it
	case unix.RTM_DELLINK:
		index, _, ok := parseLinkMessage(m.Data)
		if ok && index == w.excludeIndex {
			w.setExcluded(-1)
			return false
		}
		return true
	}
	return false
}

// setExcluded records the excluded link's index and filters its address
// notifications in the kernel (-1: nothing to filter).
func (w *addressWatch) setExcluded(index int) {
	w.excludeIndex = index
	prog := addressFilter(index)
	// If the filter cannot be attached, the user-space check does the work.
	_ = unix.SetsockoptSockFprog(w.sock.GetFd(), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// addressFilter is a classic BPF program that drops RTM_NEWADDR / RTM_DELADDR
// notifications of link index and accepts everything else. BPF loads are big
// endian and netlink headers are in host order, so the constants are swapped
// on little-endian hosts.
func addressFilter(index int) []unix.SockFilter {
	if index < 0 {
		return []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff}}
	}
	h16 := func(v uint16) uint32 {
		if nativeLittleEndian {
			return uint32(bits.ReverseBytes16(v))
		}
		return uint32(v)
	}
	h32 := func(v uint32) uint32 {
		if nativeLittleEndian {
			return bits.ReverseBytes32(v)
		}
		return v
	}
	const typeOffset = 4                        // nlmsghdr.nlmsg_type
	const indexOffset = unix.SizeofNlMsghdr + 4 // ifaddrmsg.ifa_index
	return []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: typeOffset},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: h16(unix.RTM_NEWADDR), Jt: 1, Jf: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: h16(unix.RTM_DELADDR), Jt: 0, Jf: 3},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: indexOffset},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: h32(uint32(index)), Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},
	}
}

var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// parseLinkMessage reads the index and name of an RTM_NEWLINK/RTM_DELLINK.
func parseLinkMessage(data []byte) (index int, name string, ok bool) {
	if len(data) < unix.SizeofIfInfomsg {
		return 0, "", false
	}
	index = int(int32(binary.NativeEndian.Uint32(data[4:8])))
	attrs, err := nl.ParseRouteAttr(data[unix.SizeofIfInfomsg:])
	if err != nil {
		return 0, "", false
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.IFLA_IFNAME {
			v := a.Value
			for len(v) > 0 && v[len(v)-1] == 0 {
				v = v[:len(v)-1]
			}
			name = string(v)
		}
	}
	return index, name, true
}
