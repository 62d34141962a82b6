package ipvs

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// failure is one write the kernel refused. Its key is retried with backoff; its owners
// are the Services reported as held back.
type failure struct {
	key retryKey
	// topic groups failures that one Event covers (a refused scheduler on each of a
	// Service's virtual servers); "" for none.
	topic  string
	layer  string // one of the heldBack* reasons
	what   string // the object, for logs and the debug endpoint
	owners []types.NamespacedName
	err    error
}

// outcome is what execute learned: the writes that failed (everything else landed and
// is in p.applied), and the out-filter rules that were sent to the kernel.
type outcome struct {
	failures     []failure
	writtenRules []rules.OutFilter
}

func (o *outcome) fail(f failure) { o.failures = append(o.failures, f) }

// run carries out a plan: the only code that writes to the kernel. p.applied
// changes only for writes that succeeded. A write the kernel refuses is recorded in
// the outcome and the rest goes on; the returned error is for failures no single
// object explains (a tool that does not run, a base rule the kernel refuses), after
// which the caller forgets p.applied. ct collects the UDP and SCTP virtual servers
// whose real servers changed (nil: not wanted).
//
// A bind step of at least bindBesideMin addresses runs beside the rules steps
// around it (bindsBeside): binding addresses (rtnetlink) and writing sets and rules are
// independent kernel work, and a start-up has one address per Service to bind. The
// IPVS step after it trails the binds (executeIPVSBeside): a Service's virtual
// servers are written once its addresses are bound, and held back when the
// kernel refused one of them.
func (p *Proxier) run(ctx context.Context, pl *syncPlan, stats *SyncStats, ct *[]conntrackTarget) (*outcome, error) {
	out := &outcome{}
	// The plan's large bind step, if any, starts as early as the steps before it
	// allow: at the first of the rules steps just before it (the set writes, in a
	// start-up), or at its own place.
	bindAt, startAt := -1, -1
	for i, s := range pl.steps {
		if b, ok := s.(bindStep); ok && len(b.addrs) >= bindBesideMin {
			bindAt, startAt = i, i
			for startAt > 0 && runsBesideBinds(pl.steps[startAt-1]) {
				startAt--
			}
			break
		}
	}
	var beside *bindsBeside
	defer func() { beside.join(p.clock, stats, out) }()
	for i, s := range pl.steps {
		if i == startAt {
			beside = p.startBinds(ctx, pl.steps[bindAt].(bindStep).addrs)
		}
		if i == bindAt {
			continue // running beside since startAt
		}
		v, trails := s.(ipvsStep)
		trails = trails && beside != nil
		if trails {
			p.executeIPVSBeside(ctx, v.vs, beside, stats, ct, out)
		} else {
			if !runsBesideBinds(s) {
				beside.join(p.clock, stats, out)
				beside = nil
			}
			if err := p.runStep(ctx, s, stats, ct, out); err != nil {
				return out, err
			}
		}
		if name := stepPhase(s); name != "" {
			stats.phase(p.clock.Now(), name)
		}
		if trails {
			beside.join(p.clock, stats, out)
			beside = nil
		}
	}
	return out, nil
}

// bindBesideMin is the smallest bind step that runs beside the steps after it: a
// change binds one address or none, a start-up one per Service.
const bindBesideMin = 256

// bindsBeside is a bind step running in a goroutine of its own, with its own
// counters and failures, merged into the sync's when it is joined.
type bindsBeside struct {
	addrs []string
	done  chan struct{}
	stats SyncStats
	out   outcome
	took  time.Duration
	// progress has a value after each bindChunk addresses, then is closed.
	progress chan bindProgress
}

// bindProgress: the first done addresses of a bindsBeside are bound, but for
// refused (the failures of those since the last bindProgress).
type bindProgress struct {
	done    int
	refused []failure
}

// bindChunk is how many addresses a bind beside the other steps binds between two
// reports of its progress to the IPVS step trailing it.
const bindChunk = 256

