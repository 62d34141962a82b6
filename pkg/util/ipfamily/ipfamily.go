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
