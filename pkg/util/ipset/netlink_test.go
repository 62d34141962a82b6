package ipset

import (
	"bytes"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TestAppendEntry checks the member encoding against one built from
// vishvananda/netlink's attributes, and what it leaves to restore.
func TestAppendEntry(t *testing.T) {
	v4 := setHeader{typ: HashIPPortNet, inet: true}
	ref := nl.NewRtAttr(nl.IPSET_ATTR_DATA|unix.NLA_F_NESTED, nil)
	ip := ref.AddRtAttr(nl.IPSET_ATTR_IP|unix.NLA_F_NESTED, nil)
	ip.AddRtAttr(nl.IPSET_ATTR_IPADDR_IPV4|unix.NLA_F_NET_BYTEORDER, []byte{10, 0, 0, 1})
	ref.AddRtAttr(nl.IPSET_ATTR_PROTO, []byte{unix.IPPROTO_UDP})
	ref.AddRtAttr(nl.IPSET_ATTR_PORT|unix.NLA_F_NET_BYTEORDER, []byte{0x1f, 0x90})
	ip2 := ref.AddRtAttr(nl.IPSET_ATTR_IP2|unix.NLA_F_NESTED, nil)
	ip2.AddRtAttr(nl.IPSET_ATTR_IPADDR_IPV4|unix.NLA_F_NET_BYTEORDER, []byte{10, 1, 0, 0})
	ref.AddRtAttr(nl.IPSET_ATTR_CIDR2, []byte{16})
	got, ok := appendEntry([]byte{1, 2}, v4, "10.0.0.1,UDP:8080,10.1.0.0/16")
	if !ok || !bytes.Equal(got[2:], ref.Serialize()) || got[0] != 1 || got[1] != 2 {
		t.Errorf("appendEntry = %v, %v; want the prefix and %v", got, ok, ref.Serialize())
	}
	for _, tc := range []struct {
		h      setHeader
		member string
		ok     bool
	}{
		{setHeader{typ: HashIP, inet: true}, "::ffff:10.0.0.1", true},
		{setHeader{typ: HashIP, inet: true}, "fd00::1", false},
		{setHeader{typ: HashIP}, "fe80::1%eth0", false},
		{setHeader{typ: HashIP}, "fd00::1", true},
		{setHeader{typ: HashIPPort, inet: true}, "10.0.0.1,icmp:0", false},
		{setHeader{typ: HashIPPort, inet: true}, "10.0.0.1,tcp:65536", false},
		{setHeader{typ: HashIPPortIP, inet: true}, "10.0.0.1,tcp:80,10.0.0.1,x", false},
		{setHeader{typ: HashIPPortIP, inet: true}, "10.0.0.1,tcp:80,10.0.0.1,x,y", false},
		{v4, "10.0.0.1,tcp:80,10.0.0.0/0", false},
		{v4, "10.0.0.1,tcp:80,10.0.0.0/33", false},
		{setHeader{typ: BitmapPort}, "30080", true},
		{setHeader{typ: BitmapPort}, "tcp:30080", false},
		{setHeader{typ: "hash:net"}, "10.0.0.0/8", false},
	} {
		if _, ok := appendEntry(nil, tc.h, tc.member); ok != tc.ok {
			t.Errorf("appendEntry(%s, %q) ok = %v, want %v", tc.h.typ, tc.member, ok, tc.ok)
		}
	}
}
