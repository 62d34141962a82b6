package nftables

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

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// nftOutFilterChain holds the Service-owned rules; the programme's other chains
// depend only on the configuration.
const nftOutFilterChain = "ipvs-out-filter"

// Name is the value of --ipvs-rules-backend that selects this backend.
const Name = "nftables"

// Registration makes this backend.
var Registration = rules.Registration{Name: Name, New: New}

// Table is the backend's table, shared by both families.
func Table() nft.Table { return nftTable }

type nftBackend struct {
	cfg   rules.Config
	log   klog.Logger
	clock clock.Clock
	rs    nft.Ruleset
	// read lists the sets (observeSets): the reader's socket when there is one,
	// so the periodic resync's listing beside the loop holds back no write.
	read nft.Ruleset
	fam  nftFamily
	// quieted counts, per address, the scheduler changes whose quiet has not ended
	// yet (quiet lingers, see nftQuietLinger). quietMu also orders every write of
	// the quiet set, so an address leaving it never races one coming in.
	quietMu sync.Mutex
	quieted map[string]int
	// alive is what we know of the family's liveness element (alive.go);
	// aliveMu guards it, and orders the writes of the element, which the sync
	// loop and the renewal beside it (rules.KeepAlive from another goroutine) make.
	aliveMu sync.Mutex
	alive   liveness
	// other are the elements no member stands for one to one (the source ranges,
	// and elements someone else added), as last read or written.
	other nftElements
	// loud are the addresses of the last quiet, which Loud ends.
	loud []string
}

// reading is the backend's part of an Observed.
type reading struct{ other nftElements }

// New makes the backend; it needs the table's ruleset.
func New(cfg rules.Config, k rules.Kernel) (rules.Backend, error) {
	if k.NFTRules == nil {
		return nil, fmt.Errorf("the %s rules backend needs an nftables ruleset: %w", Name, rules.ErrUnavailable)
	}
	if k.NFTRules.Table() != nftTable {
		return nil, fmt.Errorf("the %s rules backend writes table %s, not %s", Name, nftTable, k.NFTRules.Table())
	}
	b := &nftBackend{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, rs: k.NFTRules, read: k.NFTRules,
		fam: newNFTFamily(cfg.Family), quieted: map[string]int{}, other: nftElements{}}
	if b.clock == nil {
		b.clock = clock.RealClock{}
	}
	if k.NFTReader != nil {
		b.read = k.NFTReader
	}
	d, fromEnv, err := nftLiveness(cfg.SyncPeriod)
	if err != nil {
		return nil, err
	}
	if fromEnv {
		b.log.Info("The nftables rules' liveness comes from the environment", "variable", EnvNFTLivenessTimeout, "lifetime", d, "syncPeriod", cfg.SyncPeriod)
	}
	b.alive.timeout = d
	return b, nil
}

func (b *nftBackend) Name() string { return Name }

// RemovalsBeside is true: the removals touch iptables, ipsets and upstream's
// tables, none of which this backend writes.
func (b *nftBackend) RemovalsBeside() bool { return true }

// Observe lists this family's sets (it checks no rules: every full sync writes
// the programme again).
func (b *nftBackend) Observe([]byte) rules.ReadFunc { return b.observeSets }

// Adopt takes the reading's elements no member stands for.
func (b *nftBackend) Adopt(o *rules.Observed) {
	if r, ok := o.Private.(*reading); ok {
		b.other = r.other
	}
}

// Text names the out-filter rules: the only rules that change with Services.
func (b *nftBackend) Text(_ rules.Desired, out []rules.OutFilter) []byte { return b.rulesText(out) }

