package ipvs

// The nftables rules backend (--ipvs-rules-backend=nftables): the programme of
// nftprogramme.go in the table `inet kube-proxy-ipvs`, its set elements written by
// nftsets.go. Both families' proxiers share the table; each reads, writes and
// removes only the objects named with its prefix (ip-, ip6-).
//
// A full sync writes the programme again in one transaction (sets and chains that
// exist are kept, every chain but the out-filter one flushed and refilled: a
// deleted rule or chain comes back, and no packet sees a chain half written), and
// reads the elements of every set first, so elements someone removed or added are
// put right. Set members are the index's ipset entries: an element that stands for
// one entry (every set but the source ranges) is tracked as that entry in
// applied.entries, so the plan diffs them as it diffs ipset members; the source
// ranges, which are reduced to the widest of each port (nftSourceRanges), are kept
// as elements (applied.nftOther) and rewritten port by port. No set has a size
// limit.

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// nftOutFilterChain holds the Service-owned rules; the programme's other chains
// depend only on the configuration.
const nftOutFilterChain = "ipvs-out-filter"

type nftBackend struct {
	p  *Proxier
	rs nft.Ruleset
	// read lists the sets (observeSets): the reader's socket when there is one,
	// so the periodic resync's listing beside the loop holds back no write.
	read nft.Ruleset
	fam  nftFamily
	// quieted counts, per address, the scheduler changes whose quiet has not ended
	// yet (quiet lingers, see nftQuietLinger). quietMu also orders every write of
	// the quiet set, so an address leaving it never races one coming in.
	quietMu sync.Mutex
	quieted map[string]int
	// alive is what we know of the family's liveness element (nftalive.go).
	alive liveness
}

func newNFTBackend(p *Proxier, rs nft.Ruleset, reader *KernelReader) (*nftBackend, error) {
	b := &nftBackend{p: p, rs: rs, read: rs, fam: newNFTFamily(p.opts.IPFamily), quieted: map[string]int{}}
	if reader != nil && reader.NFTRules != nil {
		b.read = reader.NFTRules
	}
	d, fromEnv, err := nftLiveness(p.opts.SyncPeriod)
	if err != nil {
		return nil, err
	}
	if fromEnv {
		p.logger.Info("The nftables rules' liveness comes from the environment", "variable", EnvNFTLivenessTimeout, "lifetime", d, "syncPeriod", p.opts.SyncPeriod)
	}
	b.alive.timeout = d
	return b, nil
}

// countedRuleset counts every transaction and listing in a sync's stats.
type countedRuleset struct {
	nft.Ruleset
	stats *SyncStats
}

func (c countedRuleset) Run(ctx context.Context, tx *nft.Transaction) error {
	c.stats.count(opNFTablesTransaction)
	return c.Ruleset.Run(ctx, tx)
}

func (c countedRuleset) ListElements(ctx context.Context, set string) ([][]string, error) {
	c.stats.count(opNFTablesList)
	return c.Ruleset.ListElements(ctx, set)
}

func (c countedRuleset) List(ctx context.Context) ([]string, []string, error) {
	c.stats.count(opNFTablesList)
	return c.Ruleset.List(ctx)
}

