package iptables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	utiliptables "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// The iptables rules backend is upstream's programme: ipsets (sets.go, setsync.go)
// and iptables chains (chains.go), written by `ipset restore` and
// `iptables-restore`. Upstream's ipvs mode adopts and rewrites both, so a node can
// go back to it at any time.

// Name is the value of --ipvs-rules-backend that selects this backend.
const Name = "iptables"

// Registration makes this backend.
var Registration = rules.Registration{Name: Name, New: New}

// Backend writes one family's ipsets and chains.
type Backend struct {
	cfg   rules.Config
	log   klog.Logger
	ipset ipset.Interface
	ipt   utiliptables.Interface
	// names maps a set to its ipset name in this family; reverse is its inverse.
	names   setNames
	reverse map[string]rules.Set
	// headers are the ipsets the kernel holds (by name), as last read or written;
	// headerGen counts their writes, and wroteAt says when each was last written,
	// so that a reading taken before a write does not undo it (Adopt).
	headers   map[string]*ipset.Set
	headerGen uint64
	wroteAt   map[string]uint64
	// guard orders the writes of our chains, in the loop and beside it (beside.go).
	guard rulesGuard
	// quieted are the addresses whose refusals the quiet rules hold back now.
	quieted []string
}

// reading is the backend's part of an Observed.
type reading struct {
	headers map[string]*ipset.Set
	gen     uint64
	// rulesGen is the loop's count of chain writes when the reading began.
	rulesGen uint64
}

// New makes the backend; it needs ipset and iptables.
func New(cfg rules.Config, k rules.Kernel) (rules.Backend, error) {
	if k.IPSet == nil || k.IPTables == nil {
		return nil, fmt.Errorf("the %s rules backend needs ipset and iptables: %w", Name, rules.ErrUnavailable)
	}
	b := &Backend{cfg: cfg, log: cfg.Logger, ipset: k.IPSet, ipt: k.IPTables, names: newSetNames(cfg.Family),
		headers: map[string]*ipset.Set{}, wroteAt: map[string]uint64{}}
	b.reverse = make(map[string]rules.Set, len(b.names))
	for s, n := range b.names {
		b.reverse[n] = s
	}
	return b, nil
}

func (b *Backend) Name() string { return Name }

// RemovalsBeside is false: upstream's iptables-mode leftovers live in the tables
// this backend writes (KUBE-SERVICES is both modes' name), so they are removed in
// the sync loop.
func (b *Backend) RemovalsBeside() bool { return false }

// Observe reads this family's ipsets and, with check, checks our chains and jumps
// against it and repairs them (beside.go).
func (b *Backend) Observe(check []byte) rules.ReadFunc {
	b.guard.mu.Lock()
	gen, hgen := b.guard.gen, b.headerGen
	b.guard.mu.Unlock()
	return func(ctx context.Context, c rules.Counter) (*rules.Observed, error) {
		o, err := b.observeIPSets(ctx, c, hgen)
		if err != nil || check == nil {
			return o, err
		}
		o.RulesChecked, o.Repair = b.checkRulesBeside(ctx, check, gen, c)
		o.Private.(*reading).rulesGen = gen
		return o, nil
	}
}

// Adopt takes the reading's set headers, but for the sets written since it began.
func (b *Backend) Adopt(o *rules.Observed) {
	r, ok := o.Private.(*reading)
	if !ok {
		return
	}
	headers := make(map[string]*ipset.Set, len(r.headers))
	for name, h := range r.headers {
		headers[name] = h
	}
	for name, at := range b.wroteAt {
		if at <= r.gen {
			continue
		}
		if h, ok := b.headers[name]; ok {
			headers[name] = h
		} else {
			delete(headers, name)
		}
	}
	b.headers = headers
}

// noteHeader records that the set spec was written.
func (b *Backend) noteHeader(spec *ipset.Set) {
	b.headerGen++
	b.headers[spec.Name] = spec
	b.wroteAt[spec.Name] = b.headerGen
}

// Text is our chains with the out filter out.
func (b *Backend) Text(d rules.Desired, out []rules.OutFilter) []byte {
	return buildIPTablesRules(b.rulesInput(d, out))
}

// Apply carries out one rule step.
func (b *Backend) Apply(ctx context.Context, d rules.Desired, s rules.Step, c rules.Counter, out *rules.Outcome) error {
	switch s := s.(type) {
	case rules.KeepAlive:
		// Nothing to renew: these are upstream's ipsets and chains.
		return nil
	case rules.Prepare:
		return b.ensureSets(ctx, d, s.Out, c, out)
	case rules.Grow:
		return b.growSets(ctx, d, c, out)
	case rules.Members:
		return b.executeSets(ctx, s.Changes, c, out)
	case rules.Rules:
		return b.executeIPTables(ctx, d, s.Text, s.Out, c, out)
	case rules.Jumps:
		return b.ensureJumpRules(ctx, c)
	case rules.Quiet:
		b.quietRefusals(ctx, s.Addrs, "-I", c, out)
		return nil
	case rules.Loud:
		b.quietRefusals(ctx, s.Addrs, "-D", c, out)
		return nil
	case rules.Repair:
		if r, ok := s.Reading.Private.(*reading); ok {
			out.Repaired = b.repairRulesBeside(ctx, s.Text, r.rulesGen, c)
		}
		return nil
	}
	return fmt.Errorf("the %s rules backend cannot carry out %q", Name, s)
}

