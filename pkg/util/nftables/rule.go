package nftables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Rule is one rule: its statements in order, and a comment. It is written as
// netlink expressions and printed exactly as `nft list` prints what it wrote, so
// the Fake, the conformance tests and the real kernel agree on its text.
type Rule struct {
	Stmts   []Stmt
	Comment string
}

// Stmt is one statement of a rule: a match, an action or a verdict.
type Stmt interface {
	render(c *ruleCtx) string
	compile(c *ruleCtx) ([]expr.Any, error)
}

// ruleCtx carries what earlier statements of a rule established: the network
// protocol a match made certain (nft prints reject by it), and the registers used.
type ruleCtx struct {
	nfproto byte // unix.NFPROTO_IPV4 / _IPV6 once a match requires it
}

// needProto returns the dependency expressions nft puts before the first match on
// an IPv4 or IPv6 header in an inet table (nft does not print them).
func (c *ruleCtx) needProto(p byte) []expr.Any {
	if c.nfproto == p {
		return nil
	}
	c.nfproto = p
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// sawField notes, while printing, the protocol a field's match fixes.
func (c *ruleCtx) sawField(f Field) {
	if p := fieldInfo[f].nfproto; p != 0 {
		c.nfproto = p
	}
}

// String prints the rule as nft lists it.
func (r Rule) String() string {
	c := &ruleCtx{}
	parts := make([]string, 0, len(r.Stmts)+1)
	for _, s := range r.Stmts {
		parts = append(parts, s.render(c))
	}
	if r.Comment != "" {
		parts = append(parts, "comment "+quote(r.Comment))
	}
	return strings.Join(parts, " ")
}

func (r Rule) exprs() ([]expr.Any, error) {
	c := &ruleCtx{}
	var out []expr.Any
	for _, s := range r.Stmts {
		e, err := s.compile(c)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.String(), err)
		}
		out = append(out, e...)
	}
	return out, nil
}

func quote(s string) string { return `"` + s + `"` }

// Field is a packet field a rule reads.
type Field int

const (
	IPDaddr Field = iota
	IPSaddr
	IP6Daddr
	IP6Saddr
	L4Proto // meta l4proto
	THDport // th dport: the destination port of TCP, UDP or SCTP
	// MetaNFProto is the packet's network protocol (meta nfproto), the same for
	// every packet of a family: looked up in a set that holds it, or not, it
	// turns rules on and off.
	MetaNFProto
)

var fieldInfo = map[Field]struct {
	text    string
	key     KeyType
	nfproto byte
}{
	IPDaddr:  {"ip daddr", KeyIPv4Addr, unix.NFPROTO_IPV4},
	IPSaddr:  {"ip saddr", KeyIPv4Addr, unix.NFPROTO_IPV4},
	IP6Daddr: {"ip6 daddr", KeyIPv6Addr, unix.NFPROTO_IPV6},
	IP6Saddr: {"ip6 saddr", KeyIPv6Addr, unix.NFPROTO_IPV6},
	L4Proto:  {"meta l4proto", KeyInetProto, 0},
	THDport:  {"th dport", KeyInetService, 0},
	// A lookup of it fixes no protocol: the set may hold either.
	MetaNFProto: {"meta nfproto", KeyNFProto, 0},
}

// load loads f into reg (a 32-bit register number, or 1 for the first field).
func (f Field) load(c *ruleCtx, reg uint32) []expr.Any {
	info := fieldInfo[f]
	var out []expr.Any
	if info.nfproto != 0 {
		out = append(out, c.needProto(info.nfproto)...)
	}
	switch f {
	case IPDaddr:
		out = append(out, &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4, DestRegister: reg})
	case IPSaddr:
		out = append(out, &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4, DestRegister: reg})
	case IP6Daddr:
		out = append(out, &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16, DestRegister: reg})
	case IP6Saddr:
		out = append(out, &expr.Payload{Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16, DestRegister: reg})
	case L4Proto:
		out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg})
	case THDport:
		out = append(out, &expr.Payload{Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2, DestRegister: reg})
	case MetaNFProto:
		out = append(out, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg})
	}
	return out
}

