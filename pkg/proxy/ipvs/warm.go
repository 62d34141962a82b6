package ipvs

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// Warm start. Upstream programs nothing until the Service and EndpointSlice lists
// are complete, and at 10,000 Services and more those lists take as long as the
// programming: the two ran one after the other. With Options.WarmStart the proxier
// programs what has arrived while the lists still come in (the configs hand each
// listed object over as it arrives: pkg/proxy/config/early.go), in warm syncs that
// only add and change. No virtual server, real server, set member, address or rule
// goes before the lists are complete: an object not listed yet may still want it,
// and a restarted daemon finds the node's state in place and must not take it down.
//
// The first warm sync reads the kernel as a first full sync does and prepares the
// sets and rules; the next ones take the changes. The first sync after the lists
// are complete is full: it compares every key against what the warm syncs wrote
// (their applied state, kept with every write), without reading the kernel again,
// and removes what nothing wants. Held-back objects, retries and the failure
// contract are those of any sync; a warm sync that fails is forgotten, and the next
// sync reads the kernel again. The node is reported healthy, and the Services'
// health check servers start, only from the full sync on.

// deferWithoutEndpoints leaves out of a warm sync's changed Services those whose
// EndpointSlices have not arrived: the Service list comes in before the slices, and
// a Service built without its endpoints is built again when they come, its virtual
// server written empty first. A deferred Service is built by the first sync that
// has its slices, or by the first sync after the lists are complete (which builds
// the Services that have none). Outside a warm sync it adds the deferred Services
// to changed, once.
func (p *Proxier) deferWithoutEndpoints(warm bool, changed sets.Set[types.NamespacedName]) sets.Set[types.NamespacedName] {
	if !warm {
		if p.deferred.Len() > 0 {
			if changed == nil {
				changed = sets.New[types.NamespacedName]()
			}
			for name := range p.deferred {
				changed.Insert(name)
			}
		}
		p.deferred = nil
		return changed
	}
	for name := range changed {
		switch {
		case len(p.svcPorts[name]) > 0 && !p.endpointsChanges.HasSlices(name):
			if p.deferred == nil {
				p.deferred = sets.New[types.NamespacedName]()
			}
			p.deferred.Insert(name)
			changed.Delete(name)
		case p.deferred != nil:
			p.deferred.Delete(name)
		}
	}
	return changed
}

// syncWarm runs one warm sync (syncProxyRules, before the lists are complete).
func (p *Proxier) syncWarm() {
	if p.applied != nil && !p.needFull && !p.changesPending() {
		return
	}
	start := p.clock.Now()
	var stats SyncStats
	var err error
	full := p.applied == nil || p.needFull
	if full {
		stats, err = p.syncFull(p.ctx, nil, start)
	} else {
		stats, err = p.syncChanges(p.ctx, start)
	}
	stats.Full, stats.Err, stats.Warm = full, err, true
	p.lastSync = stats
	elapsed := p.clock.Since(start)
	observeSync(p.opts.IPFamily, false, elapsed, stats, err)
	if err != nil {
		p.syncFailed(err, full)
		return
	}
	p.retryDelay = 0
	p.needFull = false
	p.warmed = true
	if wait := p.retryWaitOrDrain(); wait > 0 {
		p.syncRunner.RetryAfter(wait)
	}
	p.logger.V(2).Info("Warm sync complete", "elapsed", elapsed, "read", full, "services", stats.Services,
		"ipvsOps", stats.IPVSOps, "ipsetOps", stats.IPSetOps, "nftablesOps", stats.NFTablesOps,
		"addressOps", stats.AddressOps, "failed", stats.Failed, "phases", stats.phaseList())
}

// wakeWarm asks for a warm sync when an object arrives before the lists are
// complete.
func (p *Proxier) wakeWarm() {
	if p.opts.WarmStart {
		p.syncRunner.Run()
	}
}

// syncAfterWarm is the full sync that ends a warm start: every key is compared
// against the applied state the warm syncs kept, with the changes since.
func (p *Proxier) syncAfterWarm(ctx context.Context, start time.Time) (SyncStats, error) {
	r := p.newSyncRun(start)
	r.full = true
	r.changes = p.takeChanges()
	if err := p.rebuild(ctx, r, false); err != nil {
		return r.stats, err
	}
	p.endSlicing()
	r.t = p.allTouched(p.applied)
	r.t.outFilter, r.t.health = true, true
	r.stats.phase(p.clock.Now(), "touch")
	p.setsEmptied = false
	if err := p.runRules(ctx, rules.Prepare{Out: p.outFilterRules(nil)}, &r.stats); err != nil {
		return r.stats, err
	}
	p.dueRetries(r.now, r.t)
	return r.stats, p.planAndExecute(ctx, r)
}

// endWarmStart runs the full sync that ends a warm start, as runSyncs runs a full
// sync.
func (p *Proxier) endWarmStart(start time.Time) (SyncStats, bool, error) {
	p.dropResync()
	syncStart := p.clock.Now()
	stats, err := p.syncAfterWarm(p.ctx, syncStart)
	if err == nil {
		p.afterFullSync(&stats) // cleanup_beside.go
	}
	stats.Slices, stats.LongestSlice = 1, p.clock.Since(syncStart)
	return stats, true, err
}
