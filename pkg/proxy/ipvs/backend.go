package ipvs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// The rules backends (--ipvs-rules-backend). IPVS and kube-ipvs0 are programmed the
// same way whichever is chosen; what differs is where the sets of service addresses
// and ports live and how the rules that masquerade, filter and accept service
// traffic are written: ipsets and iptables chains (upstream's ipvs mode, the
// default) or one nftables table. A backend is a package implementing
// rules.Backend; a sync reaches it only through the rule steps of its plan.
const (
	RulesBackendIPTables = iptablesrules.Name
	RulesBackendNFTables = nftrules.Name
)

// backends are the rules backends, the default first: adding one is a line here.
var backends = []rules.Registration{iptablesrules.Registration, nftrules.Registration}

// RulesBackends are the values --ipvs-rules-backend accepts.
var RulesBackends = func() []string {
	var names []string
	for _, r := range backends {
		names = append(names, r.Name)
	}
	return names
}()

// NFTRulesTable is the table of the nftables backend, for Kernel.NFTRules and
// CleanupKernel.NFTRules.
func NFTRulesTable() nftables.Table { return nftrules.Table() }

// rulesKernel is what the backends write through.
func rulesKernel(k Kernel) rules.Kernel {
	rk := rules.Kernel{IPSet: k.IPSet, IPTables: k.IPTables, NFTRules: k.NFTRules}
	if k.Reader != nil {
		rk.NFTReader = k.Reader.NFTRules
	}
	return rk
}

// newRulesBackend makes the backend named name ("" is the default).
func newRulesBackend(name string, cfg rules.Config, k rules.Kernel) (rules.Backend, error) {
	if name == "" {
		name = backends[0].Name
	}
	for _, r := range backends {
		if r.Name == name {
			return r.New(cfg, k)
		}
	}
	return nil, fmt.Errorf("unknown rules backend %q (want %s)", name, strings.Join(RulesBackends, " or "))
}

// rulesConfig is what this proxier's rules depend on besides the Services.
func (p *Proxier) rulesConfig() rules.Config {
	return rules.Config{
		Family:            p.opts.IPFamily,
		MasqueradeAll:     p.opts.MasqueradeAll,
		MasqueradeMark:    fmt.Sprintf("%#08x", 1<<uint(p.opts.MasqueradeBit)),
		LocalDetectorArgs: p.opts.LocalDetectorArgs,
		SyncPeriod:        p.opts.SyncPeriod,
		Logger:            p.logger,
		Clock:             p.clock,
	}
}

// removeOtherBackends removes what every other backend left of this family (the
// node switched backends) and reports whether everything went. A backend whose
// kernel interfaces are missing has left nothing.
func (p *Proxier) removeOtherBackends(ctx context.Context, stats *SyncStats) bool {
	ok := true
	for _, r := range backends {
		if r.Name == p.rules.Name() {
			continue
		}
		b, err := r.New(p.rulesConfig(), rulesKernel(p.kernel))
		if errors.Is(err, rules.ErrUnavailable) {
			continue
		}
		if err == nil {
			_, err = b.Remove(ctx, stats)
		}
		if err != nil {
			p.logger.Error(err, "Failed to remove the other rules backend's objects; trying again on the next full sync", "backend", r.Name)
			ok = false
		}
	}
	return ok
}

// applyRules carries out one rule step and records its outcome: what landed in
// p.applied, what the kernel refused in out (nil: refusals are not expected).
func (p *Proxier) applyRules(ctx context.Context, s rules.Step, stats *SyncStats, out *outcome) error {
	var o rules.Outcome
	err := p.rules.Apply(ctx, p.index, s, stats, &o)
	p.takeRulesOutcome(&o, out)
	return err
}

// takeRulesOutcome records a rule step's outcome.
func (p *Proxier) takeRulesOutcome(o *rules.Outcome, out *outcome) {
	if o.NeedFull {
		p.needFull = true
	}
	for _, d := range o.Later {
		pl := &syncPlan{steps: []step{d.Step}}
		p.afterFunc(d.After, func() { p.runBeside(p.ctx, pl, &SyncStats{}) })
	}
	a := p.applied
	if a == nil {
		return
	}
	if o.Emptied {
		p.setsEmptied = true
		a.entries.Clear()
		a.iptables = nil
	}
	for _, set := range o.Rewritten {
		for e := range a.entries {
			if e.Set == set {
				a.entries.Delete(e)
			}
		}
		for _, e := range p.index.Members(set) {
			a.entries.Insert(e)
		}
		p.journal.noteSetRewrite(set)
	}
	for _, c := range o.Landed {
		if c.Add {
			a.entries.Insert(c.Member)
		} else {
			a.entries.Delete(c.Member)
		}
	}
	if o.Text != nil {
		a.iptables = o.Text
	}
	if o.RulesUnknown {
		a.iptables = nil
	}
	if out != nil {
		out.writtenRules = append(out.writtenRules, o.WrittenOut...)
		for _, r := range o.Refused {
			out.fail(p.refusalFailure(r))
		}
	}
}

// refusalFailure is a backend's refusal as a held-back object.
func (p *Proxier) refusalFailure(r rules.Refusal) failure {
	f := failure{layer: r.Reason, what: r.What, err: r.Err}
	switch {
	case r.Change != nil:
		f.key = retryKey{kind: retryEntry, entry: r.Change.Member}
		if r.Change.Add {
			f.owners = p.index.ownersOfEntry(r.Change.Member)
		}
	case r.Out != nil:
		f.key = retryKey{kind: retryOutRule, out: *r.Out}
		f.owners = p.index.ownersOfOutRule(*r.Out)
	default:
		f.key = retryKey{kind: retryElement, text: r.Other}
	}
	return f
}

// Request, Wrote and RulesWritten count a backend's kernel requests (rules.Counter).
func (s *SyncStats) Request(subsystem, operation string) {
	for op, k := range kernelOps {
		if k.subsystem == subsystem && k.operation == operation {
			s.ops[op]++
			return
		}
	}
}

func (s *SyncStats) Wrote(subsystem string, n int) {
	switch subsystem {
	case metrics.SubsystemIPSet:
		s.IPSetOps += n
	case metrics.SubsystemNFTables:
		s.NFTablesOps += n
	}
}

func (s *SyncStats) RulesWritten() { s.IPTablesWrite = true }

// rulesHeldBack reports whether a set member or an out-filter rule is held back:
// until none is, the rules are not complete, and the other backend's state still
// serves the Services whose members are missing.
func (f *failureMemory) rulesHeldBack() bool {
	for k := range f.retries {
		if k.kind == retryEntry || k.kind == retryOutRule {
			return true
		}
	}
	return false
}
