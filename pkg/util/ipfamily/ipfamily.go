// Package ipfamily names an address family for the kernel layers' reads that can
// leave the other family out (ipvs.Client.GetAll, netlink.Client.ListBindAddress).
package ipfamily

import (
	"net"

	"golang.org/x/sys/unix"
)

// Family is an address family: Any, IPv4 or IPv6 (the kernel's AF_* values).
type Family uint16

const (
	Any  Family = unix.AF_UNSPEC
	IPv4 Family = unix.AF_INET
	IPv6 Family = unix.AF_INET6
)

// Has reports whether ip is of family f (Any: every address).
func (f Family) Has(ip net.IP) bool {
	switch f {
	case IPv4:
		return ip.To4() != nil
	case IPv6:
		return ip.To4() == nil
	}
	return true
}

// OfCIDR returns the family of cidr as Kubernetes classifies it (k8s.io/utils/net
// IPFamilyOfCIDR): by its address, so an IPv4-mapped IPv6 prefix such as
// ::ffff:198.18.0.0/111 is IPv4, whatever the length of its mask.
func OfCIDR(cidr *net.IPNet) Family {
	if cidr.IP.To4() != nil {
		return IPv4
	}
	return IPv6
}

// CanonicalCIDR returns cidr in the form of its family: an IPv4 prefix gets a 4-byte
// address and mask (::ffff:198.18.0.0/111 becomes 198.18.0.0/15), so that Contains
// matches IPv4 addresses and String prints what ipset and nftables accept. An IPv6
// prefix, or one already in 4-byte form, is returned as it is.
func CanonicalCIDR(cidr *net.IPNet) *net.IPNet {
	v4 := cidr.IP.To4()
	if v4 == nil || len(cidr.Mask) == net.IPv4len {
		return cidr
	}
	// The address is ::ffff:a.b.c.d after masking, so the mask covers the 96 bits
	// before the IPv4 part: 96 or more ones.
	ones, _ := cidr.Mask.Size()
	return &net.IPNet{IP: v4, Mask: net.CIDRMask(max(ones-96, 0), 32)}
}
