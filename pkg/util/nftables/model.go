package nftables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// FamilyInet is the family whose tables see both IPv4 and IPv6 packets.
const FamilyInet Family = "inet"

// KeyType is the type of one field of a set's key, named as nft names it.
type KeyType string

const (
	KeyIPv4Addr    KeyType = "ipv4_addr"
	KeyIPv6Addr    KeyType = "ipv6_addr"
	KeyInetProto   KeyType = "inet_proto"
	KeyInetService KeyType = "inet_service"
	// KeyNFProto is a network protocol ("ipv4", "ipv6"): `meta nfproto`.
	KeyNFProto KeyType = "nf_proto"
)

// size is the field's length in bytes as the kernel stores it, before padding.
func (k KeyType) size() int {
	switch k {
	case KeyIPv4Addr:
		return 4
	case KeyIPv6Addr:
		return 16
	case KeyInetProto, KeyNFProto:
		return 1
	case KeyInetService:
		return 2
	}
	return 0
}

// padded is the field's length in a concatenated key: every field starts on a
// 4-byte register.
func (k KeyType) padded() int { return (k.size() + 3) &^ 3 }

// ChainType and Hook name a base chain's type and hook as nft does.
type (
	ChainType string
	Hook      string
)

const (
	ChainTypeFilter ChainType = "filter"
	ChainTypeNAT    ChainType = "nat"

	HookPrerouting  Hook = "prerouting"
	HookInput       Hook = "input"
	HookForward     Hook = "forward"
	HookOutput      Hook = "output"
	HookPostrouting Hook = "postrouting"
)

// Chain is a chain's definition. A chain without a Hook is a regular chain, reached
// only by jumps.
type Chain struct {
	Name     string
	Type     ChainType
	Hook     Hook
	Priority int
}

func (c Chain) base() bool { return c.Hook != "" }

// Set is a set's definition. Interval sets must have at least two fields (the
// kernel's concatenated-range backend); the last field of an interval set may be
// written as a prefix ("10.0.0.0/8"). Only a set with Timeout takes elements
// with a timeout (Transaction.AddElementsWithTimeout); it has no default one.
type Set struct {
	Name     string
	Key      []KeyType
	Interval bool
	Timeout  bool
	Comment  string
}

func (s Set) keyLen() int {
	if len(s.Key) == 1 {
		return s.Key[0].size()
	}
	n := 0
	for _, k := range s.Key {
		n += k.padded()
	}
	return n
}

func (s Set) typeString() string {
	parts := make([]string, len(s.Key))
	for i, k := range s.Key {
		parts[i] = string(k)
	}
	return strings.Join(parts, " . ")
}

// flags are the set's flags as nft lists them ("interval,timeout"; "" for none).
func (s Set) flags() string {
	var f []string
	if s.Interval {
		f = append(f, "interval")
	}
	if s.Timeout {
		f = append(f, "timeout")
	}
	return strings.Join(f, ",")
}

// DurationString prints a timeout as nft lists it: "2m", "1m30s", "1s500ms", "1d".
func DurationString(d time.Duration) string {
	ms := d.Milliseconds()
	if ms == 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		name string
		ms   int64
	}{{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}} {
		if n := ms / u.ms; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.name)
			ms -= n * u.ms
		}
	}
	return b.String()
}

func (s Set) validate() error {
	if s.Name == "" {
		return fmt.Errorf("set without a name")
	}
	if len(s.Key) == 0 {
		return fmt.Errorf("set %s: no key type", s.Name)
	}
	for _, k := range s.Key {
		if k.size() == 0 {
			return fmt.Errorf("set %s: unknown key type %q", s.Name, k)
		}
	}
	if s.Interval && len(s.Key) < 2 {
		return fmt.Errorf("set %s: an interval set needs a concatenated key", s.Name)
	}
	return nil
}