// startBinds binds addrs in a goroutine. It writes only p.applied.addrs, which no
// step that may run beside it reads or writes (runsBesideBinds, executeIPVSBeside),
// and reads the index, which no step writes.
func (p *Proxier) startBinds(ctx context.Context, addrs []string) *bindsBeside {
	b := &bindsBeside{addrs: addrs, done: make(chan struct{}),
		progress: make(chan bindProgress, (len(addrs)+bindChunk-1)/bindChunk)}
	start := p.clock.Now()
	go func() {
		defer close(b.done)
		defer close(b.progress)
		for i := 0; i < len(addrs); i += bindChunk {
			end := min(i+bindChunk, len(addrs))
			had := len(b.out.failures)
			p.bind(ctx, addrs[i:end], &b.stats, &b.out)
			b.progress <- bindProgress{done: end, refused: slices.Clone(b.out.failures[had:])}
		}
		b.took = p.clock.Since(start)
	}()
	return b
}

// runsBesideBinds says whether a step may run while addresses are being bound: the
// rules backend's steps touch neither the addresses nor p.applied.addrs, and do not
// depend on the binds' outcome. The IPVS step does: it trails them
// (executeIPVSBeside); an unbind, a drain check or a removal of leftovers waits for
// them to end.
func runsBesideBinds(s step) bool {
	_, ok := s.(rules.Step)
	return ok
}

// join waits for the binds and adds their counters and failures to the sync's.
// Its phases: "binds-wait", the time the sync waited for them (0 when they were
// done), and "binds-beside", how long they took beside the other steps (not part
// of the sync's elapsed time twice: it overlaps the phases before it).
func (b *bindsBeside) join(clk clock.PassiveClock, stats *SyncStats, out *outcome) {
	if b == nil {
		return
	}
	<-b.done
	stats.AddressOps += b.stats.AddressOps
	for op, n := range b.stats.ops {
		stats.ops[op] += n
	}
	out.failures = append(out.failures, b.out.failures...)
	stats.phase(clk.Now(), "binds-wait")
	stats.phases = append(stats.phases, syncPhase{"binds-beside", b.took})
}

// runBeside carries out a plan beside the sync loop. Its steps touch nothing the
// loop writes or reads: a rules backend's Repair (which the backend orders with the
// loop's own writes) and the removals of other backends' and modes' leftovers.
func (p *Proxier) runBeside(ctx context.Context, pl *syncPlan, stats *SyncStats) rules.Outcome {
	var o rules.Outcome
	for _, s := range pl.steps {
		switch s := s.(type) {
		case rules.Repair, rules.EndQuiet:
			if err := p.rules.Apply(ctx, nil, s.(rules.Step), stats, &o); err != nil {
				p.logger.Error(err, "Failed to repair the rules beside the sync loop; the next full sync writes them")
			}
		case *removeStep:
			p.remove(ctx, s, stats)
		default:
			p.logger.Error(nil, "A plan step cannot run beside the sync loop; left to the loop", "step", s.String())
		}
	}
	return o
}

// runRules carries out a plan of one rules step: keeping the rules on, preparing or
// growing the sets before a sync plans its other writes.
func (p *Proxier) runRules(ctx context.Context, s rules.Step, stats *SyncStats) error {
	pl := &syncPlan{steps: []step{s}}
	if p.logger.V(4).Enabled() {
		p.logger.V(4).Info("Rules plan", "plan", pl.String())
	}
	_, err := p.run(ctx, pl, stats, nil)
	return err
}

// stepPhase names the part of a sync a step is, for the sync's phases ("": its time
// goes to the next part).
func stepPhase(s step) string {
	switch s.(type) {
	case rules.Members:
		return "sets"
	case bindStep:
		return "binds"
	case rules.Rules:
		return "rules"
	case rules.Jumps:
		return "jumps"
	case rules.Quiet, ipvsStep, rules.Loud:
		return "ipvs"
	case unbindStep:
		return "unbinds"
	case drainStep:
		return "drain"
	case *removeStep:
		return "leftovers"
	case rules.Prepare:
		return "prepare"
	}
	return ""
}