// Remove removes this family's chains and ipsets.
func (b *Backend) Remove(ctx context.Context, c rules.Counter) (bool, error) {
	if err := b.removeIPTablesBackend(ctx, c); err != nil {
		return false, err
	}
	return true, nil
}

// executeSets sends the member changes as one batch (over netlink, or one `ipset
// restore`: ipset.NewNetlink). When ipset refuses a line, that change is set aside
// (its owners held back) and the rest is sent again, so one bad entry never keeps
// the others out. ipset may have applied lines before the refused one; the batch
// runs with -exist, so sending them again is harmless.
func (b *Backend) executeSets(ctx context.Context, changes []rules.Change, c rules.Counter, out *rules.Outcome) error {
	remaining := changes
	for refused := 0; len(remaining) > 0; refused++ {
		tx := &ipset.Transaction{}
		for _, ch := range remaining {
			if ch.Add {
				tx.Add(b.names[ch.Member.Set], ipsetEntry(ch.Member))
			} else {
				tx.Del(b.names[ch.Member.Set], ipsetEntry(ch.Member))
			}
		}
		c.Wrote(metrics.SubsystemIPSet, tx.Len())
		c.Request(metrics.SubsystemIPSet, "restore")
		err := b.ipset.Apply(ctx, tx)
		if err == nil {
			out.Landed = append(out.Landed, remaining...)
			return nil
		}
		// Only a refusal of one line is the line's problem: a full set, a missing set
		// or a tool that did not run is the batch's, and re-sending the rest would
		// meet it again on every line.
		var ierr *ipset.Error
		systemic := errors.Is(err, ipset.ErrSetFull) || errors.Is(err, ipset.ErrSetNotFound) ||
			errors.Is(err, ipset.ErrSetInUse) || errors.Is(err, ipset.ErrTypeMismatch)
		if systemic || !errors.As(err, &ierr) || ierr.Index < 0 || ierr.Index >= len(remaining) || refused >= rules.MaxIsolatedRefusals {
			return fmt.Errorf("applying %d ipset changes: %w", len(remaining), err)
		}
		bad := remaining[ierr.Index]
		out.Refused = append(out.Refused, rules.Refusal{Change: &bad, Reason: rules.ReasonIPSet,
			What: "ipset " + b.names[bad.Member.Set] + " member " + ipsetEntry(bad.Member), Err: err})
		next := make([]rules.Change, 0, len(remaining)-1)
		next = append(next, remaining[:ierr.Index]...)
		remaining = append(next, remaining[ierr.Index+1:]...)
	}
	return nil
}

// executeIPTables writes our chains. If the kernel refuses the text and Service-owned
// rules are in it, the refused rules are found by bisection and left out, so one bad
// rule never keeps the others out; if the text fails even without any of them, the
// failure is global.
func (b *Backend) executeIPTables(ctx context.Context, d rules.Desired, text []byte, outRules []rules.OutFilter, c rules.Counter, out *rules.Outcome) error {
	restore := func(text []byte) error {
		c.RulesWritten()
		c.Request(metrics.SubsystemIPTables, "restore")
		b.guard.mu.Lock()
		defer b.guard.mu.Unlock()
		b.guard.wrote()
		return b.ipt.RestoreAll(ctx, text, utiliptables.NoFlushTables, utiliptables.RestoreCount)
	}
	err := restore(text)
	if err == nil {
		out.Text, out.WrittenOut = text, outRules
		return nil
	}
	b.restoreFailed()
	if len(outRules) == 0 {
		return fmt.Errorf("writing iptables rules: %w", err)
	}
	base := b.Text(d, nil)
	if berr := restore(base); berr != nil {
		b.restoreFailed()
		return fmt.Errorf("writing iptables rules: %w", berr)
	}
	out.Text = base
	var good []rules.OutFilter
	var bisect func(cand []rules.OutFilter)
	bisect = func(cand []rules.OutFilter) {
		text := b.Text(d, append(slices.Clone(good), cand...))
		rerr := restore(text)
		if rerr == nil {
			good = append(good, cand...)
			out.Text = text
			return
		}
		b.restoreFailed()
		if len(cand) == 1 {
			bad := cand[0]
			out.Refused = append(out.Refused, rules.Refusal{Out: &bad, Reason: rules.ReasonIPTables,
				What: "iptables rule " + string(chainIPVSOutFilter) + " " + outFilterRuleText(bad),
				Err:  fmt.Errorf("writing iptables rule: %w", rerr)})
			return
		}
		mid := len(cand) / 2
		bisect(cand[:mid])
		bisect(cand[mid:])
	}
	bisect(outRules)
	out.WrittenOut = good
	return nil
}