// priorityNames are the priorities nft prints by name, with the hooks each name is
// printed for (nil: every hook), as `nft list` in nftables 1.0.6 prints them.
var priorityNames = []struct {
	name  string
	value int
	hook  Hook
}{
	{"raw", -300, ""},
	{"mangle", -150, ""},
	{"dstnat", -100, HookPrerouting},
	{"filter", 0, ""},
	{"security", 50, ""},
	{"srcnat", 100, HookPostrouting},
}

// priorityString prints a base chain's priority the way nft lists it: a standard
// name, a name and an offset of at most 10, or the number.
func priorityString(h Hook, p int) string {
	for _, n := range priorityNames {
		if n.hook != "" && n.hook != h {
			continue
		}
		switch off := p - n.value; {
		case off == 0:
			return n.name
		case off > 0 && off <= 10:
			return fmt.Sprintf("%s + %d", n.name, off)
		case off < 0 && off >= -10:
			return fmt.Sprintf("%s - %d", n.name, -off)
		}
	}
	return strconv.Itoa(p)
}

// protoNames are the protocols nft prints by name.
var protoNames = map[byte]string{6: "tcp", 17: "udp", 132: "sctp"}

// nfprotoNames are the network protocols nft prints by name (NFPROTO_IPV4, _IPV6).
var nfprotoNames = map[byte]string{2: "ipv4", 10: "ipv6"}

// ProtoNumber is the IP protocol number of "tcp", "udp", "sctp" or a number.
func ProtoNumber(s string) (byte, error) { return protoNumber(s) }

// ProtoName is a protocol as nft prints it: its name, or its number.
func ProtoName(p byte) string { return protoString(p) }

func protoNumber(s string) (byte, error) {
	for n, name := range protoNames {
		if s == name {
			return n, nil
		}
	}
	v, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("protocol %q: want tcp, udp, sctp or a number", s)
	}
	return byte(v), nil
}

func protoString(p byte) string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return strconv.Itoa(int(p))
}

// fieldRange parses one textual field of an element into the first and last value
// it covers, each the field's unpadded bytes. Only an address field of an interval
// set may be a prefix.
func fieldRange(k KeyType, s string, interval bool) (lo, hi []byte, err error) {
	switch k {
	case KeyIPv4Addr, KeyIPv6Addr:
		var p netip.Prefix
		if strings.Contains(s, "/") {
			if !interval {
				return nil, nil, fmt.Errorf("%q: a prefix in a set without intervals", s)
			}
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, nil, err
			}
			if p.Masked() != p {
				return nil, nil, fmt.Errorf("%q: host bits set", s)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, nil, err
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if (k == KeyIPv4Addr) != p.Addr().Is4() {
			return nil, nil, fmt.Errorf("%q is not an %s", s, k)
		}
		lo = p.Addr().AsSlice()
		hi = append([]byte(nil), lo...)
		for bit := p.Bits(); bit < len(hi)*8; bit++ {
			hi[bit/8] |= 0x80 >> (bit % 8)
		}
		return lo, hi, nil
	case KeyInetProto:
		n, err := protoNumber(s)
		if err != nil {
			return nil, nil, err
		}
		return []byte{n}, []byte{n}, nil
	case KeyInetService:
		v, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return nil, nil, fmt.Errorf("port %q: want a number 0-65535", s)
		}
		b := binary.BigEndian.AppendUint16(nil, uint16(v))
		return b, b, nil
	case KeyNFProto:
		for n, name := range nfprotoNames {
			if s == name {
				return []byte{n}, []byte{n}, nil
			}
		}
		return nil, nil, fmt.Errorf("network protocol %q: want ipv4 or ipv6", s)
	}
	return nil, nil, fmt.Errorf("unknown key type %q", k)
}