// InSet matches when the concatenation of Fields is (or, Negate, is not) in Set.
type InSet struct {
	Fields []Field
	Set    string
	Negate bool
}

func (s InSet) render(c *ruleCtx) string {
	names := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		names[i] = fieldInfo[f].text
		c.sawField(f)
	}
	op := neq(s.Negate)
	return strings.Join(names, " . ") + " " + op + "@" + s.Set
}

// checkSet refuses a lookup whose fields do not have the set's key types. The
// kernel checks less (a shorter key reads uninitialised registers, ENODATA on
// recent kernels; a longer one is cut silently), so both implementations check
// this before anything is sent, with EINVAL.
func (s InSet) checkSet(set Set) error {
	ok := len(s.Fields) == len(set.Key)
	for i := 0; ok && i < len(s.Fields); i++ {
		ok = fieldInfo[s.Fields[i]].key == set.Key[i]
	}
	if !ok {
		return errnof(unix.EINVAL, "%s does not match set %s of type %s", s.render(&ruleCtx{}), set.Name, set.typeString())
	}
	return nil
}

func (s InSet) compile(c *ruleCtx) ([]expr.Any, error) {
	if len(s.Fields) == 0 || s.Set == "" {
		return nil, fmt.Errorf("a set match needs fields and a set")
	}
	var out []expr.Any
	reg := uint32(8) // NFT_REG32_00: the first field goes to "reg 1", which overlays it
	for i, f := range s.Fields {
		r := reg
		if i == 0 {
			r = 1
		}
		out = append(out, f.load(c, r)...)
		reg += uint32(fieldInfo[f].key.padded() / 4)
	}
	return append(out, &expr.Lookup{SourceRegister: 1, SetName: s.Set, Invert: s.Negate}), nil
}

// AddrIn matches an address field against a prefix (a full-length prefix is one
// address).
type AddrIn struct {
	Field  Field
	Prefix netip.Prefix
	Negate bool
}

func (a AddrIn) render(c *ruleCtx) string {
	c.sawField(a.Field)
	op := neq(a.Negate)
	v := a.Prefix.String()
	if a.Prefix.Bits() == a.Prefix.Addr().BitLen() {
		v = a.Prefix.Addr().String()
	}
	return fieldInfo[a.Field].text + " " + op + v
}

func (a AddrIn) compile(c *ruleCtx) ([]expr.Any, error) {
	info := fieldInfo[a.Field]
	if info.nfproto == 0 || (info.key == KeyIPv4Addr) != a.Prefix.Addr().Is4() || a.Prefix.Masked() != a.Prefix {
		return nil, fmt.Errorf("%s does not match %s", info.text, a.Prefix)
	}
	out := a.Field.load(c, 1)
	addr := a.Prefix.Addr().AsSlice()
	if a.Prefix.Bits() < len(addr)*8 {
		mask := make([]byte, len(addr))
		for b := 0; b < a.Prefix.Bits(); b++ {
			mask[b/8] |= 0x80 >> (b % 8)
		}
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(addr)), Mask: mask, Xor: make([]byte, len(addr))})
	}
	return append(out, &expr.Cmp{Op: cmpOp(a.Negate), Register: 1, Data: addr}), nil
}

// neq is the operator nft prints before a negated value.
func neq(negate bool) string {
	if negate {
		return "!= "
	}
	return ""
}

func cmpOp(negate bool) expr.CmpOp {
	if negate {
		return expr.CmpOpNeq
	}
	return expr.CmpOpEq
}

// FibLocal matches when the packet's destination (or, Source, its source) address
// is (or, Negate, is not) local to the node: `fib daddr type local`.
type FibLocal struct {
	Source bool
	Negate bool
}