// nftEntry is the member an element of set s stands for, the inverse of nftElement.
// ok is false for the source ranges (an element there may stand for several
// members) and for an element no member makes.
func nftEntry(s nftSetInfo, fields []string) (rules.Member, bool) {
	var m rules.Member
	switch s.name {
	case "load-balancer-source":
		return rules.Member{}, false
	case "node-port", "node-port-local", "health-check-node-port":
		if len(fields) != 2 {
			return rules.Member{}, false
		}
		port, err := strconv.ParseUint(fields[1], 10, 16)
		if err != nil {
			return rules.Member{}, false
		}
		for _, set := range s.from {
			if len(s.from) == 1 || strings.HasSuffix(set.String(), "-"+strings.ToUpper(fields[0])) {
				m = rules.PortMember(set, uint16(port))
			}
		}
	case "ipvs-ips":
		if len(fields) != 1 {
			return rules.Member{}, false
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			return rules.Member{}, false
		}
		m = rules.AddrMember(setIPVSIPs, a)
	default:
		sp, ok := parseServicePort(fields)
		if !ok || len(fields) != len(s.key) {
			return rules.Member{}, false
		}
		m = rules.Member{Set: s.from[0], Addr: sp.Addr, Proto: sp.Proto, Port: sp.Port}
		if len(fields) == 4 {
			src, err := netip.ParseAddr(fields[3])
			if err != nil {
				return rules.Member{}, false
			}
			m.Src, m.Bits = src.As16(), uint8(src.BitLen())
		}
	}
	if m.Set == 0 {
		return rules.Member{}, false
	}
	// Only what turns back into the same element is that member.
	set, back, err := nftElement(m)
	if err != nil || set != s.name || !slices.Equal(back, fields) {
		return rules.Member{}, false
	}
	return m, true
}

// parseServicePort reads the address, protocol and port an element begins with.
func parseServicePort(fields []string) (rules.ServicePort, bool) {
	if len(fields) < 3 {
		return rules.ServicePort{}, false
	}
	a, err := netip.ParseAddr(fields[0])
	proto := rules.ProtocolNumber(fields[1])
	port, perr := strconv.ParseUint(fields[2], 10, 16)
	if err != nil || proto == 0 || perr != nil {
		return rules.ServicePort{}, false
	}
	return rules.ServicePort{Addr: a.As16(), Proto: proto, Port: uint16(port)}, true
}

func (e nftElements) remove(set string, fields []string) {
	delete(e[set], strings.Join(fields, " . "))
}

func isSourceRangeSet(set rules.Set) bool {
	return set == setLoadBalancerSourceIP || set == setLoadBalancerSourceCIDR
}

// srcPortOfElement is the LoadBalancer address, protocol and port of a
// load-balancer-source element: the unit in which source ranges are written.
func srcPortOfElement(fields []string) (rules.ServicePort, bool) {
	if len(fields) != 4 {
		return rules.ServicePort{}, false
	}
	return parseServicePort(fields)
}

func (b *nftBackend) observeSets(ctx context.Context, st *appliedState, stats *SyncStats) error {
	rs := countedRuleset{b.read, stats}
	st.nftOther = nftElements{}
	for _, s := range nftSetTable {
		name := b.fam.name(s.name)
		elems, err := rs.ListElements(ctx, name)
		if nft.IsNotFound(err) {
			continue // the table or the set is missing: prepare writes it
		}
		if err != nil {
			return fmt.Errorf("listing nftables set %s: %w", name, err)
		}
		for _, fields := range elems {
			if e, ok := nftEntry(s, fields); ok {
				st.entries.Insert(e)
			} else {
				st.nftOther.add(name, fields)
			}
		}
	}
	return nil
}

