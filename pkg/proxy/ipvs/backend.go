package ipvs

import (
	"context"
	"fmt"
	"sort"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// The rules backends (--ipvs-rules-backend, issue 16). IPVS and kube-ipvs0 are
// programmed the same way whichever is chosen; what differs is where the sets of
// service addresses and ports live and how the rules that masquerade, filter and
// accept service traffic are written: ipsets and iptables chains (upstream's ipvs
// mode, the default) or one nftables table (nftbackend.go). A sync reaches them only
// through rulesBackend, at the stages where it used to call ipset and iptables.
const (
	RulesBackendIPTables = "iptables"
	RulesBackendNFTables = "nftables"
)

// RulesBackends are the values --ipvs-rules-backend accepts.
var RulesBackends = []string{RulesBackendIPTables, RulesBackendNFTables}

// NFTRulesTable is the table of the nftables backend, for Kernel.NFTRules and
// CleanupKernel.NFTRules.
func NFTRulesTable() nftables.Table { return nftTable }

// rulesBackend is what a sync asks of the rules beside IPVS. Set members are
// handled as ipset entries of the base sets (setEntry) on both sides: that is what
// the desired index holds and what the plan diffs; a backend translates them.
type rulesBackend interface {
	// observeSets reads the members the kernel's sets hold into st (full syncs).
	// It may run beside the sync loop (resync.go), so it reads only what does not
	// change after construction.
	observeSets(ctx context.Context, st *appliedState, stats *SyncStats) error
	// prepare makes the sets exist as they must, before a full sync plans.
	prepare(ctx context.Context, stats *SyncStats) error
	// grow makes room for the members a partial sync is about to write.
	grow(ctx context.Context, stats *SyncStats) error
	// rulesText is what the rules are with outRules in KUBE-IPVS-OUT-FILTER; the plan
	// writes them when it differs from what was last written (applied.iptables), and
	// on every full sync.
	rulesText(outRules []rules.OutFilter) []byte
	// applySets writes the plan's member changes. A member the kernel refuses is
	// recorded in out (held back with its Services) and the others are written; the
	// error is for failures no member explains.
	applySets(ctx context.Context, pl *syncPlan, stats *SyncStats, out *outcome) error
	// writeRules writes the rules (text is rulesText(outRules)); refused out-filter
	// rules are isolated and recorded in out.
	writeRules(ctx context.Context, text []byte, outRules []rules.OutFilter, stats *SyncStats, out *outcome) error
	// ensureJumps makes sure packets reach the rules (full syncs).
	ensureJumps(ctx context.Context, stats *SyncStats) error
	// quiet holds back the kernel's refusals from addrs while schedulers change
	// (quiet.go) and returns the function that ends it.
	quiet(ctx context.Context, addrs []string, stats *SyncStats) func()
	// removeOther removes what the other backend left of this family (a node
	// switched backends). It runs after a full sync that wrote every member and
	// rule, and reports whether everything went.
	removeOther(ctx context.Context, stats *SyncStats) bool
	// keepAlive runs first in every run of the sync loop: the nftables backend's
	// rules apply only while the daemon renews them (nftalive.go).
	keepAlive(ctx context.Context, stats *SyncStats)
}

// newRulesBackend returns the backend opts ask for.
func newRulesBackend(p *Proxier, opts Options, kernel Kernel) (rulesBackend, error) {
	switch opts.RulesBackend {
	case "", RulesBackendIPTables:
		if kernel.IPSet == nil || kernel.IPTables == nil {
			return nil, fmt.Errorf("the %s rules backend needs ipset and iptables", RulesBackendIPTables)
		}
		return iptablesBackend{p}, nil
	case RulesBackendNFTables:
		if kernel.NFTRules == nil {
			return nil, fmt.Errorf("the %s rules backend needs an nftables ruleset", RulesBackendNFTables)
		}
		if kernel.NFTRules.Table() != nftTable {
			return nil, fmt.Errorf("the %s rules backend writes table %s, not %s", RulesBackendNFTables, nftTable, kernel.NFTRules.Table())
		}
		return newNFTBackend(p, kernel.NFTRules, kernel.Reader)
	}
	return nil, fmt.Errorf("unknown rules backend %q (want %s or %s)", opts.RulesBackend, RulesBackendIPTables, RulesBackendNFTables)
}

// iptablesBackend is upstream's programme: ipsets (sets.go, setsync.go) and iptables
// chains (iptables.go), written by `ipset restore` and `iptables-restore`.
type iptablesBackend struct{ p *Proxier }

func (b iptablesBackend) observeSets(ctx context.Context, st *appliedState, stats *SyncStats) error {
	return b.p.observeIPSets(ctx, st, stats)
}

func (b iptablesBackend) prepare(ctx context.Context, stats *SyncStats) error {
	return b.p.ensureSets(ctx, stats)
}

func (b iptablesBackend) grow(ctx context.Context, stats *SyncStats) error {
	return b.p.growSets(ctx, stats)
}

func (b iptablesBackend) rulesText(outRules []rules.OutFilter) []byte {
	return b.p.iptablesRules(outRules)
}

func (b iptablesBackend) applySets(ctx context.Context, pl *syncPlan, stats *SyncStats, out *outcome) error {
	return b.p.executeSets(ctx, pl.sets, stats, out)
}

func (b iptablesBackend) writeRules(ctx context.Context, text []byte, outRules []rules.OutFilter, stats *SyncStats, out *outcome) error {
	return b.p.executeIPTables(ctx, text, outRules, stats, out)
}

func (b iptablesBackend) ensureJumps(ctx context.Context, stats *SyncStats) error {
	return b.p.ensureJumpRules(ctx, stats)
}

func (b iptablesBackend) quiet(ctx context.Context, addrs []string, stats *SyncStats) func() {
	return b.p.quietRefusals(ctx, addrs, stats)
}

// keepAlive has nothing to do: these are upstream's ipsets and chains, which
// upstream's ipvs mode adopts and rewrites.
func (b iptablesBackend) keepAlive(context.Context, *SyncStats) {}

// removeOther removes this family's objects from the nftables backend's table, and
// the table once no family has any left. Without a ruleset (the server opens one
// only when the table exists) there is nothing to remove.
func (b iptablesBackend) removeOther(ctx context.Context, stats *SyncStats) bool {
	p := b.p
	if p.kernel.NFTRules == nil {
		return true
	}
	removed, err := removeNFTFamily(ctx, p.kernel.NFTRules, newNFTFamily(p.opts.IPFamily), stats)
	if err != nil {
		p.logger.Error(err, "Failed to remove the nftables rules backend's objects; trying again on the next full sync", "table", nftTable.String())
		return false
	}
	if removed > 0 {
		p.logger.Info("Removed the nftables rules backend's objects of this family", "table", nftTable.String(), "objects", removed)
	}
	return true
}

// rulesHeldBack reports whether a set member or an out-filter rule is held back:
// until none is, the rules are not complete, and the other backend's state still
// serves the Services whose members are missing.
func (p *Proxier) rulesHeldBack() bool {
	for k := range p.retries {
		if k.kind == retryEntry || k.kind == retryOutRule {
			return true
		}
	}
	return false
}

// removeIPTablesBackend removes what the iptables backend left of this family: the
// chains kube-proxy creates in nat, filter and mangle with every rule that jumps to
// them (as --cleanup does), then this family's ipsets (a set an iptables rule uses
// cannot be destroyed, so the chains go first). A node without the tools has none.
func (p *Proxier) removeIPTablesBackend(ctx context.Context, stats *SyncStats) error {
	if ipt := p.kernel.IPTables; ipt != nil {
		for _, table := range []iptables.Table{iptables.TableNAT, iptables.TableFilter, iptables.TableMangle} {
			stats.count(opIPTablesSave)
			removed, err := removeChains(ctx, ipt, table, func(chain string) bool { return isKubeProxyChain(table, chain) }, nil)
			if len(removed) > 0 || err != nil {
				stats.count(opIPTablesRestore)
			}
			if err != nil {
				return fmt.Errorf("removing %s chains: %w", table, err)
			}
			if len(removed) > 0 {
				p.logger.Info("Removed the iptables rules backend's chains", "table", table, "chains", len(removed))
			}
		}
	}
	if p.kernel.IPSet == nil {
		return nil
	}
	stats.count(opIPSetSave)
	saved, err := p.kernel.IPSet.SaveAll(ctx)
	if err != nil {
		return fmt.Errorf("listing ipsets: %w", err)
	}
	var names []string
	for _, name := range p.names {
		for _, n := range []string{name, ipset.TempName(name)} {
			if _, ok := saved[n]; ok {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	tx := &ipset.Transaction{}
	for _, n := range names {
		tx.Destroy(n)
	}
	stats.count(opIPSetRestore)
	if err := p.kernel.IPSet.Apply(ctx, tx); err != nil {
		return fmt.Errorf("destroying ipsets: %w", err)
	}
	p.logger.Info("Removed the iptables rules backend's ipsets", "ipsets", len(names))
	return nil
}
