package iptables

import (
	"context"
	"fmt"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	utiliptables "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// sizedSpecs returns the create spec of every set of this family, each hash set
// sized for the members the index wants (ipset.Sized: never below upstream's
// 65536, never lowered, doubled past what it must hold), so 100k Service ports
// fit (kubernetes#129389).
func (b *Backend) sizedSpecs(d rules.Desired) []*ipset.Set {
	specs := setSpecs(b.cfg.Family)
	for i, spec := range specs {
		specs[i] = ipset.Sized(spec, b.headers[spec.Name], d.SetSize(b.reverse[spec.Name]))
	}
	return specs
}

// ensureSets creates missing sets, resizes sets that must hold more members than
// their maxelem and replaces sets of the wrong type (full syncs only).
func (b *Backend) ensureSets(ctx context.Context, d rules.Desired, outRules []rules.OutFilter, c rules.Counter, out *rules.Outcome) error {
	tx := &ipset.Transaction{}
	var wrong []*ipset.Set
	specs := b.sizedSpecs(d)
	for _, spec := range specs {
		have, ok := b.headers[spec.Name]
		switch {
		case !ok:
			tx.Create(spec)
		case ipset.NeedsResize(have, spec):
			if err := b.resizeSet(ctx, d, spec, c, out); err != nil {
				return err
			}
		case ipset.NeedsReplace(have, spec):
			wrong = append(wrong, spec)
		}
	}
	if tx.Len() > 0 {
		c.Request(metrics.SubsystemIPSet, "restore")
		if err := b.ipset.Apply(ctx, tx); err != nil {
			return fmt.Errorf("creating ipsets: %w", err)
		}
		c.Wrote(metrics.SubsystemIPSet, tx.Len())
		for _, spec := range specs {
			if _, ok := b.headers[spec.Name]; !ok {
				b.noteHeader(spec)
			}
		}
	}
	for _, spec := range wrong {
		if err := b.replaceSet(ctx, d, outRules, spec, c, out); err != nil {
			return err
		}
	}
	return nil
}

// growSets resizes, before a partial sync writes its members, the sets that
// would otherwise be full.
func (b *Backend) growSets(ctx context.Context, d rules.Desired, c rules.Counter, out *rules.Outcome) error {
	for _, spec := range b.sizedSpecs(d) {
		if have, ok := b.headers[spec.Name]; ok && ipset.NeedsResize(have, spec) {
			if err := b.resizeSet(ctx, d, spec, c, out); err != nil {
				return err
			}
		}
	}
	return nil
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
func (b *Backend) resizeSet(ctx context.Context, d rules.Desired, spec *ipset.Set, c rules.Counter, out *rules.Outcome) error {
	base := b.reverse[spec.Name]
	entries := d.Members(base)
	tx := ipset.Resize(spec, ipsetEntries(entries))
	c.Request(metrics.SubsystemIPSet, "restore")
	c.Wrote(metrics.SubsystemIPSet, tx.Len())
	if err := b.ipset.Apply(ctx, tx); err != nil {
		return fmt.Errorf("resizing ipset %s to maxelem %d for %d members: %w", spec.Name, spec.MaxElem, len(entries), err)
	}
	old := b.headers[spec.Name]
	b.noteHeader(spec)
	out.Rewritten = append(out.Rewritten, base)
	b.log.Info("Resized ipset", "ipset", spec.Name, "members", len(entries), "maxElem", spec.MaxElem, "previousMaxElem", old.MaxElem)
	return nil
}

// replaceSet replaces a set of the wrong type or family (left by an older kube-proxy,
// kubernetes#77265) without a moment in which the rules that use it match nothing:
// the rules are pointed at a filled temporary set while the set is recreated.
func (b *Backend) replaceSet(ctx context.Context, d rules.Desired, outRules []rules.OutFilter, spec *ipset.Set, c rules.Counter, out *rules.Outcome) error {
	base := b.reverse[spec.Name]
	entries := d.Members(base)
	r := ipset.NewReplacement(spec, ipsetEntries(entries))
	if err := b.ipset.Apply(ctx, r.Stage1()); err != nil {
		return fmt.Errorf("preparing replacement %s for ipset %s: %w", r.Temp, spec.Name, err)
	}
	b.names[base] = r.Temp
	err := b.ipt.RestoreAll(ctx, b.Text(d, outRules), utiliptables.NoFlushTables, utiliptables.RestoreCount)
	b.names[base] = spec.Name
	if err != nil {
		return fmt.Errorf("pointing rules at temporary ipset %s: %w", r.Temp, err)
	}
	if err := b.ipset.Apply(ctx, r.Stage2()); err != nil {
		return fmt.Errorf("recreating ipset %s as %s: %w", spec.Name, spec.Type, err)
	}
	if err := b.ipt.RestoreAll(ctx, b.Text(d, outRules), utiliptables.NoFlushTables, utiliptables.RestoreCount); err != nil {
		return fmt.Errorf("pointing rules back at ipset %s: %w", spec.Name, err)
	}
	if err := b.ipset.Apply(ctx, r.Stage3()); err != nil {
		return fmt.Errorf("destroying temporary ipset %s: %w", r.Temp, err)
	}
	c.Wrote(metrics.SubsystemIPSet, 3)
	for range 3 {
		c.Request(metrics.SubsystemIPSet, "restore")
	}
	for range 2 {
		c.Request(metrics.SubsystemIPTables, "restore")
	}
	b.noteHeader(spec)
	out.Rewritten = append(out.Rewritten, base)
	b.log.Info("Replaced ipset of the wrong type", "ipset", spec.Name, "type", spec.Type)
	return nil
}