// prepare writes the programme (full syncs). Objects of this family's prefix the
// programme no longer has are deleted in the same transaction. When the kernel
// refuses it (a set or base chain someone made again with another type, hook or
// priority), every object of this family is deleted and written anew in one
// transaction; the sets are then empty until the elements are written.
func (b *nftBackend) prepare(ctx context.Context, stats *SyncStats) error {
	p := b.p
	rs := countedRuleset{b.rs, stats}
	prog, err := buildNFTProgramme(p.rulesInput(nil))
	if err != nil {
		return fmt.Errorf("building the nftables programme: %w", err)
	}
	chains, setNames, err := rs.List(ctx)
	if err != nil {
		return fmt.Errorf("listing table %s: %w", nftTable, err)
	}
	chains, setNames = b.ours(chains), b.ours(setNames)
	want := sets.New[string]()
	for _, c := range prog.chains {
		want.Insert(c.Name)
	}
	for _, s := range prog.sets {
		want.Insert(s.Name)
	}
	stale := func(names []string) []string {
		return slices.DeleteFunc(slices.Clone(names), want.Has)
	}
	tx := nft.NewTransaction()
	b.writeProgramme(tx, prog)
	// The liveness element lives on with the programme when it lives: no moment
	// without rules on a restart (else it comes after the elements, ensureJumps).
	began := p.clock.Now()
	renewed := b.aliveInProgramme(tx, chains, setNames)
	// Addresses a scheduler change left behind (the process died in between, or
	// someone added them) go; those whose quiet still lingers stay.
	b.quietMu.Lock()
	defer b.quietMu.Unlock()
	tx.FlushSet(b.fam.name(nftQuietSet))
	b.keepLingering(tx)
	deleteObjects(tx, stale(chains), stale(setNames))
	err = rs.Run(ctx, tx)
	if err == nil {
		if renewed {
			b.alive.written(began)
		}
		return nil
	}
	// Written anew, the sets are empty, the liveness element gone with its set: the
	// rules come on only once the elements are there.
	b.alive.state, b.alive.inProgramme = aliveLapsed, false
	p.logger.Error(err, "The kernel refused this family's nftables programme; replacing every object of the family", "table", nftTable.String())
	tx = nft.NewTransaction()
	tx.AddTable()
	deleteObjects(tx, chains, setNames)
	b.writeProgramme(tx, prog)
	b.keepLingering(tx)
	if err := rs.Run(ctx, tx); err != nil {
		return fmt.Errorf("writing the nftables programme of table %s: %w", nftTable, err)
	}
	// Every set is new and empty, the out-filter chain too.
	p.setsEmptied = true
	p.applied.entries = sets.New[rules.Member]()
	p.applied.nftOther = nftElements{}
	p.applied.iptables = nil
	return nil
}

// ours keeps the names of this family's objects.
func (b *nftBackend) ours(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, b.fam.prefix) {
			out = append(out, n)
		}
	}
	return out
}

// deleteObjects adds to tx the deletion of chains and sets: every chain is flushed
// first, so no rule of one jumps to another or uses a set when it goes.
func deleteObjects(tx *nft.Transaction, chains, setNames []string) {
	for _, c := range chains {
		tx.FlushChain(c)
	}
	for _, c := range chains {
		tx.DeleteChain(c)
	}
	for _, s := range setNames {
		tx.DeleteSet(s)
	}
}

// writeProgramme is writeAll without the out-filter chain's rules, which belong
// to Services and are written by writeRules.
func (b *nftBackend) writeProgramme(tx *nft.Transaction, prog *nftProgramme) {
	prog.writeAll(tx, b.fam.name(nftOutFilterChain))
}

// grow has nothing to do: nftables sets have no size limit.
func (b *nftBackend) grow(context.Context, *SyncStats) error { return nil }

// rulesText names the out-filter rules: the only rules that change with Services.
func (b *nftBackend) rulesText(outRules []rules.OutFilter) []byte {
	var t strings.Builder
	t.WriteString("nftables " + b.fam.name(nftOutFilterChain) + "\n")
	for i, r := range outRules {
		if i > 0 {
			t.WriteByte('\n')
		}
		t.WriteString(r.String())
	}
	return []byte(t.String())
}

