package ipset

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A batch of member changes goes to the kernel over netlink, not through an `ipset
// restore` process, when it holds only adds and deletes:
//
//   - A small batch (what a partial sync writes: an endpoint's hairpin member, a
//     Service's cluster IP) costs one process, and starting a process is most of
//     that: 2-5 ms natively, 200-400 ms under TCG, where it was most of a
//     one-endpoint change's latency.
//   - A bulk batch (a start-up's members) is slow through restore for another
//     reason: libipset knows a set's type only for sets created in the same run,
//     and asks the kernel for the header of any other set (IPSET_CMD_HEADER) once
//     per line. Our sets are created by an earlier batch, so every member cost an
//     extra netlink round trip and the kernel's lookup: 6,000 members took 8-24 s
//     (5-15 s of it system time) in the test VM under TCG, where the same lines
//     after a create in the same run take ~2 s. Natively, 100,000 members into a
//     set created before: restore 4.3 s, netlink 0.8 s on a loaded host
//     (BenchmarkIntegrationMembers100k).
//
// Each set's type is read once (IPSET_CMD_HEADER) so that members are encoded as
// the set wants them; then each run of consecutive adds (or deletes) to one set
// goes in one request, its members in an IPSET_ATTR_ADT container (what restore
// itself sends for the sets it knows), at most maxNetlinkMessage bytes each. The
// kernel applies a request's members in order and stops at the first it refuses.
//
// Whatever the netlink path does not handle (another operation, an unknown type, a
// member it cannot parse) and whatever the kernel refuses over it goes to `ipset
// restore -exist` as before, the whole batch again: adds and deletes are idempotent
// there, so the end state is the batch's, and the error (kind, failing line) is
// exactly restore's.

// maxNetlinkMessage bounds the members' part of one request: an attribute's length
// is 16 bits, and the kernel refuses a message larger than its socket's send
// buffer (212,992 bytes by default). 32 KiB is ~740 members of
// hash:ip,port,ip.
const maxNetlinkMessage = 32 << 10

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
// no error, when the batch is not for this path (nothing is written then); an error
// when the kernel refused a request (the members before the refused one are
// applied).
func (w *netlinkWriter) apply(ctx context.Context, ops []op) (bool, error) {
	if len(ops) == 0 {
		return false, nil
	}
	for _, o := range ops {
		if o.kind != opAdd && o.kind != opDel {
			return false, nil
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Every set's header before anything is written: a missing set is restore's
	// to name, and most often the batch's first line.
	headers := map[string]setHeader{}
	for _, o := range ops {
		if _, ok := headers[o.set]; ok {
			continue
		}
		h, err := w.header(o.set)
		if err != nil {
			return false, nil
		}
		headers[o.set] = h
	}
	// Every member encodes before anything is written, so that a batch this path
	// hands to restore ends as restore alone leaves it.
	var members []byte
	for _, o := range ops {
		var ok bool
		if members, ok = appendEntry(members[:0], headers[o.set], o.arg); !ok {
			return false, nil
		}
	}
	for start := 0; start < len(ops); {
		if err := ctx.Err(); err != nil {
			return true, err
		}
		first := ops[start]
		h := headers[first.set]
		members = members[:0]
		end := start
		for ; end < len(ops) && ops[end].set == first.set && ops[end].kind == first.kind; end++ {
			before := len(members)
			var ok bool
			members, ok = appendEntry(members, h, ops[end].arg)
			if !ok { // checked above
				return true, fmt.Errorf("ipset member %q of %s: cannot encode it", ops[end].arg, first.set)
			}
			if end > start && len(members) > maxNetlinkMessage {
				members = members[:before]
				break
			}
		}
		cmd := nl.IPSET_CMD_ADD
		if first.kind == opDel {
			cmd = nl.IPSET_CMD_DEL
		}
		// No NLM_F_EXCL: adding a member that exists and deleting one that does not
		// are no-ops, as with `ipset restore -exist`.
		req := w.request(cmd, first.set)
		if end-start == 1 {
			req.AddData(rawAttrs(members))
		} else {
			// The kernel wants a line number beside a container (it names the
			// failing member's, which restore then names again).
			req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_LINENO, nl.Uint32Attr(0)))
			req.AddData(adtAttr(members))
		}
		if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
			what := first.arg
			if end-start > 1 {
				what = fmt.Sprintf("(%d members from %s)", end-start, first.arg)
			}
			return true, fmt.Errorf("ipset %s %s %s over netlink: %w", opName(first.kind), first.set, what, err)
		}
		start = end
	}
	return true, nil
}

// rawAttrs are attributes already serialized, added to a request as they are.
type rawAttrs []byte

func (a rawAttrs) Len() int          { return len(a) }
func (a rawAttrs) Serialize() []byte { return a }

// adtAttr wraps serialized IPSET_ATTR_DATA members in a nested IPSET_ATTR_ADT.
func adtAttr(members []byte) rawAttrs {
	out := make([]byte, unix.SizeofRtAttr, unix.SizeofRtAttr+len(members))
	binary.NativeEndian.PutUint16(out[0:2], uint16(unix.SizeofRtAttr+len(members)))
	binary.NativeEndian.PutUint16(out[2:4], uint16(nl.IPSET_ATTR_ADT|unix.NLA_F_NESTED))
	return append(out, members...)
}

