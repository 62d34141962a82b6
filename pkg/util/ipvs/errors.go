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
//   - adding a service or destination that already exists: EEXIST.
// Dumping the destinations of a missing service is not an error: the dump is empty.

// IsNotFound reports whether err says the virtual or real server does not exist.
func IsNotFound(err error) bool {
	return errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENOENT)
}

// IsExists reports whether err says the virtual or real server already exists.
func IsExists(err error) bool {
	return errors.Is(err, syscall.EEXIST)
}
