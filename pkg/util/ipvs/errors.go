package ipvs

import (
	"errors"
	"syscall"
)

// The kernel (net/netfilter/ipvs/ip_vs_ctl.c) answers IPVS commands with these
// errnos, and moby/ipvs hands them back unchanged as a syscall.Errno:
//   - a command naming a virtual server that does not exist: ESRCH
//     (set/delete service, and every destination command);
//   - a destination that does not exist in an existing service: ENOENT
//     (set/delete destination); an unknown scheduler on add is ENOENT too;
//   - adding a service or destination that already exists: EEXIST;
//   - adding a destination whose address is not unicast (ip_vs_new_dest: an
//     IPv4 address inet_addr_type does not call RTN_UNICAST or RTN_LOCAL, an
//     IPv6 address that is not unicast or is link-local and not local): EINVAL,
//     as is a destination of the other family (checked in this package).
// Dumping the destinations of a missing service is not an error: the dump is empty.

// IsNotFound reports whether err says the virtual or real server does not exist.
func IsNotFound(err error) bool {
	return errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENOENT)
}

// IsExists reports whether err says the virtual or real server already exists.
func IsExists(err error) bool {
	return errors.Is(err, syscall.EEXIST)
}

// IsInvalid reports whether err says the kernel refuses the request itself
// (EINVAL), e.g. a real server address that is not unicast: retrying it
// unchanged can never succeed.
func IsInvalid(err error) bool {
	return errors.Is(err, syscall.EINVAL)
}
