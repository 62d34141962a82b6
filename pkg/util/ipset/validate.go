package ipset

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// MaxNameLen is the longest set name the kernel accepts (IPSET_MAXNAMELEN - 1).
const MaxNameLen = 31

// Defaults ipset itself applies, and the ones the proxier uses.
const (
	DefaultHashSize = 1024
	DefaultMaxElem  = 65536
)

// protocols are the only transport protocols kube-proxy puts in ip,port entries.
var protocols = map[string]bool{"tcp": true, "udp": true, "sctp": true}

// typeShape describes the components of an entry of each supported type, in order.
type component int

const (
	compIP component = iota
	compProtoPort
	compNet
	compPort
)

// typeShapes is the table of supported set types.
var typeShapes = map[Type][]component{
	HashIP:        {compIP},                         // 10.0.0.1
	HashIPPort:    {compIP, compProtoPort},          // 10.0.0.1,tcp:80
	HashIPPortIP:  {compIP, compProtoPort, compIP},  // 10.0.0.1,tcp:80,10.0.0.2
	HashIPPortNet: {compIP, compProtoPort, compNet}, // 10.0.0.1,tcp:80,10.0.0.0/8
	BitmapPort:    {compPort},                       // 30080
}

// IsHash reports whether t is one of the supported hash types.
func (t Type) IsHash() bool { _, ok := typeShapes[t]; return ok && t != BitmapPort }

// ValidateName checks a set name: 1 to 31 characters from a conservative alphabet
// (letters, digits, and - _ . : +), so it can never split or comment out a line of
// an `ipset restore` script.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty set name", ErrInvalid)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: set name %q is %d characters, the kernel allows %d", ErrInvalid, name, len(name), MaxNameLen)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("-_.:+", r):
		default:
			return fmt.Errorf("%w: set name %q contains %q", ErrInvalid, name, r)
		}
	}
	return nil
}

// ValidateSet checks a set definition and returns it with defaults filled in.
func ValidateSet(s *Set) (*Set, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil set", ErrInvalid)
	}
	if err := ValidateName(s.Name); err != nil {
		return nil, err
	}
	out := *s
	switch {
	case s.Type == BitmapPort:
		if s.Family != "" || s.HashSize != 0 || s.MaxElem != 0 {
			return nil, fmt.Errorf("%w: set %s: bitmap:port takes no family, hashsize or maxelem", ErrInvalid, s.Name)
		}
		if s.PortMin < 0 || s.PortMax > 65535 || s.PortMin > s.PortMax {
			return nil, fmt.Errorf("%w: set %s: bitmap:port range %d-%d is not within 0-65535", ErrInvalid, s.Name, s.PortMin, s.PortMax)
		}
		if s.PortMin == 0 && s.PortMax == 0 {
			out.PortMax = 65535 // the zero value means the full range
		}
	case s.Type.IsHash():
		switch s.Family {
		case "":
			out.Family = FamilyInet
		case FamilyInet, FamilyInet6:
		default:
			return nil, fmt.Errorf("%w: set %s: family %q is neither inet nor inet6", ErrInvalid, s.Name, s.Family)
		}
		if s.PortMin != 0 || s.PortMax != 0 {
			return nil, fmt.Errorf("%w: set %s: a hash set takes no port range", ErrInvalid, s.Name)
		}
		if s.HashSize < 0 || s.MaxElem < 0 {
			return nil, fmt.Errorf("%w: set %s: negative hashsize or maxelem", ErrInvalid, s.Name)
		}
		if s.HashSize == 0 {
			out.HashSize = DefaultHashSize
		}
		if s.MaxElem == 0 {
			out.MaxElem = DefaultMaxElem
		}
	default:
		return nil, fmt.Errorf("%w: set %s: unsupported type %q", ErrInvalid, s.Name, s.Type)
	}
	return &out, nil
}

