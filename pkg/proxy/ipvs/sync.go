package ipvs

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// appliedState is what the proxier believes the kernel holds for its family: read from
// the kernel on a full sync, then kept up to date with every successful write.
type appliedState struct {
	vs       map[vsKey]*appliedVS
	entries  sets.Set[rules.Member]
	addrs    sets.Set[string]
	iptables []byte
	// rules is the rules backend's reading of its sets, which it adopts with the
	// state (nil once adopted, or after a write).
	rules *rules.Observed
	// rulesChecked: a resync read whose backend also checked the rules beside the
	// loop, which hold iptables.
	rulesChecked bool
	// digests: a resync read's, taken beside the loop (digest.go); nil otherwise, and
	// dropped once the read's first sync has used them.
	digests *kernelDigests
}

type appliedVS struct {
	vs *ipvs.VirtualServer
	// rs is sorted by key and unique. It is never changed in place: once a virtual
	// server matches its desired state it shares the desired list, so the applied state
	// costs no memory of its own at steady state.
	rs []desiredRS
}

// weight returns the applied weight of real server k.
func (a *appliedVS) weight(k rsKey) (int32, bool) {
	i, ok := slices.BinarySearchFunc(a.rs, k, func(e desiredRS, k rsKey) int { return compareRSKeys(e.key, k) })
	if !ok {
		return 0, false
	}
	return a.rs[i].weight, true
}

// conntrackTarget is a UDP/SCTP virtual server whose real servers changed: flows to it
// whose reply source is not one of its current real servers are stale.
type conntrackTarget struct {
	protocol string
	addr     string
	port     uint16
}

// A sync takes changes, rebuilds the desired state of the Services they touch,
// observes the kernel (full syncs), plans and executes. A write the kernel refuses
// holds back only its object (retried with backoff, see retry.go); the error returned
// is for failures no single object explains, after which the caller forgets p.applied.
// There are three kinds, each an entry point of its own:
//
//   - syncChanges takes the queued changes (of Services, endpoints, the node's labels
//     and addresses) and compares only the keys they touch;
//   - syncSlice compares the periodic resync's next slice of keys and takes no
//     changes: whatever it writes is drift someone else made, while the changes are
//     applied by syncs of their own between slices (syncProxyRules, resyncSlices);
//   - syncFull compares everything. It reads the kernel itself (and takes the
//     changes), unless snap holds what a resync read beside the sync loop (already
//     corrected for the writes made meanwhile); it may then leave the comparison to
//     slices.

// syncRun is one sync in progress.
type syncRun struct {
	stats SyncStats
	now   time.Time
	t     *touched
	// changes are the changes the sync took (nil: none).
	changes *takenChanges
	full    bool
	// rulesChecked: the resync read checked the rules beside the loop.
	rulesChecked bool
	// warm: a warm sync, before the lists are complete (warm.go).
	warm bool
}

// takenChanges are the results of applying the queued changes to the maps.
type takenChanges struct {
	svc proxy.UpdateServiceMapResult
	ep  proxy.UpdateEndpointsMapResult
}

func (p *Proxier) newSyncRun(start time.Time) *syncRun {
	r := &syncRun{now: p.clock.Now(), t: newTouched(), warm: p.opts.WarmStart && !p.initialized.Load()}
	r.stats.ops, p.resyncOps = p.resyncOps, [numKernelOps]int{}
	r.stats.phase(start, "")
	return r
}

// syncChanges is a partial sync that takes the queued changes.
func (p *Proxier) syncChanges(ctx context.Context, start time.Time) (SyncStats, error) {
	r := p.newSyncRun(start)
	r.changes = p.takeChanges()
	if err := p.rebuild(ctx, r, p.nodeLabelsChanged); err != nil {
		return r.stats, err
	}
	if err := p.runRules(ctx, rules.Grow{}, &r.stats); err != nil {
		return r.stats, err
	}
	p.dueRetries(r.now, r.t)
	return r.stats, p.planAndExecute(ctx, r)
}

// syncSlice is a partial sync that compares the periodic resync's next slice.
func (p *Proxier) syncSlice(ctx context.Context, start time.Time) (SyncStats, error) {
	r := p.newSyncRun(start)
	if err := p.rebuild(ctx, r, false); err != nil {
		return r.stats, err
	}
	if p.slicer != nil {
		more, n := p.slicer.fill(r.t)
		if !more {
			p.slicer = nil
		}
		r.stats.Compared += n
	}
	if err := p.runRules(ctx, rules.Grow{}, &r.stats); err != nil {
		return r.stats, err
	}
	// A periodic resync's syncs write only drift. What a refusal holds back is
	// retried on its own schedule by the syncs that take changes, so a resync
	// neither retries it early nor counts the retry as a repair, and its virtual
	// servers keep waiting in every slice.
	p.withoutRetries(r.t)
	return r.stats, p.planAndExecute(ctx, r)
}