func (b *nftBackend) applySets(ctx context.Context, pl *syncPlan, stats *SyncStats, out *outcome) error {
	p := b.p
	a := p.applied
	srcSet := b.fam.name("load-balancer-source")
	failed := func(e rules.Member, add bool, what string, err error) {
		var owners []types.NamespacedName
		if add {
			owners = p.index.ownersOfEntry(e)
		}
		out.fail(failure{key: retryKey{kind: retryEntry, entry: e}, layer: heldBackNFTables,
			what: "nftables element " + what, owners: owners, err: err})
	}

	// Elements that stand for one entry each.
	var changes []nftChange
	entryOf := map[string]rules.Member{}  // change text -> its member
	ports := map[rules.ServicePort]bool{} // the source ranges to rewrite
	var srcChanges []setChange
	for _, c := range pl.sets {
		if isSourceRangeSet(c.entry.Set) {
			ports[c.entry.ServicePort()] = true
			srcChanges = append(srcChanges, c)
			continue
		}
		set, fields, err := nftElement(c.entry)
		if err != nil {
			failed(c.entry, c.add, c.entry.Set.String()+" "+c.entry.String(), err)
			continue
		}
		ch := nftChange{add: c.add, set: b.fam.name(set), fields: fields}
		changes = append(changes, ch)
		entryOf[ch.String()] = c.entry
	}

	// Source ranges, port by port.
	rangeChanges, badPorts := b.sourceRangeChanges(pl.full, ports)
	changes = append(changes, rangeChanges...)
	// Deletions first, so a range that is replaced never overlaps its successor.
	slices.SortStableFunc(changes, func(x, y nftChange) int {
		switch {
		case x.add == y.add:
			return 0
		case !x.add:
			return -1
		}
		return 1
	})
	if len(changes) > 0 {
		stats.NFTablesOps += len(changes)
		refused, err := nftApplyChanges(ctx, countedRuleset{b.rs, stats}, changes, maxIsolatedSetFailures)
		if err != nil {
			return fmt.Errorf("writing %d nftables set elements: %w", len(changes), err)
		}
		bad := map[string]error{}
		for _, r := range refused {
			// An element to delete that is not there is what was wanted.
			if !r.change.add && nft.IsNotFound(r.err) {
				continue
			}
			bad[r.change.String()] = r.err
		}
		for _, c := range changes {
			text := c.String()
			err, refused := bad[text]
			if e, ok := entryOf[text]; ok {
				switch {
				case refused:
					failed(e, c.add, text, err)
				case c.add:
					a.entries.Insert(e)
				default:
					a.entries.Delete(e)
				}
				continue
			}
			if refused {
				if k, ok := srcPortOfElement(c.fields); ok && c.set == srcSet {
					badPorts[k] = fmt.Errorf("%s: %w", text, err)
				} else {
					out.fail(failure{key: retryKey{kind: retryElement, text: text}, layer: heldBackNFTables,
						what: "nftables element " + text, err: err})
				}
				continue
			}
			if c.add {
				a.nftOther.add(c.set, c.fields)
			} else {
				a.nftOther.remove(c.set, c.fields)
			}
		}
	}
	// A port whose elements all landed holds what its entries want; one with a
	// refusal keeps its applied entries, so its changes are planned again.
	for _, c := range srcChanges {
		if err := badPorts[c.entry.ServicePort()]; err != nil {
			failed(c.entry, c.add, "source range "+c.entry.String(), err)
			continue
		}
		if c.add {
			a.entries.Insert(c.entry)
		} else {
			a.entries.Delete(c.entry)
		}
	}
	return nil
}

// sourceRangeChanges lists the element changes that give the source ranges of
// ports (of every port the kernel or the index knows, on a full sync) what the
// index wants; a full sync also deletes every element no entry stands for.
// badPorts are the ports with an entry that makes no element. On a full sync the
// ports it rewrites are added to ports.
func (b *nftBackend) sourceRangeChanges(full bool, ports map[rules.ServicePort]bool) ([]nftChange, map[rules.ServicePort]error) {
	p := b.p
	a := p.applied
	srcSet := b.fam.name("load-balancer-source")
	if full {
		for k := range p.index.srcRanges {
			ports[k] = true
		}
		for _, fields := range a.nftOther[srcSet] {
			if k, ok := srcPortOfElement(fields); ok {
				ports[k] = true
			}
		}
	}
	have, want := nftElements{}, nftElements{}
	for set, elems := range a.nftOther {
		for _, fields := range elems {
			k, ok := srcPortOfElement(fields)
			if set == srcSet && ok && ports[k] || full {
				have.add(set, fields)
			}
		}
	}
	badPorts := map[rules.ServicePort]error{}
	for k := range ports {
		w, errs := nftDesiredElements(b.fam, p.index.sourceRanges(k))
		if len(errs) > 0 {
			badPorts[k] = errs[0]
		}
		for set, elems := range w {
			for _, fields := range elems {
				want.add(set, fields)
			}
		}
	}
	return nftElementChanges(have, want), badPorts
}