func (p *Proxier) runStep(ctx context.Context, s step, stats *SyncStats, ct *[]conntrackTarget, out *outcome) error {
	switch s := s.(type) {
	case rules.Quiet, rules.Loud:
		// Neither is worth failing the sync for: without them a scheduler change
		// still lands, at the price of a few refused connections.
		_ = p.applyRules(ctx, s.(rules.Step), stats, out)
	case rules.Step:
		return p.applyRules(ctx, s, stats, out)
	case deviceStep:
		if _, err := p.kernel.Netlink.EnsureDummyDevice(ctx, netlink.DefaultDummyDevice); err != nil {
			return fmt.Errorf("ensuring dummy device %s: %w", netlink.DefaultDummyDevice, err)
		}
	case bindStep:
		p.bind(ctx, s.addrs, stats, out)
	case ipvsStep:
		p.executeIPVS(ctx, s.vs, stats, ct, out)
	case unbindStep:
		p.unbind(ctx, s.addrs, stats, out)
	case drainStep:
		p.processDraining(ctx, stats)
	case *removeStep:
		p.remove(ctx, s, stats)
	default:
		return fmt.Errorf("no way to carry out plan step %T", s)
	}
	return nil
}

// bind binds new service addresses to kube-ipvs0, pipelined (a start-up binds one
// per Service).
func (p *Proxier) bind(ctx context.Context, addrs []string, stats *SyncStats, out *outcome) {
	ips := make([]net.IP, len(addrs))
	for i, addr := range addrs {
		ips[i] = net.ParseIP(addr)
		stats.AddressOps++
		stats.count(opBindAddress)
	}
	owners := p.index.addrOwners()
	for i, err := range p.kernel.Netlink.BindAddresses(ctx, ips, netlink.DefaultDummyDevice) {
		addr := addrs[i]
		if err != nil {
			out.fail(failure{key: retryKey{kind: retryAddr, text: addr}, layer: heldBackAddress,
				what: "address " + addr + " on " + netlink.DefaultDummyDevice, owners: owners(addr),
				err: fmt.Errorf("binding %s to %s: %w", addr, netlink.DefaultDummyDevice, err)})
			continue
		}
		p.applied.addrs.Insert(addr)
	}
}

// unbind removes addresses no Service wants any more from kube-ipvs0.
func (p *Proxier) unbind(ctx context.Context, addrs []string, stats *SyncStats, out *outcome) {
	for _, addr := range addrs {
		stats.AddressOps++
		stats.count(opUnbindAddress)
		if err := p.kernel.Netlink.UnbindAddress(ctx, net.ParseIP(addr), netlink.DefaultDummyDevice); err != nil {
			out.fail(failure{key: retryKey{kind: retryAddr, text: addr}, layer: heldBackAddress,
				what: "address " + addr + " on " + netlink.DefaultDummyDevice,
				err:  fmt.Errorf("unbinding %s from %s: %w", addr, netlink.DefaultDummyDevice, err)})
			continue
		}
		p.applied.addrs.Delete(addr)
	}
}

// executeIPVS writes the virtual servers, one at a time. A Service whose set members
// or addresses were refused keeps its virtual servers as they are until those land,
// so traffic is never balanced to it without the rules that masquerade and filter it.
func (p *Proxier) executeIPVS(ctx context.Context, vs []vsPlan, stats *SyncStats, ct *[]conntrackTarget, out *outcome) {
	plans := make([]*vsPlan, len(vs))
	for i := range vs {
		plans[i] = &vs[i]
	}
	p.executeIPVSPlans(ctx, plans, nil, stats, ct, out)
}

// executeIPVSPlans is executeIPVS for plans, holding back as well the Services of
// the failures in more.
func (p *Proxier) executeIPVSPlans(ctx context.Context, plans []*vsPlan, more []failure, stats *SyncStats, ct *[]conntrackTarget, out *outcome) {
	blocked := map[types.NamespacedName]*failure{}
	for _, fs := range [][]failure{out.failures, more} {
		for i := range fs {
			for _, o := range fs[i].owners {
				blocked[o] = &fs[i]
			}
		}
	}
	var piped, rest []*vsPlan
	for _, vp := range plans {
		if cause := blocked[vp.owner]; cause != nil && vp.owner.Name != "" {
			out.fail(failure{key: retryKey{kind: retryVS, vs: vp.key}, layer: cause.layer,
				what: "virtual server " + vp.key.String() + " (waiting for " + cause.what + ")", owners: ownerList(vp.owner), err: cause.err})
			continue
		}
		if vp.action == vsCreate || addsOnly(vp) {
			piped = append(piped, vp)
		} else {
			rest = append(rest, vp)
		}
	}
	rest = append(p.executePipelined(ctx, piped, stats, ct, out), rest...)
	for _, vp := range rest {
		p.executeVirtualServer(ctx, vp, stats, ct, out)
	}
}