func opName(k opKind) string {
	if k == opAdd {
		return "add"
	}
	return "del"
}

// appendEntry appends a member in restore form, encoded as the IPSET_ATTR_DATA of an
// add or del for a set of header h, to b; ok is false for anything it does not know
// (restore takes it then). It allocates nothing: a start-up encodes every member.
func appendEntry(b []byte, h setHeader, member string) (_ []byte, ok bool) {
	f, parts := splitMember(member)
	e := entryEncoder{b: b, inet: h.inet}
	data := e.start(nl.IPSET_ATTR_DATA)
	switch h.typ {
	case HashIP:
		ok = parts == 1 && e.addr(nl.IPSET_ATTR_IP, f[0])
	case HashIPPort:
		ok = parts == 2 && e.addr(nl.IPSET_ATTR_IP, f[0]) && e.protoPort(f[1])
	case HashIPPortIP:
		ok = parts == 3 && e.addr(nl.IPSET_ATTR_IP, f[0]) && e.protoPort(f[1]) && e.addr(nl.IPSET_ATTR_IP2, f[2])
	case HashIPPortNet:
		ok = parts == 3 && e.addr(nl.IPSET_ATTR_IP, f[0]) && e.protoPort(f[1]) && e.net(f[2])
	case BitmapPort:
		// A bare port: bitmap:port takes no protocol.
		ok = parts == 1 && e.port(f[0])
	}
	if !ok {
		return nil, false
	}
	e.end(data)
	return e.b, true
}

// splitMember returns the comma-separated parts of a member (at most four; parts
// is 5 when there are more), without allocating.
func splitMember(member string) (f [4]string, parts int) {
	rest := member
	for {
		part, after, more := strings.Cut(rest, ",")
		if parts == len(f) {
			return f, parts + 1
		}
		f[parts] = part
		parts++
		if !more {
			return f, parts
		}
		rest = after
	}
}

// entryEncoder appends the attributes of one member.
type entryEncoder struct {
	b    []byte
	inet bool // the set's family is inet (else inet6)
}

// start appends the header of a nested attribute of type typ, whose length end
// sets once its children are appended; it returns where it starts.
func (e *entryEncoder) start(typ int) int {
	at := len(e.b)
	e.b = binary.NativeEndian.AppendUint16(binary.NativeEndian.AppendUint16(e.b, 0), uint16(typ|unix.NLA_F_NESTED))
	return at
}

// end sets the length of the nested attribute that starts at at.
func (e *entryEncoder) end(at int) {
	binary.NativeEndian.PutUint16(e.b[at:at+2], uint16(len(e.b)-at))
}

// attr appends an attribute of type typ holding value, padded to 4 bytes.
func (e *entryEncoder) attr(typ int, value ...byte) {
	e.b = binary.NativeEndian.AppendUint16(e.b, uint16(unix.SizeofRtAttr+len(value)))
	e.b = binary.NativeEndian.AppendUint16(e.b, uint16(typ))
	e.b = append(e.b, value...)
	for n := len(value); n%unix.NLA_ALIGNTO != 0; n++ {
		e.b = append(e.b, 0)
	}
}

// addr appends an address of the set's family as attribute typ.
func (e *entryEncoder) addr(typ int, s string) bool {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	if a.Is4() != e.inet {
		return false
	}
	nested := e.start(typ)
	if e.inet {
		v := a.As4()
		e.attr(nl.IPSET_ATTR_IPADDR_IPV4|unix.NLA_F_NET_BYTEORDER, v[:]...)
	} else {
		v := a.As16()
		e.attr(nl.IPSET_ATTR_IPADDR_IPV6|unix.NLA_F_NET_BYTEORDER, v[:]...)
	}
	e.end(nested)
	return true
}

// port appends a port number.
func (e *entryEncoder) port(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return false
	}
	e.attr(nl.IPSET_ATTR_PORT|unix.NLA_F_NET_BYTEORDER, byte(n>>8), byte(n))
	return true
}

// protoPort appends "tcp:80" (udp, sctp) as a protocol and a port.
func (e *entryEncoder) protoPort(s string) bool {
	name, num, found := strings.Cut(s, ":")
	if !found {
		return false
	}
	var proto uint8
	switch {
	case strings.EqualFold(name, "tcp"):
		proto = unix.IPPROTO_TCP
	case strings.EqualFold(name, "udp"):
		proto = unix.IPPROTO_UDP
	case strings.EqualFold(name, "sctp"):
		proto = unix.IPPROTO_SCTP
	default:
		return false
	}
	e.attr(nl.IPSET_ATTR_PROTO, proto)
	return e.port(num)
}

// net appends the third part of hash:ip,port,net: an address with an optional
// prefix length.
func (e *entryEncoder) net(s string) bool {
	a, bits, found := strings.Cut(s, "/")
	if !e.addr(nl.IPSET_ATTR_IP2, a) {
		return false
	}
	if found {
		n, err := strconv.ParseUint(bits, 10, 8)
		limit := uint64(128)
		if e.inet {
			limit = 32
		}
		// A zero or too long prefix: restore's message names it.
		if err != nil || n == 0 || n > limit {
			return false
		}
		e.attr(nl.IPSET_ATTR_CIDR2, uint8(n))
	}
	return true
}