// sourceRanges returns the source range entries the index wants on port k, sorted.
func (ix *desiredIndex) sourceRanges(k rules.ServicePort) []rules.Member {
	es := ix.srcRanges[k].UnsortedList()
	slices.SortFunc(es, rules.Compare)
	return es
}

// writeRules writes the out-filter chain: flushed and refilled in one
// transaction. A rule the kernel refuses is found by bisection and held back
// alone, as executeIPTables does; when even the empty chain cannot be written the
// failure is global.
func (b *nftBackend) writeRules(ctx context.Context, _ []byte, outRules []rules.OutFilter, stats *SyncStats, out *outcome) error {
	p := b.p
	rs := countedRuleset{b.rs, stats}
	chain := b.fam.name(nftOutFilterChain)
	refuse := func(r rules.OutFilter, err error) {
		out.fail(failure{key: retryKey{kind: retryOutRule, out: r}, layer: heldBackNFTables,
			what: "nftables rule " + chain + " for " + r.String(), owners: p.index.ownersOfOutRule(r), err: err})
	}
	nftRules := map[rules.OutFilter]nft.Rule{}
	var cands []rules.OutFilter
	for _, r := range outRules {
		nr, err := nftOutFilterRule(b.fam, r)
		if err != nil {
			refuse(r, err)
			continue
		}
		nftRules[r] = nr
		cands = append(cands, r)
	}
	write := func(list []rules.OutFilter) error {
		tx := nft.NewTransaction()
		tx.FlushChain(chain)
		for _, r := range list {
			tx.AddRule(chain, nftRules[r])
		}
		// Not counted in NFTablesOps: every full sync rewrites the chain, which is
		// not drift (as the iptables chains' rewrite is not).
		return rs.Run(ctx, tx)
	}
	good := cands
	if err := write(cands); err != nil {
		if len(cands) == 0 {
			return fmt.Errorf("writing nftables chain %s: %w", chain, err)
		}
		if err := write(nil); err != nil {
			return fmt.Errorf("writing nftables chain %s: %w", chain, err)
		}
		good = nil
		var bisect func(cand []rules.OutFilter)
		bisect = func(cand []rules.OutFilter) {
			if err := write(append(slices.Clone(good), cand...)); err == nil {
				good = append(good, cand...)
				return
			} else if len(cand) == 1 {
				refuse(cand[0], err)
				return
			}
			mid := len(cand) / 2
			bisect(cand[:mid])
			bisect(cand[mid:])
		}
		// A refused write leaves the chain as the last accepted one did: good.
		bisect(cands)
	}
	p.applied.iptables = b.rulesText(good)
	out.writtenRules = good
	return nil
}

// ensureJumps turns the rules on, now that the full sync has written the
// elements and rules, unless the programme's transaction kept them on: the base
// chains and their jumps are part of the programme, the liveness element decides
// whether packets go past their gates (nftalive.go).
func (b *nftBackend) ensureJumps(ctx context.Context, stats *SyncStats) error {
	return b.reviveAfterFullSync(ctx, stats)
}

// nftQuietSet holds the addresses whose port unreachables are dropped while their
// virtual servers' schedulers change (quiet.go); a rule at the top of the
// filter-output base chain drops them. Every full sync empties it.
const nftQuietSet = "quiet"

// nftQuietLinger is how long an address stays in the quiet set after its
// scheduler changed. ip_vs_edit_service waits for the packets that saw the old
// scheduler, not for one that found none: that packet may still be on its way to
// the ICMP error (and through the filter-output chain) when the edit returns, and
// on a busy or emulated node a vCPU can stall it for tens of milliseconds, longer
// than the element's removal takes. A second covers that and costs little: a
// refusal the address sends meanwhile for a reason of its own is dropped, and the
// client's SYN, sent again after its 1 s timeout, gets it then.
const nftQuietLinger = time.Second

