package ipvs

import (
	"context"
	"fmt"
	"slices"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// sizedSpecs returns the create spec of every set of this family, each hash set
// sized for the members the index wants (ipset.Sized: never below upstream's
// 65536, never lowered, doubled past what it must hold), so 100k Service ports
// fit (kubernetes#129389).
func (p *Proxier) sizedSpecs() []*ipset.Set {
	specs := setSpecs(p.opts.IPFamily)
	for i, spec := range specs {
		var have *ipset.Set
		if p.applied != nil {
			have = p.applied.sets[spec.Name]
		}
		specs[i] = ipset.Sized(spec, have, p.index.setSize(p.reverse[spec.Name]))
	}
	return specs
}

// ensureSets creates missing sets, resizes sets that must hold more members than
// their maxelem and replaces sets of the wrong type (full syncs only).
func (p *Proxier) ensureSets(ctx context.Context, stats *SyncStats) error {
	tx := &ipset.Transaction{}
	var wrong []*ipset.Set
	specs := p.sizedSpecs()
	for _, spec := range specs {
		have, ok := p.applied.sets[spec.Name]
		switch {
		case !ok:
			tx.Create(spec)
		case ipset.NeedsResize(have, spec):
			if err := p.resizeSet(ctx, spec, stats); err != nil {
				return err
			}
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
		for _, spec := range specs {
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

// growSets resizes, before a partial sync writes its members, the sets that
// would otherwise be full.
func (p *Proxier) growSets(ctx context.Context, stats *SyncStats) error {
	for _, spec := range p.sizedSpecs() {
		if have, ok := p.applied.sets[spec.Name]; ok && ipset.NeedsResize(have, spec) {
			if err := p.resizeSet(ctx, spec, stats); err != nil {
				return err
			}
		}
	}
	return nil
}

// desiredEntries lists the members the index wants in one set, sorted.
func (p *Proxier) desiredEntries(set rules.Set) []rules.Member {
	var entries []rules.Member
	if set == setIPVSIPs {
		for a := range p.index.bindRefs {
			entries = append(entries, ipvsIPMember(a))
		}
	}
	for e := range p.index.setRefs {
		if e.Set == set {
			entries = append(entries, e)
		}
	}
	slices.SortFunc(entries, rules.Compare)
	return entries
}

// setAppliedEntries records that the kernel's set holds exactly entries.
func (p *Proxier) setAppliedEntries(set rules.Set, entries []rules.Member) {
	for e := range p.applied.entries {
		if e.Set == set {
			p.applied.entries.Delete(e)
		}
	}
	for _, e := range entries {
		p.applied.entries.Insert(e)
	}
}

// ipsetEntries is members in the text form of ipset.
func ipsetEntries(members []rules.Member) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = ipsetEntry(m)
	}
	return out
}

// resizeSet gives a set the maxelem of spec, filled with the members the index
// wants, in one `ipset restore` that swaps a filled temporary set in: the rules
// that match the set never see it missing or partly filled.
func (p *Proxier) resizeSet(ctx context.Context, spec *ipset.Set, stats *SyncStats) error {
	base := p.reverse[spec.Name]
	entries := p.desiredEntries(base)
	tx := ipset.Resize(spec, ipsetEntries(entries))
	stats.count(opIPSetRestore)
	stats.IPSetOps += tx.Len()
	if err := p.kernel.IPSet.Apply(ctx, tx); err != nil {
		return fmt.Errorf("resizing ipset %s to maxelem %d for %d members: %w", spec.Name, spec.MaxElem, len(entries), err)
	}
	old := p.applied.sets[spec.Name]
	p.applied.sets[spec.Name] = spec
	p.setAppliedEntries(base, entries)
	p.journal.noteSetRewrite(base)
	p.logger.Info("Resized ipset", "ipset", spec.Name, "members", len(entries), "maxElem", spec.MaxElem, "previousMaxElem", old.MaxElem)
	return nil
}

// replaceSet replaces a set of the wrong type or family (left by an older kube-proxy,
// kubernetes#77265) without a moment in which the rules that use it match nothing:
// the rules are pointed at a filled temporary set while the set is recreated.
func (p *Proxier) replaceSet(ctx context.Context, spec *ipset.Set, stats *SyncStats) error {
	base := p.reverse[spec.Name]
	entries := p.desiredEntries(base)
	r := ipset.NewReplacement(spec, ipsetEntries(entries))
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
	p.setAppliedEntries(base, entries)
	p.logger.Info("Replaced ipset of the wrong type", "ipset", spec.Name, "type", spec.Type)
	return nil
}