// Apply carries out one rule step.
func (b *nftBackend) Apply(ctx context.Context, d rules.Desired, s rules.Step, c rules.Counter, out *rules.Outcome) error {
	switch s := s.(type) {
	case rules.KeepAlive:
		b.keepAlive(ctx, c, out)
		return nil
	case rules.Prepare:
		return b.prepare(ctx, c, out)
	case rules.Grow:
		// nftables sets have no size limit.
		return nil
	case rules.Members:
		return b.applySets(ctx, d, s, c, out)
	case rules.Rules:
		return b.writeRules(ctx, s.Out, c, out)
	case rules.Jumps:
		return b.reviveAfterFullSync(ctx, c)
	case rules.Quiet:
		b.loud = nil
		if b.quiet(ctx, s.Addrs, c) {
			b.loud = s.Addrs
		}
		return nil
	case rules.Loud:
		if addrs := b.loud; len(addrs) > 0 {
			b.loud = nil
			out.Later = append(out.Later, rules.Delayed{After: nftQuietLinger, Step: rules.EndQuiet{Addrs: addrs}})
		}
		return nil
	case rules.EndQuiet:
		b.endQuiet(s.Addrs)
		return nil
	}
	return fmt.Errorf("the %s rules backend cannot carry out %q", Name, s)
}

// Remove deletes this family's objects from the table, and the table once no
// family has any left.
func (b *nftBackend) Remove(ctx context.Context, c rules.Counter) (bool, error) {
	removed, err := removeNFTFamily(ctx, b.rs, b.fam, c)
	if err != nil {
		return false, err
	}
	if removed > 0 {
		b.log.Info("Removed the nftables rules backend's objects of this family", "table", nftTable.String(), "objects", removed)
	}
	return true, nil
}

// countedRuleset counts every transaction and listing in a sync's stats.
type countedRuleset struct {
	nft.Ruleset
	c rules.Counter
}

func (c countedRuleset) Run(ctx context.Context, tx *nft.Transaction) error {
	c.c.Request(metrics.SubsystemNFTables, "transaction")
	return c.Ruleset.Run(ctx, tx)
}

func (c countedRuleset) ListElements(ctx context.Context, set string) ([][]string, error) {
	c.c.Request(metrics.SubsystemNFTables, "list")
	return c.Ruleset.ListElements(ctx, set)
}

