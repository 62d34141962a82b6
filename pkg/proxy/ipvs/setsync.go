package ipvs

import (
	"context"
	"fmt"
	"sort"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// ensureSets creates missing sets and replaces sets of the wrong type (full syncs only).
func (p *Proxier) ensureSets(ctx context.Context, stats *SyncStats) error {
	tx := &ipset.Transaction{}
	var wrong []*ipset.Set
	for _, spec := range setSpecs(p.opts.IPFamily) {
		have, ok := p.applied.sets[spec.Name]
		switch {
		case !ok:
			tx.Create(spec)
		case ipset.NeedsReplace(have, spec):
			wrong = append(wrong, spec)
		}
	}
	if tx.Len() > 0 {
		stats.count(opIPSetRestore)
		if err := p.kernel.IPSet.Apply(ctx, tx); err != nil {
			return fmt.Errorf("creating ipsets: %w", err)
		}
		stats.IPSetOps += tx.Len()
		for _, spec := range setSpecs(p.opts.IPFamily) {
			if _, ok := p.applied.sets[spec.Name]; !ok {
				p.applied.sets[spec.Name] = spec
			}
		}
	}
	for _, spec := range wrong {
		if err := p.replaceSet(ctx, spec, stats); err != nil {
			return err
		}
	}
	return nil
}

// replaceSet replaces a set of the wrong type or family (left by an older kube-proxy,
// kubernetes#77265) without a moment in which the rules that use it match nothing:
// the rules are pointed at a filled temporary set while the set is recreated.
func (p *Proxier) replaceSet(ctx context.Context, spec *ipset.Set, stats *SyncStats) error {
	base := p.reverse[spec.Name]
	var entries []string
	for e := range p.index.setRefs {
		if e.set == base {
			entries = append(entries, e.entry)
		}
	}
	sort.Strings(entries)
	r := ipset.NewReplacement(spec, entries)
	if err := p.kernel.IPSet.Apply(ctx, r.Stage1()); err != nil {
		return fmt.Errorf("preparing replacement %s for ipset %s: %w", r.Temp, spec.Name, err)
	}
	p.names[base] = r.Temp
	err := p.kernel.IPTables.RestoreAll(ctx, p.iptablesRules(p.outFilterRules(nil)), iptables.NoFlushTables, iptables.RestoreCount)
	p.names[base] = spec.Name
	if err != nil {
		return fmt.Errorf("pointing rules at temporary ipset %s: %w", r.Temp, err)
	}
	if err := p.kernel.IPSet.Apply(ctx, r.Stage2()); err != nil {
		return fmt.Errorf("recreating ipset %s as %s: %w", spec.Name, spec.Type, err)
	}
	if err := p.kernel.IPTables.RestoreAll(ctx, p.iptablesRules(p.outFilterRules(nil)), iptables.NoFlushTables, iptables.RestoreCount); err != nil {
		return fmt.Errorf("pointing rules back at ipset %s: %w", spec.Name, err)
	}
	if err := p.kernel.IPSet.Apply(ctx, r.Stage3()); err != nil {
		return fmt.Errorf("destroying temporary ipset %s: %w", r.Temp, err)
	}
	stats.IPSetOps += 3
	stats.ops[opIPSetRestore] += 3
	stats.ops[opIPTablesRestore] += 2
	p.applied.sets[spec.Name] = spec
	for e := range p.applied.entries {
		if e.set == base {
			p.applied.entries.Delete(e)
		}
	}
	for _, e := range entries {
		p.applied.entries.Insert(setEntry{base, e})
	}
	p.logger.Info("Replaced ipset of the wrong type", "ipset", spec.Name, "type", spec.Type)
	return nil
}