// restoreFailed counts a refused iptables-restore of our chains.
func (b *Backend) restoreFailed() {
	metrics.IPTablesRestoreFailuresTotal.WithLabelValues(string(b.cfg.Family)).Inc()
}

// ensureJumpRules makes sure the built-in chains jump to ours. It reads the two
// tables once (`iptables-save`) and runs `iptables -C`/`-I` only for a jump that is
// missing: a process per rule per full sync costs seconds on a busy or emulated node
// and holds back every change queued behind the sync.
func (b *Backend) ensureJumpRules(ctx context.Context, c rules.Counter) error {
	// A table that cannot be read is left out: every jump into it is ensured.
	saved, _ := b.saveTables(ctx, c)
	// Every missing jump in one iptables-restore (no chain declared, so nothing is
	// flushed), instead of an `iptables -C` and an `iptables -I` per jump: at a
	// first start that was 18 processes, 8 s of an empty family's first sync under TCG.
	missing := missingJumps(saved)
	if missing == "" {
		return nil
	}
	c.Request(metrics.SubsystemIPTables, "restore")
	if err := b.ipt.RestoreAll(ctx, []byte(missing), utiliptables.NoFlushTables, utiliptables.NoRestoreCount); err != nil {
		return fmt.Errorf("ensuring the jumps into our chains: %w", err)
	}
	return nil
}

// jumpRuleLine is a jump rule as iptables-save prints it.
func jumpRuleLine(from utiliptables.Chain, comment string, to utiliptables.Chain) string {
	return "-A " + string(from) + " -m comment --comment \"" + comment + "\" -j " + string(to)
}

// observeIPSets reads this family's ipsets into st: the iptables rules backend's
// sets. Only those are read (ipset.SaveSets): the other family's sets, which hold
// every Service of a single-stack node, and other software's sets cost nothing.
func (b *Backend) observeIPSets(ctx context.Context, c rules.Counter, gen uint64) (*rules.Observed, error) {
	c.Request(metrics.SubsystemIPSet, "save")
	saved, err := b.ipset.SaveSets(ctx, slices.Sorted(maps.Keys(b.reverse)))
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	r := &reading{headers: map[string]*ipset.Set{}, gen: gen}
	o := &rules.Observed{Members: sets.New[rules.Member](), Private: r}
	for name, s := range saved {
		base, ours := b.reverse[name]
		if !ours {
			continue
		}
		hdr := s.Set
		r.headers[name] = &hdr
		for _, e := range s.Entries {
			m, err := parseIPSetEntry(base, e)
			if err != nil {
				// Not a member this set's type can hold: the set is replaced.
				b.log.V(2).Info("Unreadable ipset member", "set", name, "err", err)
				continue
			}
			o.Members.Insert(m)
		}
	}
	return o, nil
}

// removeIPTablesBackend removes what the iptables backend left of this family: the
// chains kube-proxy creates in nat, filter and mangle with every rule that jumps to
// them (as --cleanup does), then this family's ipsets (a set an iptables rule uses
// cannot be destroyed, so the chains go first). A node without the tools has none.
func (b *Backend) removeIPTablesBackend(ctx context.Context, c rules.Counter) error {
	if ipt := b.ipt; ipt != nil {
		for _, table := range []utiliptables.Table{utiliptables.TableNAT, utiliptables.TableFilter, utiliptables.TableMangle} {
			c.Request(metrics.SubsystemIPTables, "save")
			removed, err := removeChains(ctx, ipt, table, func(chain string) bool { return isKubeProxyChain(table, chain) }, nil)
			if len(removed) > 0 || err != nil {
				c.Request(metrics.SubsystemIPTables, "restore")
			}
			if err != nil {
				return fmt.Errorf("removing %s chains: %w", table, err)
			}
			if len(removed) > 0 {
				b.log.Info("Removed the iptables rules backend's chains", "table", table, "chains", len(removed))
			}
		}
	}
	if b.ipset == nil {
		return nil
	}
	c.Request(metrics.SubsystemIPSet, "save")
	saved, err := b.ipset.SaveAll(ctx)
	if err != nil {
		return fmt.Errorf("listing ipsets: %w", err)
	}
	var names []string
	for _, name := range b.names {
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
	c.Request(metrics.SubsystemIPSet, "restore")
	if err := b.ipset.Apply(ctx, tx); err != nil {
		return fmt.Errorf("destroying ipsets: %w", err)
	}
	b.log.Info("Removed the iptables rules backend's ipsets", "ipsets", len(names))
	return nil
}