// CanonicalEntry validates entry for a set of type t and family (inet/inet6, ignored
// for bitmap:port) and returns it in the form the kernel prints it in `ipset save`:
// lower-case protocol, compressed lower-case IPv6, a network address masked to its
// prefix and a host prefix (/32, /128) dropped. Port names, port ranges, CIDRs in
// plain address components, IPv4-mapped IPv6 addresses, zones and protocols other
// than tcp/udp/sctp are rejected.
func CanonicalEntry(t Type, family, entry string) (string, error) {
	shape, ok := typeShapes[t]
	if !ok {
		return "", fmt.Errorf("%w: unsupported set type %q", ErrInvalid, t)
	}
	want6 := false
	switch {
	case t == BitmapPort:
	case family == FamilyInet6:
		want6 = true
	case family == FamilyInet || family == "":
	default:
		return "", fmt.Errorf("%w: family %q is neither inet nor inet6", ErrInvalid, family)
	}
	parts := strings.Split(entry, ",")
	if len(parts) != len(shape) {
		return "", fmt.Errorf("%w: entry %q for %s needs %d comma-separated parts", ErrInvalid, entry, t, len(shape))
	}
	out := make([]string, len(parts))
	for i, c := range shape {
		var err error
		switch c {
		case compIP:
			out[i], err = canonicalAddr(parts[i], want6)
		case compProtoPort:
			out[i], err = canonicalProtoPort(parts[i])
		case compNet:
			out[i], err = canonicalNet(parts[i], want6)
		case compPort:
			var p int
			p, err = parsePort(parts[i])
			out[i] = strconv.Itoa(p)
		}
		if err != nil {
			return "", fmt.Errorf("%w: entry %q for %s %s: %v", ErrInvalid, entry, t, family, err)
		}
	}
	return strings.Join(out, ","), nil
}

// checkEntrySyntax validates an entry when the set's type is unknown: it must be a
// valid entry of some supported type and family, which keeps any restore line
// well-formed; the kernel then checks it against the real type.
func checkEntrySyntax(entry string) error {
	// Only the types with as many components as the entry can accept it, and the first
	// component's text tells the family: at most two attempts instead of every type
	// and family (this runs for every entry of a restore batch).
	parts := strings.Count(entry, ",") + 1
	family := FamilyInet
	if first, _, _ := strings.Cut(entry, ","); strings.Contains(first, ":") {
		family = FamilyInet6
	}
	for _, t := range entryTypesByParts[parts] {
		if _, err := CanonicalEntry(t, family, entry); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: entry %q is not valid for any supported set type", ErrInvalid, entry)
}

// entryTypesByParts lists the supported types by their number of components.
var entryTypesByParts = map[int][]Type{
	1: {HashIP, BitmapPort},
	2: {HashIPPort},
	3: {HashIPPortIP, HashIPPortNet},
}

func canonicalAddr(s string, want6 bool) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", fmt.Errorf("address %q: %v", s, err)
	}
	if err := checkFamily(a, want6); err != nil {
		return "", err
	}
	return a.String(), nil
}

func canonicalNet(s string, want6 bool) (string, error) {
	if !strings.Contains(s, "/") {
		return canonicalAddr(s, want6)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("network %q: %v", s, err)
	}
	if err := checkFamily(p.Addr(), want6); err != nil {
		return "", err
	}
	// The kernel refuses /0 in hash:*net types ("CIDR parameter ... is invalid").
	if p.Bits() == 0 {
		return "", fmt.Errorf("network %q: prefix length 0 is not allowed", s)
	}
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String(), nil
	}
	return p.Masked().String(), nil
}

func checkFamily(a netip.Addr, want6 bool) error {
	switch {
	case a.Zone() != "":
		return fmt.Errorf("address %s has a zone", a)
	case a.Is4In6():
		return fmt.Errorf("IPv4-mapped address %s", a)
	case want6 && !a.Is6():
		return fmt.Errorf("IPv4 address %s in an inet6 set", a)
	case !want6 && !a.Is4():
		return fmt.Errorf("IPv6 address %s in an inet set", a)
	}
	return nil
}

func canonicalProtoPort(s string) (string, error) {
	proto, port, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("%q is not proto:port", s)
	}
	proto = strings.ToLower(proto)
	if !protocols[proto] {
		return "", fmt.Errorf("protocol %q is not tcp, udp or sctp", proto)
	}
	p, err := parsePort(port)
	if err != nil {
		return "", err
	}
	return proto + ":" + strconv.Itoa(p), nil
}

// parsePort accepts a decimal port 0-65535 without sign or leading zeros (ipset
// would read 010 as octal, and names like "http" through /etc/services).
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("port %q is not a decimal number", s)
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("port %q is not a decimal number", s)
		}
	}
	p, _ := strconv.Atoi(s)
	if p > 65535 {
		return 0, fmt.Errorf("port %d is out of range 0-65535", p)
	}
	return p, nil
}