// executeVirtualServer carries out the plan of one virtual server. A refused virtual
// server skips its real servers; a refused real server is left out and the others go in.
func (p *Proxier) executeVirtualServer(ctx context.Context, vp *vsPlan, stats *SyncStats, ct *[]conntrackTarget, out *outcome) {
	key := vp.key
	if vp.action == vsDelete {
		p.deleteVirtualServer(ctx, vp, stats, ct, out)
		return
	}
	if !p.writePlannedVirtualServer(ctx, vp, stats, out) {
		return
	}
	a := p.applied.vs[key]
	if vp.share {
		a.rs = vp.desired.realServers
		if len(p.draining) > 0 {
			for _, w := range a.rs {
				delete(p.draining, drainKey{key, w.key})
			}
		}
		return
	}
	next := make([]desiredRS, 0, len(vp.steps))
	changedRS := false
	p.keepBusyInPlace(ctx, vp, a, stats)
	for _, s := range vp.steps {
		rs, changed := p.executeRealServer(ctx, vp, a, s, stats, out)
		next = append(next, rs...)
		changedRS = changedRS || changed
	}
	slices.SortFunc(next, func(x, y desiredRS) int { return compareRSKeys(x.key, y.key) })
	if slices.Equal(next, vp.desired.realServers) {
		next = vp.desired.realServers
	}
	a.rs = next
	if changedRS {
		p.noteConntrack(a.vs, ct)
	}
}

// vsFailed records a refused write of vp's virtual server or of one of its real
// servers.
func vsFailed(out *outcome, vp *vsPlan, what string, err error) {
	out.fail(failure{key: retryKey{kind: retryVS, vs: vp.key}, layer: heldBackIPVS, what: what,
		owners: ownerList(vp.owner), err: err})
}

// deleteVirtualServer removes a virtual server no Service wants.
func (p *Proxier) deleteVirtualServer(ctx context.Context, vp *vsPlan, stats *SyncStats, ct *[]conntrackTarget, out *outcome) {
	key := vp.key
	stats.IPVSOps++
	stats.count(opDeleteVirtualServer)
	if err := p.kernel.IPVS.DeleteVirtualServer(ctx, vp.spec); err != nil && !ipvs.IsNotFound(err) {
		vsFailed(out, vp, "virtual server "+key.String(), fmt.Errorf("deleting virtual server %s: %w", key, err))
		return
	}
	if a := p.applied.vs[key]; a != nil {
		for _, r := range a.rs {
			delete(p.draining, drainKey{key, r.key})
		}
	}
	delete(p.applied.vs, key)
	p.noteConntrack(vp.spec, ct)
}

// writePlannedVirtualServer creates or updates vp's virtual server, and reports
// whether its real servers can be written (the virtual server is there).
func (p *Proxier) writePlannedVirtualServer(ctx context.Context, vp *vsPlan, stats *SyncStats, out *outcome) bool {
	key := vp.key
	if vp.action != vsCreate && vp.action != vsUpdate {
		return true
	}
	update := vp.action == vsUpdate
	spec, err := p.writeVirtualServer(ctx, vp.spec, update, stats)
	switch {
	case err != nil && update:
		// The virtual server is there as it was: its real servers are still written.
		vsFailed(out, vp, "virtual server "+key.String(), fmt.Errorf("updating virtual server %s: %w", key, err))
		return true
	case err != nil:
		vsFailed(out, vp, "virtual server "+key.String(), fmt.Errorf("adding virtual server %s: %w", key, err))
		return false
	case update:
		p.applied.vs[key].vs = spec
	default:
		p.applied.vs[key] = &appliedVS{vs: spec}
	}
	if spec != vp.spec {
		out.fail(failure{key: retryKey{kind: retryVS, vs: key}, layer: heldBackIPVS, topic: "scheduler " + vp.spec.Scheduler,
			what:   "scheduler " + vp.spec.Scheduler + " of virtual server " + key.String() + " (using " + spec.Scheduler + ")",
			owners: ownerList(vp.owner), err: fmt.Errorf("the kernel refused scheduler %s for %s", vp.spec.Scheduler, key)})
	}
	return true
}