func (c countedRuleset) List(ctx context.Context) ([]string, []string, error) {
	c.c.Request(metrics.SubsystemNFTables, "list")
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
		m = rules.AddrMember(rules.IPVSIPs, a)
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

// srcPortOfElement is the LoadBalancer address, protocol and port of a
// load-balancer-source element: the unit in which source ranges are written.
func srcPortOfElement(fields []string) (rules.ServicePort, bool) {
	if len(fields) != 4 {
		return rules.ServicePort{}, false
	}
	return parseServicePort(fields)
}

func (b *nftBackend) observeSets(ctx context.Context, c rules.Counter) (*rules.Observed, error) {
	rs := countedRuleset{b.read, c}
	r := &reading{other: nftElements{}}
	o := &rules.Observed{Members: sets.New[rules.Member](), Private: r}
	for _, s := range nftSetTable {
		name := b.fam.name(s.name)
		elems, err := rs.ListElements(ctx, name)
		if nft.IsNotFound(err) {
			continue // the table or the set is missing: prepare writes it
		}
		if err != nil {
			return nil, fmt.Errorf("listing nftables set %s: %w", name, err)
		}
		for _, fields := range elems {
			if e, ok := nftEntry(s, fields); ok {
				o.Members.Insert(e)
			} else {
				r.other.add(name, fields)
			}
		}
	}
	return o, nil
}

// prepare writes the programme (full syncs). Objects of this family's prefix the
// programme no longer has are deleted in the same transaction. When the kernel
// refuses it (a set or base chain someone made again with another type, hook or
// priority), every object of this family is deleted and written anew in one
// transaction; the sets are then empty until the elements are written.
func (b *nftBackend) prepare(ctx context.Context, c rules.Counter, out *rules.Outcome) error {
	b.aliveMu.Lock()
	defer b.aliveMu.Unlock()
	rs := countedRuleset{b.rs, c}
	prog, err := buildNFTProgramme(&programmeInput{cfg: b.cfg})
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
	began := b.clock.Now()
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
	b.log.Error(err, "The kernel refused this family's nftables programme; replacing every object of the family", "table", nftTable.String())
	tx = nft.NewTransaction()
	tx.AddTable()
	deleteObjects(tx, chains, setNames)
	b.writeProgramme(tx, prog)
	b.keepLingering(tx)
	if err := rs.Run(ctx, tx); err != nil {
		return fmt.Errorf("writing the nftables programme of table %s: %w", nftTable, err)
	}
	// Every set is new and empty, the out-filter chain too.
	out.Emptied = true
	b.other = nftElements{}
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

func (b *nftBackend) applySets(ctx context.Context, d rules.Desired, step rules.Members, c rules.Counter, out *rules.Outcome) error {
	srcSet := b.fam.name("load-balancer-source")
	failed := func(ch rules.Change, what string, err error) {
		out.Refused = append(out.Refused, rules.Refusal{Change: &ch, Reason: rules.ReasonNFTables,
			What: "nftables element " + what, Err: err})
	}

	// Elements that stand for one member each, deletions first (so a range that
	// is replaced never overlaps its successor); origin is the index in
	// step.Changes of each one's member change, -1 for a source range element.
	var dels, adds []nftChange
	var delOrigin, addOrigin []int
	put := func(ec nftChange, origin int) {
		if ec.add {
			adds, addOrigin = append(adds, ec), append(addOrigin, origin)
		} else {
			dels, delOrigin = append(dels, ec), append(delOrigin, origin)
		}
	}
	ports := map[rules.ServicePort]bool{} // the source ranges to rewrite
	var srcChanges []rules.Change
	for i, ch := range step.Changes {
		if ch.Member.Set.SourceRange() {
			ports[ch.Member.ServicePort()] = true
			srcChanges = append(srcChanges, ch)
			continue
		}
		set, fields, err := nftElement(ch.Member)
		if err != nil {
			failed(ch, ch.Member.Set.String()+" "+ch.Member.String(), err)
			continue
		}
		put(nftChange{add: ch.Add, set: b.fam.name(set), fields: fields}, i)
	}

	// Source ranges, port by port.
	rangeChanges, badPorts := b.sourceRangeChanges(d, step.Full, ports)
	for _, ec := range rangeChanges {
		put(ec, -1)
	}
	changes, origin := append(dels, adds...), append(delOrigin, addOrigin...)
	if len(changes) > 0 {
		c.Wrote(metrics.SubsystemNFTables, len(changes))
		refused, err := nftApplyChanges(ctx, countedRuleset{b.rs, c}, changes, rules.MaxIsolatedRefusals)
		if err != nil {
			return fmt.Errorf("writing %d nftables set elements: %w", len(changes), err)
		}
		bad := map[int]error{}
		for _, r := range refused {
			// An element to delete that is not there is what was wanted.
			if !r.change.add && nft.IsNotFound(r.err) {
				continue
			}
			bad[r.index] = r.err
		}
		for i, ec := range changes {
			err, refused := bad[i]
			if o := origin[i]; o >= 0 {
				if refused {
					failed(step.Changes[o], ec.String(), err)
				} else {
					out.Landed = append(out.Landed, step.Changes[o])
				}
				continue
			}
			if refused {
				text := ec.String()
				if k, ok := srcPortOfElement(ec.fields); ok && ec.set == srcSet {
					badPorts[k] = fmt.Errorf("%s: %w", text, err)
				} else {
					out.Refused = append(out.Refused, rules.Refusal{Other: text, Reason: rules.ReasonNFTables,
						What: "nftables element " + text, Err: err})
				}
				continue
			}
			if ec.add {
				b.other.add(ec.set, ec.fields)
			} else {
				b.other.remove(ec.set, ec.fields)
			}
		}
	}
	// A port whose elements all landed holds what its members want; one with a
	// refusal keeps its applied members, so its changes are planned again.
	for _, ch := range srcChanges {
		if err := badPorts[ch.Member.ServicePort()]; err != nil {
			failed(ch, "source range "+ch.Member.String(), err)
			continue
		}
		out.Landed = append(out.Landed, ch)
	}
	return nil
}

// sourceRangeChanges lists the element changes that give the source ranges of
// ports (of every port the kernel or the index knows, on a full sync) what the
// index wants; a full sync also deletes every element no entry stands for.
// badPorts are the ports with an entry that makes no element. On a full sync the
// ports it rewrites are added to ports.
func (b *nftBackend) sourceRangeChanges(d rules.Desired, full bool, ports map[rules.ServicePort]bool) ([]nftChange, map[rules.ServicePort]error) {
	srcSet := b.fam.name("load-balancer-source")
	if full {
		for _, k := range d.SourceRangePorts() {
			ports[k] = true
		}
		for _, fields := range b.other[srcSet] {
			if k, ok := srcPortOfElement(fields); ok {
				ports[k] = true
			}
		}
	}
	have, want := nftElements{}, nftElements{}
	for set, elems := range b.other {
		for _, fields := range elems {
			k, ok := srcPortOfElement(fields)
			if set == srcSet && ok && ports[k] || full {
				have.add(set, fields)
			}
		}
	}
	badPorts := map[rules.ServicePort]error{}
	for k := range ports {
		w, errs := nftDesiredElements(b.fam, d.SourceRanges(k))
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

// writeRules writes the out-filter chain: flushed and refilled in one
// transaction. A rule the kernel refuses is found by bisection and held back
// alone, as executeIPTables does; when even the empty chain cannot be written the
// failure is global.
func (b *nftBackend) writeRules(ctx context.Context, outRules []rules.OutFilter, c rules.Counter, out *rules.Outcome) error {
	rs := countedRuleset{b.rs, c}
	chain := b.fam.name(nftOutFilterChain)
	refuse := func(r rules.OutFilter, err error) {
		out.Refused = append(out.Refused, rules.Refusal{Out: &r, Reason: rules.ReasonNFTables,
			What: "nftables rule " + chain + " for " + r.String(), Err: err})
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
	out.Text, out.WrittenOut = b.rulesText(good), good
	return nil
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

// quiet adds addrs to the quiet set and reports whether it did; Loud ends the
// quiet: the addresses leave the set nftQuietLinger later (beside the sync loop),
// unless a later change quieted them again. As with the iptables form, neither is worth
// failing the sync for.
func (b *nftBackend) quiet(ctx context.Context, addrs []string, c rules.Counter) bool {
	if len(addrs) == 0 {
		return false
	}
	set := b.fam.name(nftQuietSet)
	b.quietMu.Lock()
	defer b.quietMu.Unlock()
	tx := nft.NewTransaction()
	tx.AddElements(set, b.quietElements(addrs)...)
	if err := (countedRuleset{b.rs, c}).Run(ctx, tx); err != nil {
		b.log.Error(err, "Could not hold back the kernel's refusals while schedulers change; connections arriving during the change may be refused", "addresses", addrs)
		return false
	}
	for _, a := range addrs {
		b.quieted[a]++
	}
	return true
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
		b.log.Error(err, "Could not remove the addresses that held back refusals during a scheduler change; the next full sync empties the set", "addresses", done, "set", set)
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

// removeNFTFamily deletes the objects of family f from the nftables backend's
// table, and the table when nothing else is left in it. It returns how many
// objects it deleted.
func removeNFTFamily(ctx context.Context, r nft.Ruleset, f nftFamily, c rules.Counter) (int, error) {
	rs := countedRuleset{r, c}
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

// Members reads the members family's sets hold in r (for --cleanup); the source
// ranges are left out.
func Members(ctx context.Context, r nft.Ruleset, family v1.IPFamily) ([]rules.Member, error) {
	f := newNFTFamily(family)
	var out []rules.Member
	for _, s := range nftSetTable {
		elems, err := r.ListElements(ctx, f.name(s.name))
		if nft.IsNotFound(err) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("listing nftables set %s: %w", f.name(s.name), err)
		}
		for _, fields := range elems {
			if m, ok := nftEntry(s, fields); ok {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// QuietLinger is how long an address stays quiet after its scheduler changed.
const QuietLinger = nftQuietLinger

// EnvLivenessTimeout names the environment variable that sets the rules'
// liveness (alive.go).
const EnvLivenessTimeout = EnvNFTLivenessTimeout