func (f FibLocal) render(*ruleCtx) string {
	s := "fib daddr type "
	if f.Source {
		s = "fib saddr type "
	}
	if f.Negate {
		s += "!= "
	}
	return s + "local"
}

func (f FibLocal) compile(*ruleCtx) ([]expr.Any, error) {
	return []expr.Any{
		&expr.Fib{Register: 1, ResultADDRTYPE: true, FlagDADDR: !f.Source, FlagSADDR: f.Source},
		&expr.Cmp{Op: cmpOp(f.Negate), Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}, nil
}

// Conntrack states, as nft names them and in the order it prints them.
var ctStates = []struct {
	name string
	bit  uint32
}{
	{"invalid", 1}, {"established", 2}, {"related", 4}, {"new", 8}, {"untracked", 64},
}

// CTState matches a packet whose conntrack state is any of States.
type CTState struct {
	States []string
}

func (s CTState) bits() (uint32, error) {
	var bits uint32
	for _, name := range s.States {
		found := false
		for _, st := range ctStates {
			if st.name == name {
				bits |= st.bit
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown conntrack state %q", name)
		}
	}
	if bits == 0 {
		return 0, fmt.Errorf("a conntrack state match needs a state")
	}
	return bits, nil
}

func (s CTState) render(*ruleCtx) string {
	bits, _ := s.bits()
	var names []string
	for _, st := range ctStates {
		if bits&st.bit != 0 {
			names = append(names, st.name)
		}
	}
	return "ct state " + strings.Join(names, ",")
}

func (s CTState) compile(*ruleCtx) ([]expr.Any, error) {
	bits, err := s.bits()
	if err != nil {
		return nil, err
	}
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}, nil
}

// MarkHas matches when every bit of Mask is set in the packet mark (or, Negate,
// when not all are).
type MarkHas struct {
	Mask   uint32
	Negate bool
}

func (m MarkHas) render(*ruleCtx) string {
	op := "=="
	if m.Negate {
		op = "!="
	}
	return fmt.Sprintf("meta mark & %#08x %s %#08x", m.Mask, op, m.Mask)
}

func (m MarkHas) compile(*ruleCtx) ([]expr.Any, error) {
	v := binaryutil.NativeEndian.PutUint32(m.Mask)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: v, Xor: make([]byte, 4)},
		&expr.Cmp{Op: cmpOp(m.Negate), Register: 1, Data: v},
	}, nil
}

// IifName matches the input interface's name; a trailing "*" matches a prefix.
type IifName struct {
	Name   string
	Negate bool
}

func (i IifName) render(*ruleCtx) string {
	op := neq(i.Negate)
	return "iifname " + op + quote(i.Name)
}

func (i IifName) compile(*ruleCtx) ([]expr.Any, error) {
	if i.Name == "" || len(i.Name) >= unix.IFNAMSIZ || i.Name == "*" {
		return nil, fmt.Errorf("interface name %q", i.Name)
	}
	// "cni*" compares the prefix only; a plain name with its terminating zeros.
	name := []byte(strings.TrimSuffix(i.Name, "*"))
	if !strings.HasSuffix(i.Name, "*") {
		name = make([]byte, unix.IFNAMSIZ)
		copy(name, i.Name)
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: cmpOp(i.Negate), Register: 1, Data: name},
	}, nil
}

// MarkSet sets bits in (or, Xor, flips bits of) the packet mark.
type MarkSet struct {
	Bits uint32
	Xor  bool
}

func (m MarkSet) render(*ruleCtx) string {
	op := "|"
	if m.Xor {
		op = "^"
	}
	return fmt.Sprintf("meta mark set meta mark %s %#08x", op, m.Bits)
}

func (m MarkSet) compile(*ruleCtx) ([]expr.Any, error) {
	mask, xor := ^m.Bits, m.Bits
	if m.Xor {
		mask = 0xffffffff
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: binaryutil.NativeEndian.PutUint32(xor)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1, SourceRegister: true},
	}, nil
}