// quiet adds addrs to the quiet set and returns the function that ends the quiet:
// the addresses leave the set nftQuietLinger later (beside the sync loop), unless
// a later change quieted them again. As with the iptables form, neither is worth
// failing the sync for.
func (b *nftBackend) quiet(ctx context.Context, addrs []string, stats *SyncStats) func() {
	if len(addrs) == 0 {
		return func() {}
	}
	set := b.fam.name(nftQuietSet)
	b.quietMu.Lock()
	defer b.quietMu.Unlock()
	tx := nft.NewTransaction()
	tx.AddElements(set, b.quietElements(addrs)...)
	if err := (countedRuleset{b.rs, stats}).Run(ctx, tx); err != nil {
		b.p.logger.Error(err, "Could not hold back the kernel's refusals while schedulers change; connections arriving during the change may be refused", "addresses", addrs)
		return func() {}
	}
	for _, a := range addrs {
		b.quieted[a]++
	}
	return func() { b.afterFunc(nftQuietLinger, func() { b.endQuiet(addrs) }) }
}

// endQuiet takes the addresses no scheduler change quiets any more out of the set.
func (b *nftBackend) endQuiet(addrs []string) {
	b.quietMu.Lock()
	defer b.quietMu.Unlock()
	var done []string
	for _, a := range addrs {
		if b.quieted[a]--; b.quieted[a] <= 0 {
			delete(b.quieted, a)
			done = append(done, a)
		}
	}
	if len(done) == 0 {
		return
	}
	set := b.fam.name(nftQuietSet)
	tx := nft.NewTransaction()
	tx.DeleteElements(set, b.quietElements(done)...)
	if err := b.rs.Run(context.Background(), tx); err != nil {
		b.p.logger.Error(err, "Could not remove the addresses that held back refusals during a scheduler change; the next full sync empties the set", "addresses", done, "set", set)
	}
}

// keepLingering puts the addresses whose quiet still lingers back into the set tx
// has just emptied (b.quietMu held).
func (b *nftBackend) keepLingering(tx *nft.Transaction) {
	if len(b.quieted) > 0 {
		tx.AddElements(b.fam.name(nftQuietSet), b.quietElements(slices.Sorted(maps.Keys(b.quieted)))...)
	}
}

func (b *nftBackend) quietElements(addrs []string) [][]string {
	elems := make([][]string, 0, len(addrs))
	for _, a := range addrs {
		elems = append(elems, []string{a})
	}
	return elems
}

// afterFunc runs f after d by the proxier's clock (tests step a fake one).
func (b *nftBackend) afterFunc(d time.Duration, f func()) {
	if c, ok := b.p.clock.(clock.WithDelayedExecution); ok {
		c.AfterFunc(d, f)
		return
	}
	time.AfterFunc(d, f)
}

func (b *nftBackend) removeOther(ctx context.Context, stats *SyncStats) bool {
	if err := b.p.removeIPTablesBackend(ctx, stats); err != nil {
		b.p.logger.Error(err, "Failed to remove the iptables rules backend's chains and ipsets; trying again on the next full sync")
		return false
	}
	return true
}

// removeNFTFamily deletes the objects of family f from the nftables backend's
// table, and the table when nothing else is left in it. It returns how many
// objects it deleted.
func removeNFTFamily(ctx context.Context, r nft.Ruleset, f nftFamily, stats *SyncStats) (int, error) {
	rs := countedRuleset{r, stats}
	chains, setNames, err := rs.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing table %s: %w", nftTable, err)
	}
	var ourChains, ourSets []string
	for _, c := range chains {
		if strings.HasPrefix(c, f.prefix) {
			ourChains = append(ourChains, c)
		}
	}
	for _, s := range setNames {
		if strings.HasPrefix(s, f.prefix) {
			ourSets = append(ourSets, s)
		}
	}
	n := len(ourChains) + len(ourSets)
	if n == 0 {
		return 0, nil
	}
	tx := nft.NewTransaction()
	if n == len(chains)+len(setNames) {
		tx.DeleteTable()
	} else {
		deleteObjects(tx, ourChains, ourSets)
	}
	if err := rs.Run(ctx, tx); err != nil {
		return 0, fmt.Errorf("deleting %d objects of table %s: %w", n, nftTable, err)
	}
	return n, nil
}
