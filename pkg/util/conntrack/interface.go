// Package conntrack is the kernel boundary for connection tracking: dumping and
// deleting UDP/SCTP flows over netlink.
package conntrack

import (
	"context"
	"net"
)

// Flow is the part of a conntrack entry the proxier cares about.
type Flow struct {
	Protocol     uint8 // IPPROTO_UDP (17), IPPROTO_SCTP (132), IPPROTO_TCP (6)
	OrigSrc      net.IP
	OrigDst      net.IP
	OrigSrcPort  uint16
	OrigDstPort  uint16
	ReplySrc     net.IP
	ReplySrcPort uint16
}

// Interface dumps and deletes flows of one IP family.
type Interface interface {
	// ListFlows returns every flow of the given protocol.
	ListFlows(ctx context.Context, protocol uint8) ([]Flow, error)
	// DeleteFlows deletes the given flows (matched on their original tuple); flows that
	// are already gone are not an error. Returns how many were deleted.
	DeleteFlows(ctx context.Context, flows []Flow) (int, error)
}
