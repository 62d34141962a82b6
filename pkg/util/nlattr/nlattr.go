// Package nlattr encodes netlink attributes for the packages that build their own
// netlink requests (pkg/util/ipvs, pkg/util/netlink).
package nlattr

import "encoding/binary"

// Append appends an attribute of type typ holding v to b: a 4-byte header (length,
// type) in host byte order, v, and padding to a multiple of 4 bytes. b's length
// is a multiple of 4, as it is everywhere in a netlink message.
func Append(b []byte, typ uint16, v []byte) []byte {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(4+len(v)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b = append(append(b, h[:]...), v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