// executeRealServer carries out one real server step of vp. It returns what the
// virtual server holds of that real server afterwards (nothing once deleted) and
// whether a write changed where traffic goes.
func (p *Proxier) executeRealServer(ctx context.Context, vp *vsPlan, a *appliedVS, s rsStep, stats *SyncStats, out *outcome) ([]desiredRS, bool) {
	key := vp.key
	// write sends one request; verb and prep word the error ("adding real server X
	// to Y"), made only on failure.
	write := func(op kernelOp, k rsKey, verb, prep string, call func() error) bool {
		stats.IPVSOps++
		stats.count(op)
		if err := call(); err != nil && !(op == opDeleteRealServer && ipvs.IsNotFound(err)) {
			vsFailed(out, vp, "real server "+k.String()+" of "+key.String(), fmt.Errorf("%s real server %s %s %s: %w", verb, k, prep, key, err))
			return false
		}
		return true
	}
	if s.readd {
		return p.reAddRealServer(ctx, vp, a, s, stats, out)
	}
	switch s.action {
	case rsKeepDraining, rsLeave:
		return []desiredRS{s.have}, false
	case rsAdd:
		if !write(opAddRealServer, s.want.key, "adding", "to", func() error {
			return p.kernel.IPVS.AddRealServer(ctx, a.vs, s.want.key.realServer(s.want.weight))
		}) {
			return nil, false
		}
	case rsSetWeight:
		if !write(opUpdateRealServer, s.want.key, "setting weight of", "of", func() error {
			return p.kernel.IPVS.UpdateRealServer(ctx, a.vs, s.want.key.realServer(s.want.weight))
		}) {
			return []desiredRS{s.have}, false
		}
	case rsDrain:
		if !write(opUpdateRealServer, s.have.key, "draining", "of", func() error {
			return p.kernel.IPVS.UpdateRealServer(ctx, a.vs, s.have.key.realServer(0))
		}) {
			return []desiredRS{s.have}, false
		}
		p.draining[drainKey{key, s.have.key}] = p.clock.Now().Add(p.opts.DrainTimeout).UnixNano()
		return []desiredRS{{key: s.have.key, weight: 0}}, false
	case rsDelete:
		if !write(opDeleteRealServer, s.have.key, "deleting", "of", func() error {
			return p.kernel.IPVS.DeleteRealServer(ctx, a.vs, s.have.key.realServer(s.have.weight))
		}) {
			return []desiredRS{s.have}, false
		}
		return nil, true
	}
	if len(p.draining) > 0 {
		delete(p.draining, drainKey{key, s.want.key})
	}
	return []desiredRS{s.want}, s.action != rsKeep
}

// keepBusyInPlace turns the re-adds of vp (keepListOrder) of real servers with an
// established connection into their plain steps: deleting a real server makes the
// kernel expire its connections (with expire_nodest_conn=1, from a work queued a tick
// after the delete), and a re-add does not always come first. Such a real server stays
// where it is in the kernel's list until a later addition finds it idle. When the
// real servers cannot be read, none is re-added.
func (p *Proxier) keepBusyInPlace(ctx context.Context, vp *vsPlan, a *appliedVS, stats *SyncStats) {
	if !slices.ContainsFunc(vp.steps, func(s rsStep) bool { return s.readd }) {
		return
	}
	stats.count(opDumpIPVS)
	live, err := p.kernel.IPVS.GetRealServers(ctx, a.vs)
	if err != nil {
		p.logger.Error(err, "Failed to read real servers; not reordering them", "virtualServer", vp.key)
	}
	busy := make(map[rsKey]bool, len(live))
	for _, rs := range live {
		busy[keyOfRS(rs.Address, rs.Port)] = rs.ActiveConn > 0
	}
	for i := range vp.steps {
		if s := &vp.steps[i]; s.readd && (err != nil || busy[s.key()]) {
			s.readd = false
		}
	}
}