// syncFull is a full sync: over snap, a resync's read, or over a read of its own.
func (p *Proxier) syncFull(ctx context.Context, snap *appliedState, start time.Time) (SyncStats, error) {
	r := p.newSyncRun(start)
	r.full = true
	// Every Service's desired state is rebuilt at start and after a failure. A
	// periodic resync (snap) repairs the kernel, not the desired state: that changed
	// only with the inputs, which every partial sync has followed.
	if snap == nil {
		r.changes = p.takeChanges()
	}
	if err := p.rebuild(ctx, r, snap == nil); err != nil {
		return r.stats, err
	}
	if err := p.takeKernel(ctx, r, snap); err != nil {
		return r.stats, err
	}
	if r.changes != nil {
		p.dueRetries(r.now, r.t)
	} else {
		p.withoutRetries(r.t)
	}
	return r.stats, p.planAndExecute(ctx, r)
}

// takeChanges applies the queued changes to the service and endpoint maps.
func (p *Proxier) takeChanges() *takenChanges {
	c := &takenChanges{svc: p.serviceChanges.Checkout()}
	for name, ports := range c.svc.Ports {
		if len(ports) == 0 {
			delete(p.svcPorts, name)
		} else {
			p.svcPorts[name] = ports
		}
	}
	c.ep = p.endpointsChanges.Checkout()
	observeChangesApplied()
	return c
}

// rebuild rebuilds the desired state of the Services the sync's changes touch, or
// of every Service (all, or when a node-wide input changed), into r.t.
func (p *Proxier) rebuild(ctx context.Context, r *syncRun, all bool) error {
	if r.changes != nil {
		p.bc.nodeLabels = p.nodeLabels
		p.nodeLabelsChanged = false
	}
	// Node addresses: NodePort, externalIP and LB decisions depend on them, so a change
	// rebuilds every Service. With the netlink watch they are read only on full syncs
	// and after a notification (cleared before the read, so a change during it is
	// read next time): a partial sync reads nothing from the kernel.
	if !p.addrWatch || r.full || (r.changes != nil && p.addrsChanged.Swap(false)) {
		localAddrs, nodePortIPs, err := p.nodeAddresses(ctx, &r.stats)
		if err != nil {
			p.addrsChanged.Store(true)
			return err
		}
		if !localAddrs.Equal(p.bc.localAddrs) || !sameIPs(nodePortIPs, p.bc.nodePortIPs) {
			p.bc.localAddrs, p.bc.nodePortIPs = localAddrs, nodePortIPs
			all = true
		}
	}
	var changed sets.Set[types.NamespacedName]
	switch {
	case all:
		changed = sets.New[types.NamespacedName]()
		for n := range p.index.services {
			changed.Insert(n)
		}
		for n := range p.svcPorts {
			changed.Insert(n)
		}
	case r.changes != nil:
		changed = r.changes.svc.UpdatedServices.Union(r.changes.ep.UpdatedServices)
	}
	changed = p.deferWithoutEndpoints(r.warm, changed) // warm.go
	p.updateClusterOwners(changed)
	for name := range changed {
		st := p.buildService(name)
		p.index.set(name, st, r.t)
		p.noteExternalKeys(name, st)
		p.noteRefusals(name, st, r.now)
	}
	r.stats.Services = changed.Len()
	r.stats.phase(p.clock.Now(), "build")
	return nil
}

// takeKernel makes a full sync's read of the kernel (snap, or one of its own) the
// applied state, prepares the rules backend's sets and chooses the keys to compare:
// all of them, or, for a periodic resync, the first slice.
func (p *Proxier) takeKernel(ctx context.Context, r *syncRun, snap *appliedState) error {
	observed := snap
	if observed == nil {
		var err error
		if observed, err = p.observe(ctx, p.kernel.IPVS, p.kernel.Netlink, p.rules.Observe(nil), &r.stats); err != nil {
			return err
		}
		r.stats.phase(p.clock.Now(), "observe-addrs")
	}
	// With a trusted memory of the kernel, whatever a full sync has to write is
	// drift: someone else changed the kernel (or we missed an event).
	r.stats.DriftCheck = p.applied != nil && !p.needFull
	r.rulesChecked = snap != nil && snap.rulesChecked
	p.applied = observed
	if observed.rules != nil {
		p.rules.Adopt(observed.rules)
		observed.rules = nil
	}
	digests := observed.digests
	observed.digests = nil
	p.endSlicing()
	// A periodic resync compares its keys in slices (resync_slices.go); at start
	// and after a failure everything is compared at once.
	sliced := snap != nil && p.resyncSliceKeys > 0
	if !sliced {
		r.t = p.allTouched(observed)
	}
	r.t.outFilter, r.t.health = true, true
	r.stats.phase(p.clock.Now(), "touch")
	p.setsEmptied = false
	if err := p.runRules(ctx, rules.Prepare{Out: p.outFilterRules(nil)}, &r.stats); err != nil {
		return err
	}
	if sliced && p.setsEmptied {
		// The programme was written anew and its sets are empty: fill them now,
		// not slice by slice.
		r.t = p.allTouched(p.applied)
		sliced = false
	}
	if sliced {
		ag := agreement{}
		if digests != nil {
			ag = p.index.agreement(digests, p.applied, r.t)
		}
		s := newResyncSlicer(p.index, p.applied, ag, p.resyncSliceKeys)
		more, n := s.fill(r.t)
		if more {
			p.slicer = s
		}
		r.stats.Compared += n
		r.stats.phase(p.clock.Now(), "slice")
	}
	return nil
}

