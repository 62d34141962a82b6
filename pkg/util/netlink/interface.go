// Package netlink is the kernel boundary for links and addresses: the kube-ipvs0
// dummy device, the service addresses bound to it, and the node's local addresses.
package netlink

import (
	"context"
	"net"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// DefaultDummyDevice is the interface that holds every service address.
const DefaultDummyDevice = "kube-ipvs0"

// Handle is what the proxier needs from rtnetlink. Address arguments are bare IPs;
// they are bound with a host prefix (/32 or /128).
type Handle interface {
	// EnsureDummyDevice creates the dummy link, left down as upstream leaves it,
	// if missing; reports whether it existed.
	EnsureDummyDevice(ctx context.Context, dev string) (bool, error)
	DeleteDummyDevice(ctx context.Context, dev string) error
	// EnsureAddressBind binds ip to dev; reports whether it was already bound.
	EnsureAddressBind(ctx context.Context, ip net.IP, dev string) (bool, error)
	// BindAddresses binds every ip to dev at once (pipelined) and returns one error
	// per address, as EnsureAddressBind would (nil when bound, already bound
	// included).
	BindAddresses(ctx context.Context, ips []net.IP, dev string) []error
	UnbindAddress(ctx context.Context, ip net.IP, dev string) error
	// ListBindAddress lists the addresses of family af (ipfamily.Any: both) bound to
	// dev; the kernel leaves the other family's out of its answer.
	ListBindAddress(ctx context.Context, dev string, af ipfamily.Family) ([]net.IP, error)
	// GetLocalAddresses lists every local unicast address of the node, except those
	// on excludeDev (and loopback addresses).
	GetLocalAddresses(ctx context.Context, excludeDev string) ([]net.IP, error)
	// WatchLocalAddresses calls changed (from one goroutine; it must not block)
	// whenever what GetLocalAddresses(excludeDev) returns may have changed,
	// until ctx is done. Changes made after it returns are never missed.
	WatchLocalAddresses(ctx context.Context, excludeDev string, changed func()) error
}