// reAddRealServer deletes a real server and adds it again at its weight after step s
// (keepListOrder), both requests in one send so that the kernel carries them out back
// to back: the deleted real server waits in the kernel's trash and the add takes it
// back from there, with its counters. Only real servers without an established
// connection get here (keepBusyInPlace). It returns what the virtual
// server holds of that real server afterwards.
func (p *Proxier) reAddRealServer(ctx context.Context, vp *vsPlan, a *appliedVS, s rsStep, stats *SyncStats, out *outcome) ([]desiredRS, bool) {
	k, w := s.key(), s.weightAfter()
	stats.IPVSOps += 2
	stats.count(opDeleteRealServer)
	stats.count(opAddRealServer)
	errs := p.kernel.IPVS.Write(ctx, []ipvs.Write{
		{Kind: ipvs.WriteDeleteRealServer, VS: a.vs, RS: k.realServer(s.have.weight)},
		{Kind: ipvs.WriteAddRealServer, VS: a.vs, RS: k.realServer(w)},
	})
	fail := func(verb, prep string, err error) {
		vsFailed(out, vp, "real server "+k.String()+" of "+vp.key.String(), fmt.Errorf("%s real server %s %s %s to keep the scheduler's order: %w", verb, k, prep, vp.key, err))
	}
	if err := errs[0]; err != nil && !ipvs.IsNotFound(err) {
		fail("deleting", "of", err)
		return []desiredRS{s.have}, false
	}
	if err := errs[1]; err != nil {
		fail("adding", "to", err)
		return nil, true
	}
	switch s.action {
	case rsDrain:
		p.draining[drainKey{vp.key, k}] = p.clock.Now().Add(p.opts.DrainTimeout).UnixNano()
		return []desiredRS{{key: k, weight: 0}}, false
	case rsKeepDraining:
		return []desiredRS{{key: k, weight: 0}}, false
	}
	if len(p.draining) > 0 {
		delete(p.draining, drainKey{vp.key, k})
	}
	return []desiredRS{s.want}, s.action != rsKeep
}

// addsOnly reports whether vp adds real servers to a virtual server that is right as
// it is, and writes nothing else: no re-add for the list order, no weight, no drain.
// Such plans go pipelined with the creates; most are a warm start's (warm.go), or
// endpoints added to many Services at once.
func addsOnly(vp *vsPlan) bool {
	if vp.action != vsKeep || vp.share {
		return false
	}
	adds := false
	for _, s := range vp.steps {
		switch {
		case s.readd:
			return false
		case s.action == rsAdd:
			adds = true
		case s.action != rsKeep && s.action != rsKeepDraining && s.action != rsLeave:
			return false
		}
	}
	return adds
}