// Masquerade rewrites the source to the outgoing interface's address; valid only
// in nat chains on the postrouting hook.
type Masquerade struct {
	FullyRandom bool
}

func (m Masquerade) render(*ruleCtx) string {
	if m.FullyRandom {
		return "masquerade fully-random"
	}
	return "masquerade"
}

func (m Masquerade) compile(*ruleCtx) ([]expr.Any, error) {
	return []expr.Any{&expr.Masq{FullyRandom: m.FullyRandom}}, nil
}

// Reject refuses the packet with a port-unreachable: ICMP or ICMPv6 when an
// earlier match fixed the protocol, otherwise the kind fitting the packet.
// Valid only where the input, forward and output hooks reach.
type Reject struct{}

func (Reject) render(c *ruleCtx) string {
	switch c.nfproto {
	case unix.NFPROTO_IPV4:
		return "reject with icmp port-unreachable"
	case unix.NFPROTO_IPV6:
		return "reject with icmpv6 port-unreachable"
	}
	return "reject"
}

func (Reject) compile(c *ruleCtx) ([]expr.Any, error) {
	switch c.nfproto {
	case unix.NFPROTO_IPV4:
		return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3 /* ICMP_PORT_UNREACH */}}, nil
	case unix.NFPROTO_IPV6:
		return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 4 /* ICMPV6_PORT_UNREACH */}}, nil
	}
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}}, nil
}

// Verdict ends the rule: accept, drop, return, or a jump or goto to Chain.
type Verdict struct {
	Kind  VerdictKind
	Chain string
}

type VerdictKind string

const (
	Accept VerdictKind = "accept"
	Drop   VerdictKind = "drop"
	Return VerdictKind = "return"
	Jump   VerdictKind = "jump"
	Goto   VerdictKind = "goto"
)

func (v Verdict) render(*ruleCtx) string {
	if v.Kind == Jump || v.Kind == Goto {
		return string(v.Kind) + " " + v.Chain
	}
	return string(v.Kind)
}

func (v Verdict) compile(*ruleCtx) ([]expr.Any, error) {
	var k expr.VerdictKind
	switch v.Kind {
	case Accept:
		k = expr.VerdictAccept
	case Drop:
		k = expr.VerdictDrop
	case Return:
		k = expr.VerdictReturn
	case Jump:
		k = expr.VerdictJump
	case Goto:
		k = expr.VerdictGoto
	default:
		return nil, fmt.Errorf("unknown verdict %q", v.Kind)
	}
	if (v.Kind == Jump || v.Kind == Goto) != (v.Chain != "") {
		return nil, fmt.Errorf("verdict %s with chain %q", v.Kind, v.Chain)
	}
	return []expr.Any{&expr.Verdict{Kind: k, Chain: v.Chain}}, nil
}

// The verdicts without a target, for brevity.
var (
	AcceptVerdict = Verdict{Kind: Accept}
	DropVerdict   = Verdict{Kind: Drop}
	ReturnVerdict = Verdict{Kind: Return}
)

// JumpTo is a jump to chain.
func JumpTo(chain string) Verdict { return Verdict{Kind: Jump, Chain: chain} }

// metaKeyIIFKind is NFT_META_IIFKIND (kernel 5.x), which google/nftables does not name.
const metaKeyIIFKind expr.MetaKey = 26

// IifKind matches the kind of the input interface ("bridge", "veth", ...).
type IifKind struct {
	Kind   string
	Negate bool
}

func (i IifKind) render(*ruleCtx) string {
	op := neq(i.Negate)
	return "meta iifkind " + op + quote(i.Kind)
}

func (i IifKind) compile(*ruleCtx) ([]expr.Any, error) {
	if i.Kind == "" || len(i.Kind) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("interface kind %q", i.Kind)
	}
	kind := make([]byte, unix.IFNAMSIZ)
	copy(kind, i.Kind)
	return []expr.Any{
		&expr.Meta{Key: metaKeyIIFKind, Register: 1},
		&expr.Cmp{Op: cmpOp(i.Negate), Register: 1, Data: kind},
	}, nil
}

