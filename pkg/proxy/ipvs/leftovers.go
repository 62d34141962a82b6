package ipvs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// A node switched to this daemon from upstream's iptables or nftables mode
// still holds that mode's rules. They are removed once, after the first sync
// that succeeds, and not before: until then they are what serves the
// Services (upstream's ipvs mode deletes the nftables tables before its first
// sync, and leaves the iptables-mode chains for good).

// iptablesModeOnlyChains are the chains upstream's iptables mode creates and
// the ipvs mode never uses, by table (pkg/proxy/iptables/proxier.go). The
// chains both modes use (nat KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ,
// filter KUBE-FORWARD, KUBE-PROXY-FIREWALL) our syncs rewrite instead.
var iptablesModeOnlyChains = map[iptables.Table][]iptables.Chain{
	iptables.TableNAT: {
		"KUBE-NODEPORTS",    // jumped to from KUBE-SERVICES, which our first sync rewrote
		"KUBE-PROXY-CANARY", // the rule-flush canary
	},
	iptables.TableFilter: {
		"KUBE-SERVICES",          // REJECT for Services without endpoints: it would keep rejecting them
		"KUBE-EXTERNAL-SERVICES", // REJECT/DROP for external addresses without endpoints
		"KUBE-NODEPORTS",         // ACCEPT for health check node ports
		"KUBE-PROXY-CANARY",
	},
	iptables.TableMangle: {
		"KUBE-PROXY-CANARY",
	},
}

// iptablesModeFirewallJump is the comment of the iptables mode's jumps from
// INPUT, OUTPUT and FORWARD into KUBE-PROXY-FIREWALL; ours come from INPUT and
// FORWARD with another comment (jumpRules), so these would run our firewall
// chain a second time, and for the node's own traffic too.
const iptablesModeFirewallJump = `--comment "kubernetes load balancer firewall"`

func isIPTablesModeOnlyChain(table iptables.Table, chain string) bool {
	for _, c := range iptablesModeOnlyChains[table] {
		if string(c) == chain {
			return true
		}
	}
	return table == iptables.TableNAT && iptablesrules.IsIPTablesModeServiceChain(chain)
}

// isIPTablesModeRule selects the iptables mode's rules in chains it shares
// with other software (the built-in ones) that jump into a chain ours keeps.
func isIPTablesModeRule(line string) bool {
	return iptablesrules.JumpTarget(strings.Fields(line)) == string(iptablesrules.ChainProxyFirewall) && strings.Contains(line, iptablesModeFirewallJump)
}

// nftablesModeTable is the table upstream's nftables mode keeps everything of a
// family in.
func nftablesModeTable(family v1.IPFamily) nftables.Table {
	if family == v1.IPv6Protocol {
		return nftables.Table{Family: nftables.FamilyIPv6, Name: "kube-proxy"}
	}
	return nftables.Table{Family: nftables.FamilyIPv4, Name: "kube-proxy"}
}

// removeOtherModesLeftovers removes this family's leftovers of upstream's
// iptables mode (iptablesModeOnlyChains, the per-Service hash chains and the
// rules that jump to them, the firewall jumps) and its nftables mode's table.
// It reports whether everything went; the caller tries again on its next full
// sync otherwise.
func (p *Proxier) removeOtherModesLeftovers(ctx context.Context, stats *SyncStats) bool {
	var errs []error
	tables := []iptables.Table{iptables.TableNAT, iptables.TableFilter, iptables.TableMangle}
	if p.kernel.IPTables == nil {
		tables = nil // the nftables rules backend on a node without iptables
	}
	for _, table := range tables {
		stats.count(opIPTablesSave)
		removed, err := iptablesrules.RemoveChains(ctx, p.kernel.IPTables, table,
			func(chain string) bool { return isIPTablesModeOnlyChain(table, chain) }, isIPTablesModeRule)
		if len(removed) > 0 || err != nil {
			stats.count(opIPTablesRestore)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing upstream iptables-mode chains from %s: %w", table, err))
			continue
		}
		if len(removed) > 0 {
			p.logger.Info("Removed upstream iptables-mode leftovers", "table", table, "chains", len(removed))
		}
	}
	if p.kernel.NFTables != nil {
		t := nftablesModeTable(p.opts.IPFamily)
		stats.count(opNFTablesDeleteTable)
		existed, err := p.kernel.NFTables.DeleteTable(ctx, t)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("removing upstream nftables-mode table: %w", err))
		case existed:
			p.logger.Info("Removed upstream nftables-mode table", "table", t.String())
		}
	}
	if err := errors.Join(errs...); err != nil {
		p.logger.Error(err, "Failed to remove upstream iptables- or nftables-mode leftovers; trying again on the next full sync")
		return false
	}
	return true
}