// fieldString prints a field's range as nft lists it: a prefix when lo..hi is one
// (a full-length prefix as the bare address), the value otherwise.
func fieldString(k KeyType, lo, hi []byte) (string, error) {
	switch k {
	case KeyIPv4Addr, KeyIPv6Addr:
		a, ok := netip.AddrFromSlice(lo)
		if !ok || len(lo) != k.size() || len(hi) != len(lo) {
			return "", fmt.Errorf("bad %s of %d bytes", k, len(lo))
		}
		bits := prefixBits(lo, hi)
		if bits < 0 {
			b, _ := netip.AddrFromSlice(hi)
			return a.String() + "-" + b.String(), nil
		}
		if bits == len(lo)*8 {
			return a.String(), nil
		}
		return netip.PrefixFrom(a, bits).String(), nil
	case KeyInetProto:
		if len(lo) != 1 {
			return "", fmt.Errorf("bad protocol of %d bytes", len(lo))
		}
		return protoString(lo[0]), nil
	case KeyNFProto:
		if len(lo) != 1 {
			return "", fmt.Errorf("bad network protocol of %d bytes", len(lo))
		}
		if n, ok := nfprotoNames[lo[0]]; ok {
			return n, nil
		}
		return strconv.Itoa(int(lo[0])), nil
	case KeyInetService:
		if len(lo) != 2 {
			return "", fmt.Errorf("bad port of %d bytes", len(lo))
		}
		return strconv.Itoa(int(binary.BigEndian.Uint16(lo))), nil
	}
	return "", fmt.Errorf("unknown key type %q", k)
}

// prefixBits is the prefix length for which lo is the first and hi the last
// address, or -1 when lo..hi is not a prefix.
func prefixBits(lo, hi []byte) int {
	bits := 0
	for bits < len(lo)*8 {
		m := byte(0x80 >> (bits % 8))
		if lo[bits/8]&m != hi[bits/8]&m {
			break
		}
		bits++
	}
	for b := bits; b < len(lo)*8; b++ {
		m := byte(0x80 >> (b % 8))
		if lo[b/8]&m != 0 || hi[b/8]&m == 0 {
			return -1
		}
	}
	return bits
}

// element is one parsed element: its key's first and last value in the kernel's
// layout (padded fields for a concatenation), and in the Fake its timeout and when
// it lapses (zero: never).
type element struct {
	lo, hi  []byte
	timeout time.Duration
	expires time.Time
}

// parseElement turns a textual element into the kernel's key (and key end).
func parseElement(s Set, fields []string) (element, error) {
	if len(fields) != len(s.Key) {
		return element{}, fmt.Errorf("set %s: element %q has %d fields, the key has %d", s.Name, strings.Join(fields, " . "), len(fields), len(s.Key))
	}
	var e element
	for i, k := range s.Key {
		lo, hi, err := fieldRange(k, fields[i], s.Interval)
		if err != nil {
			return element{}, fmt.Errorf("set %s: element %q: %w", s.Name, strings.Join(fields, " . "), err)
		}
		if len(s.Key) > 1 {
			pad := make([]byte, k.padded()-len(lo))
			lo, hi = append(lo, pad...), append(hi, pad...)
		}
		e.lo, e.hi = append(e.lo, lo...), append(e.hi, hi...)
	}
	return e, nil
}

// elementFields prints a key (and key end) in the kernel's layout as fields.
func elementFields(s Set, lo, hi []byte) ([]string, error) {
	if hi == nil {
		hi = lo
	}
	if len(lo) != s.keyLen() || len(hi) != len(lo) {
		return nil, fmt.Errorf("set %s: key of %d bytes, want %d", s.Name, len(lo), s.keyLen())
	}
	out := make([]string, len(s.Key))
	off := 0
	for i, k := range s.Key {
		n := k.size()
		f, err := fieldString(k, lo[off:off+n], hi[off:off+n])
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", s.Name, err)
		}
		out[i] = f
		if len(s.Key) > 1 {
			off += k.padded()
		} else {
			off += n
		}
	}
	return out, nil
}

// canonicalElement is an element's text as nft lists it, from its parsed form.
func canonicalElement(s Set, fields []string) (string, element, error) {
	e, err := parseElement(s, fields)
	if err != nil {
		return "", element{}, err
	}
	f, err := elementFields(s, e.lo, e.hi)
	if err != nil {
		return "", element{}, err
	}
	return strings.Join(f, " . "), e, nil
}
