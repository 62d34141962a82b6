package ipset

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A small batch of member changes (what a partial sync writes: an endpoint's hairpin
// member, a Service's cluster IP) costs one `ipset restore` process, and starting a
// process is most of that: 2-5 ms natively, 200-400 ms under TCG, where it was most of
// a one-endpoint change's latency. So a batch of at most maxNetlinkOps adds and deletes
// goes to the kernel over netlink instead, one request per member on a socket kept
// open, each set's type read first (IPSET_CMD_HEADER) so the member is encoded as the
// set wants it.
//
// Whatever the netlink path does not handle (another operation, an unknown type, a
// member it cannot parse) and whatever the kernel refuses over it goes to `ipset
// restore -exist` as before, the whole batch again: adds and deletes are idempotent
// there, so the end state is the batch's, and the error (kind, failing line) is
// exactly restore's. Bulk writes (a start-up's 100,000 members) stay with restore,
// which packs thousands of members per message.

// maxNetlinkOps is the largest batch written over netlink.
const maxNetlinkOps = 128

// netlinkWriter writes members over a NETLINK_NETFILTER socket it keeps open.
type netlinkWriter struct {
	mu   sync.Mutex
	sock map[int]*nl.SocketHandle
}

func newNetlinkWriter() (*netlinkWriter, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	return &netlinkWriter{sock: map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: {Socket: s}}}, nil
}

// request starts an ipset request of cmd for set name.
func (w *netlinkWriter) request(cmd int, name string) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	req.Sockets = w.sock
	req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(unix.AF_NETLINK), Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	return req
}

// setHeader is what the member encoding needs of a set.
type setHeader struct {
	typ  Type
	inet bool // family inet (hash types); bitmap:port has no family
}

// header reads a set's type and family (IPSET_CMD_HEADER).
func (w *netlinkWriter) header(name string) (setHeader, error) {
	msgs, err := w.request(nl.IPSET_CMD_HEADER, name).Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil {
		return setHeader{}, err
	}
	var h setHeader
	for _, m := range msgs {
		if len(m) < nl.SizeofNfgenmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
		if err != nil {
			return setHeader{}, err
		}
		for _, a := range attrs {
			switch a.Attr.Type & nl.NLA_TYPE_MASK {
			case nl.IPSET_ATTR_TYPENAME:
				h.typ = Type(strings.TrimRight(string(a.Value), "\x00"))
			case nl.IPSET_ATTR_FAMILY:
				h.inet = len(a.Value) > 0 && a.Value[0] == unix.AF_INET
			}
		}
	}
	if h.typ == "" {
		return setHeader{}, fmt.Errorf("ipset header of %s: no type", name)
	}
	return h, nil
}

// apply writes ops (adds and deletes only) and reports whether it did: false, with
// no error, when the batch is not for this path; an error when the kernel refused a
// request (the ops before it are applied).
func (w *netlinkWriter) apply(ctx context.Context, ops []op) (bool, error) {
	if len(ops) == 0 || len(ops) > maxNetlinkOps {
		return false, nil
	}
	for _, o := range ops {
		if o.kind != opAdd && o.kind != opDel {
			return false, nil
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	headers := map[string]setHeader{}
	entries := make([]*nl.RtAttr, len(ops))
	for i, o := range ops {
		h, ok := headers[o.set]
		if !ok {
			var err error
			if h, err = w.header(o.set); err != nil {
				// A missing set among others: restore names the line.
				return false, nil
			}
			headers[o.set] = h
		}
		e, ok := netlinkEntry(h, o.arg)
		if !ok {
			return false, nil
		}
		entries[i] = e
	}
	for i, o := range ops {
		if err := ctx.Err(); err != nil {
			return true, err
		}
		cmd := nl.IPSET_CMD_ADD
		if o.kind == opDel {
			cmd = nl.IPSET_CMD_DEL
		}
		// No NLM_F_EXCL: adding a member that exists and deleting one that does not
		// are no-ops, as with `ipset restore -exist`.
		req := w.request(cmd, o.set)
		req.AddData(entries[i])
		if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
			return true, fmt.Errorf("ipset %s %s %s over netlink: %w", opName(o.kind), o.set, o.arg, err)
		}
	}
	return true, nil
}

func opName(k opKind) string {
	if k == opAdd {
		return "add"
	}
	return "del"
}

// netlinkEntry encodes a member in restore form as the IPSET_ATTR_DATA of an add or
// del for a set of header h; ok is false for anything it does not know (restore
// takes it then).
func netlinkEntry(h setHeader, member string) (*nl.RtAttr, bool) {
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|unix.NLA_F_NESTED, nil)
	addr := func(attr int, s string) bool {
		a := net.ParseIP(s)
		if a == nil || (a.To4() != nil) != h.inet {
			return false
		}
		kind := nl.IPSET_ATTR_IPADDR_IPV6
		if h.inet {
			a, kind = a.To4(), nl.IPSET_ATTR_IPADDR_IPV4
		}
		nested := nl.NewRtAttr(attr|unix.NLA_F_NESTED, nil)
		nested.AddRtAttr(kind|unix.NLA_F_NET_BYTEORDER, a)
		data.AddChild(nested)
		return true
	}
	port := func(s string) bool {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return false
		}
		data.AddRtAttr(nl.IPSET_ATTR_PORT|unix.NLA_F_NET_BYTEORDER, binary.BigEndian.AppendUint16(nil, uint16(n)))
		return true
	}
	protoPort := func(s string) bool {
		name, num, found := strings.Cut(s, ":")
		if !found {
			return false
		}
		var proto uint8
		switch strings.ToLower(name) {
		case "tcp":
			proto = unix.IPPROTO_TCP
		case "udp":
			proto = unix.IPPROTO_UDP
		case "sctp":
			proto = unix.IPPROTO_SCTP
		default:
			return false
		}
		data.AddRtAttr(nl.IPSET_ATTR_PROTO, []byte{proto})
		return port(num)
	}
	f := strings.Split(member, ",")
	switch h.typ {
	case HashIP:
		if len(f) != 1 || !addr(nl.IPSET_ATTR_IP, f[0]) {
			return nil, false
		}
	case HashIPPort:
		if len(f) != 2 || !addr(nl.IPSET_ATTR_IP, f[0]) || !protoPort(f[1]) {
			return nil, false
		}
	case HashIPPortIP:
		if len(f) != 3 || !addr(nl.IPSET_ATTR_IP, f[0]) || !protoPort(f[1]) || !addr(nl.IPSET_ATTR_IP2, f[2]) {
			return nil, false
		}
	case HashIPPortNet:
		if len(f) != 3 || !addr(nl.IPSET_ATTR_IP, f[0]) || !protoPort(f[1]) {
			return nil, false
		}
		a, bits, found := strings.Cut(f[2], "/")
		if !addr(nl.IPSET_ATTR_IP2, a) {
			return nil, false
		}
		if found {
			n, err := strconv.ParseUint(bits, 10, 8)
			limit := uint64(128)
			if h.inet {
				limit = 32
			}
			// A zero or too long prefix: restore's message names it.
			if err != nil || n == 0 || n > limit {
				return nil, false
			}
			data.AddRtAttr(nl.IPSET_ATTR_CIDR2, []byte{uint8(n)})
		}
	case BitmapPort:
		// A bare port: bitmap:port takes no protocol.
		if len(f) != 1 || !port(f[0]) {
			return nil, false
		}
	default:
		return nil, false
	}
	return data, true
}