// planAndExecute plans the writes for r's keys, carries them out and records the
// outcome.
func (p *Proxier) planAndExecute(ctx context.Context, r *syncRun) error {
	t, stats := r.t, &r.stats
	stats.Compared += t.vs.Len() + t.entries.Len() + t.addrs.Len()
	outRules := p.outFilterRules(p.heldOutRules(r.now))
	pl := planSync(&planInput{
		full:             r.full,
		index:            p.index,
		applied:          p.applied,
		touched:          t,
		rules:            p.rules.Text(p.index, outRules),
		out:              outRules,
		rulesChecked:     r.rulesChecked,
		draining:         func(k drainKey) bool { _, ok := p.draining[k]; return ok },
		drains:           len(p.draining),
		drainTerminating: p.bc.drainTerminating,
		excluded:         p.excluded,
		warm:             r.warm,
	})
	// A resync read in flight may have seen the keys this sync writes before or after
	// the write: it takes p.applied's word for them (resync.go).
	p.journal.notePlan(pl)
	if p.logger.V(4).Enabled() {
		p.logger.V(4).Info("Sync plan", "full", r.full, "writes", pl.writes(), "plan", pl.String())
	}
	stats.phase(p.clock.Now(), "plan")

	var ct []conntrackTarget
	out, err := p.run(ctx, pl, stats, &ct)
	observeDraining(p.opts.IPFamily, len(p.draining))
	if err != nil {
		return err
	}
	stats.Failed = len(out.failures)
	p.retryWait = p.recordOutcome(r.now, t, out)
	p.reportFailures(out)
	if !r.warm && (t.health || !p.hcSynced) {
		p.syncHealthServers()
	}
	p.cleanConntrack(ctx, ct, r.full)
	stats.phase(p.clock.Now(), "health+conntrack")
	p.publishHeldBack()
	if r.changes != nil {
		observeEndpointLatency(p.opts.IPFamily, r.changes.ep.LastChangeTriggerTimes)
	}
	observeNoLocal(p.opts.IPFamily, p.index.noLocalIntern.Len(), p.index.noLocalExtern.Len())
	return nil
}

// allTouched marks every key the index wants or the kernel holds for comparison.
func (p *Proxier) allTouched(observed *appliedState) *touched {
	t := p.index.allTouched()
	for k := range observed.vs {
		t.vs.Insert(k)
	}
	for e := range observed.entries {
		t.entries.Insert(e)
	}
	for a := range observed.addrs {
		t.addrs.Insert(a)
	}
	return t
}

// buildService builds the desired state of one Service from its ports (nil when it has
// no ports left in this family).
func (p *Proxier) buildService(name types.NamespacedName) *serviceState {
	sps := p.svcPorts[name]
	if len(sps) == 0 {
		return nil
	}
	ports := make([]servicePort, 0, len(sps))
	for i := range sps {
		// The list is never written (takeChanges replaces a Service's list): the
		// desired virtual servers point at its names.
		ports = append(ports, servicePort{name: &sps[i].Name, info: sps[i].Info, endpoints: p.endpointsChanges.Endpoints(sps[i].Name)})
	}
	return buildServiceState(&p.bc, ports)
}

// outFilterRules lists the KUBE-IPVS-OUT-FILTER rules Services want, less those held
// back until their retry is due.
func (p *Proxier) outFilterRules(held map[rules.OutFilter]bool) []rules.OutFilter {
	out := make([]rules.OutFilter, 0, len(p.index.outRefs))
	for r := range p.index.outRefs {
		if !held[r] {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, rules.CompareOutFilters)
	return out
}

// retryWaitOrDrain is when the runner must run again by itself: the earliest retry of
// a held-back object or the next drain check.
func (p *Proxier) retryWaitOrDrain() time.Duration {
	wait := p.retryWait
	if len(p.draining) > 0 && (wait == 0 || drainCheckInterval < wait) {
		wait = drainCheckInterval
	}
	return wait
}