// executePipelined sends the new virtual servers with their real servers, and the
// real servers added to virtual servers that are right (addsOnly), to the kernel
// pipelined (ipvs.Write: many requests per send, each acknowledged on its own): at
// start-up that is every Service, which one request at a time costs a minute at 10k
// under emulation. A virtual server the kernel refuses to add (it exists: someone made
// it since we looked; a scheduler this node lacks) is returned, to go the one-at-a-time
// way, which knows what to do about it; its real servers were refused with it. A
// refused real server is left out and the others go in, as one at a time.
func (p *Proxier) executePipelined(ctx context.Context, plans []*vsPlan, stats *SyncStats, ct *[]conntrackTarget, out *outcome) (again []*vsPlan) {
	if len(plans) == 0 {
		return nil
	}
	var writes []ipvs.Write
	first := make([]int, len(plans))
	for i, vp := range plans {
		first[i] = len(writes)
		spec := vp.spec
		if vp.action == vsCreate {
			writes = append(writes, ipvs.Write{Kind: ipvs.WriteAddVirtualServer, VS: spec})
			stats.count(opAddVirtualServer)
		} else {
			spec = p.applied.vs[vp.key].vs
		}
		for _, s := range vp.steps {
			if s.action == rsAdd {
				writes = append(writes, ipvs.Write{Kind: ipvs.WriteAddRealServer, VS: spec, RS: s.want.key.realServer(s.want.weight)})
				stats.count(opAddRealServer)
			}
		}
	}
	stats.IPVSOps += len(writes)
	errs := p.kernel.IPVS.Write(ctx, writes)
	for i, vp := range plans {
		w := first[i]
		a := p.applied.vs[vp.key]
		if vp.action == vsCreate {
			if errs[w] != nil {
				again = append(again, vp)
				continue
			}
			w++
			a = &appliedVS{vs: vp.spec}
			p.applied.vs[vp.key] = a
		}
		next := make([]desiredRS, 0, len(vp.steps))
		added := false
		for _, s := range vp.steps {
			switch s.action {
			case rsAdd:
				err := errs[w]
				w++
				if err != nil {
					out.fail(failure{key: retryKey{kind: retryVS, vs: vp.key}, layer: heldBackIPVS,
						what: "real server " + s.want.key.String() + " of " + vp.key.String(), owners: ownerList(vp.owner),
						err: fmt.Errorf("adding real server %s to %s: %w", s.want.key, vp.key, err)})
					continue
				}
				added = true
				fallthrough
			case rsKeep:
				next = append(next, s.want)
				if len(p.draining) > 0 {
					delete(p.draining, drainKey{vp.key, s.want.key})
				}
			default:
				next = append(next, s.have)
			}
		}
		slices.SortFunc(next, func(x, y desiredRS) int { return compareRSKeys(x.key, y.key) })
		if slices.Equal(next, vp.desired.realServers) {
			next = vp.desired.realServers
		}
		a.rs = next
		if added {
			p.noteConntrack(a.vs, ct)
		}
	}
	return again
}

// writeVirtualServer adds (or updates) a virtual server. When the kernel refuses a
// scheduler a Service asked for (its module is missing on this node, or it does not
// exist), the virtual server is written with the configured scheduler instead, so the
// Service keeps working; the returned spec is what was written.
func (p *Proxier) writeVirtualServer(ctx context.Context, spec *ipvs.VirtualServer, update bool, stats *SyncStats) (*ipvs.VirtualServer, error) {
	write := func(vs *ipvs.VirtualServer) error {
		stats.IPVSOps++
		if !update {
			stats.count(opAddVirtualServer)
			err := p.kernel.IPVS.AddVirtualServer(ctx, vs)
			if !ipvs.IsExists(err) {
				return err
			}
			// Someone else created it since we looked: take it over.
			stats.IPVSOps++
		}
		stats.count(opUpdateVirtualServer)
		return p.kernel.IPVS.UpdateVirtualServer(ctx, vs)
	}
	err := write(spec)
	if err == nil || spec.Scheduler == p.opts.Scheduler {
		return spec, err
	}
	fallback := *spec
	fallback.Scheduler = p.opts.Scheduler
	fallback.Flags = spec.Flags&ipvs.FlagPersistent | defaultFlags(p.opts.Scheduler)
	if ferr := write(&fallback); ferr != nil {
		return nil, err
	}
	return &fallback, nil
}

func ownerList(n types.NamespacedName) []types.NamespacedName {
	if n.Name == "" {
		return nil
	}
	return []types.NamespacedName{n}
}

func (p *Proxier) noteConntrack(vs *ipvs.VirtualServer, ct *[]conntrackTarget) {
	if vs.Protocol == ipvs.UDP || vs.Protocol == ipvs.SCTP {
		*ct = append(*ct, conntrackTarget{protocol: vs.Protocol, addr: vs.Address.String(), port: vs.Port})
	}
}

// afterFunc runs f after d by the proxier's clock (tests step a fake one).
func (p *Proxier) afterFunc(d time.Duration, f func()) {
	if c, ok := p.clock.(clock.WithDelayedExecution); ok {
		c.AfterFunc(d, f)
		return
	}
	time.AfterFunc(d, f)
}
