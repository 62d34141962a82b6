package iptables

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	utiliptables "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// Changing a virtual server's scheduler in place is not atomic in the kernel:
// ip_vs_edit_service unbinds the old scheduler, waits for an RCU grace period and binds
// the new one. A connection that arrives in between finds no scheduler, so IPVS drops
// its first packet and answers with an ICMP port unreachable (ip_vs_leave), which the
// client's TCP takes as "connection refused". Under load that is a failed connection or
// two per change, on a busy or emulated node more.
//
// While such edits run, the ICMP port unreachables those addresses send are dropped
// (one rule per address at the top of KUBE-IPVS-OUT-FILTER, which the node's own
// packets, ICMP errors included, pass through on OUTPUT). The refused packet is then
// simply lost and the client sends it again (a TCP SYN after its 1 s retransmission
// timeout), by which time the new scheduler is bound: the connection is late, not
// failed. The rules go as soon as the edits are done; should removing them fail, or the
// process die in between, the next write of our chains (every full sync rewrites them
// whole) takes them away.
//
// The nftables backend does the same with a set: the addresses go into the family's
// quiet set, which a rule at the top of its filter-output base chain matches
// (nftBackend.quiet). They leave it a second after the edits, not at once: a packet
// that found no scheduler can still be on its way to the ICMP error when the edit
// returns, and an element is removed in a millisecond (an iptables-restore takes
// tens). Every full sync empties the set of all but those still lingering.

// quietRules is the iptables-restore text that inserts (op "-I") or deletes ("-D") the
// rules for addrs.
func quietRules(family v1.IPFamily, op string, addrs []string) []byte {
	match, suffix := "-p icmp -m icmp --icmp-type port-unreachable", "/32"
	if family == v1.IPv6Protocol {
		match, suffix = "-p ipv6-icmp -m icmp6 --icmpv6-type port-unreachable", "/128"
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "%s %s -s %s%s %s -m comment --comment %q -j DROP\n", op, chainIPVSOutFilter, a, suffix, match, rules.QuietComment)
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// quietRefusals inserts (op "-I") the rules for addrs, or deletes ("-D") those it
// inserted. Neither is worth failing the sync for: without the rules a scheduler
// change still lands, at the price of the refusals above.
func (b *Backend) quietRefusals(ctx context.Context, addrs []string, op string, c rules.Counter, out *rules.Outcome) {
	if op == "-D" {
		addrs, b.quieted = b.quieted, nil
	}
	if len(addrs) == 0 {
		return
	}
	c.RulesWritten()
	c.Request(metrics.SubsystemIPTables, "restore")
	b.guard.mu.Lock()
	b.guard.wrote()
	err := b.ipt.RestoreAll(ctx, quietRules(b.cfg.Family, op, addrs), utiliptables.NoFlushTables, utiliptables.NoRestoreCount)
	b.guard.mu.Unlock()
	switch {
	case err != nil && op == "-I":
		b.log.Error(err, "Could not hold back the kernel's refusals while schedulers change; connections arriving during the change may be refused", "addresses", addrs)
	case err != nil:
		// The next write of our chains removes them; make sure there is one.
		out.RulesUnknown = true
		b.log.Error(err, "Could not remove the rules that held back refusals during a scheduler change; the next sync rewrites the chain", "addresses", addrs)
	case op == "-I":
		b.quieted = addrs
	}
}