// NFProto matches the packet's network protocol: `meta nfproto ipv4`.
type NFProto struct {
	IPv6 bool
}

func (n NFProto) render(c *ruleCtx) string {
	if n.IPv6 {
		c.nfproto = unix.NFPROTO_IPV6
		return "meta nfproto ipv6"
	}
	c.nfproto = unix.NFPROTO_IPV4
	return "meta nfproto ipv4"
}

func (n NFProto) compile(c *ruleCtx) ([]expr.Any, error) {
	p := byte(unix.NFPROTO_IPV4)
	if n.IPv6 {
		p = unix.NFPROTO_IPV6
	}
	c.nfproto = p
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}, nil
}

// L4ProtoIs matches the transport protocol: `meta l4proto tcp`.
type L4ProtoIs struct {
	Proto byte
}

func (l L4ProtoIs) render(*ruleCtx) string { return "meta l4proto " + protoString(l.Proto) }

func (l L4ProtoIs) compile(*ruleCtx) ([]expr.Any, error) {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l.Proto}},
	}, nil
}

// CTOriginal matches the conntrack entry's original destination: the address a
// connection was opened to before IPVS rewrote it (with net.ipv4.vs.conntrack=1),
// and its port when Port is set (which needs an L4ProtoIs before it).
type CTOriginal struct {
	Daddr netip.Addr
	Port  uint16
}

func (o CTOriginal) render(*ruleCtx) string {
	fam := "ip"
	if o.Daddr.Is6() {
		fam = "ip6"
	}
	s := "ct original " + fam + " daddr " + o.Daddr.String()
	if o.Port != 0 {
		s += fmt.Sprintf(" ct original proto-dst %d", o.Port)
	}
	return s
}

func (o CTOriginal) compile(*ruleCtx) ([]expr.Any, error) {
	if !o.Daddr.IsValid() {
		return nil, fmt.Errorf("ct original daddr without an address")
	}
	// The family-neutral key with a direction (google/nftables sends the direction
	// only with it); the comparison covers the address's own bytes.
	out := []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyDST, Direction: 0},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: o.Daddr.AsSlice()},
	}
	if o.Port != 0 {
		out = append(out,
			&expr.Ct{Register: 1, Key: expr.CtKeyPROTODST, Direction: 0},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, o.Port)})
	}
	return out, nil
}

// PortUnreachable matches an ICMP (IPv6: ICMPv6) destination-unreachable message
// with code port-unreachable: what IPVS sends back when it refuses a connection.
type PortUnreachable struct {
	IPv6 bool
}

func (u PortUnreachable) render(c *ruleCtx) string {
	if u.IPv6 {
		c.nfproto = unix.NFPROTO_IPV6
		return "icmpv6 type destination-unreachable icmpv6 code port-unreachable"
	}
	c.nfproto = unix.NFPROTO_IPV4
	return "icmp type destination-unreachable icmp code port-unreachable"
}

func (u PortUnreachable) compile(c *ruleCtx) ([]expr.Any, error) {
	// ICMP: type 3 code 3; ICMPv6: type 1 code 4. nft prints the protocol
	// dependencies (nfproto, l4proto) as part of the icmp match.
	p, proto, typ, code := byte(unix.NFPROTO_IPV4), byte(unix.IPPROTO_ICMP), byte(3), byte(3)
	if u.IPv6 {
		p, proto, typ, code = unix.NFPROTO_IPV6, unix.IPPROTO_ICMPV6, 1, 4
	}
	out := c.needProto(p)
	return append(out,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1, DestRegister: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
		&expr.Payload{Base: expr.PayloadBaseTransportHeader, Offset: 1, Len: 1, DestRegister: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{code}},
	), nil
}
