// Package ipvs is the IPVS proxier: it turns the service and endpoint maps into IPVS
// virtual servers, ipset members, kube-ipvs0 addresses and iptables rules, computing
// the desired state, diffing it against what the kernel holds and applying only the
// differences.
package ipvs

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/async"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/sysctl"
)

const (
	defaultScheduler = "rr"
	// defaultDrainTimeout bounds how long a TCP real server whose endpoint vanished
	// without first terminating keeps draining (the default pod grace period).
	defaultDrainTimeout = 30 * time.Second
	// drainCheckInterval is how often draining real servers are re-examined.
	drainCheckInterval = 2 * time.Second
	// minRetryInterval is the first retry after a failed sync.
	minRetryInterval = time.Second
)

// HealthzUpdater is the part of the proxy health server the proxier reports to.
type HealthzUpdater interface {
	QueuedUpdate(ipFamily v1.IPFamily)
	Updated(ipFamily v1.IPFamily)
}

// ServiceHealthServer serves the health check node ports of eTP=Local services.
type ServiceHealthServer interface {
	SyncServices(newServices map[types.NamespacedName]uint16) error
	SyncEndpoints(newEndpoints map[types.NamespacedName]int) error
}

// Options configure one single-family proxier.
type Options struct {
	IPFamily      v1.IPFamily
	NodeName      string
	NodeIP        net.IP // primary node address of this family
	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	Scheduler     string
	ExcludeCIDRs  []*net.IPNet // of any family; other families are ignored
	StrictARP     bool
	TCPTimeout    time.Duration
	TCPFinTimeout time.Duration
	UDPTimeout    time.Duration
	MasqueradeAll bool
	MasqueradeBit int
	// LocalDetectorArgs are iptables match arguments selecting traffic that does NOT
	// come from a local pod (e.g. "!", "-s", "10.244.0.0/16"); empty when undetectable.
	LocalDetectorArgs []string
	// NodePortAddresses are CIDRs (or "primary") selecting NodePort addresses; empty
	// means every local address.
	NodePortAddresses []string
	DrainTimeout      time.Duration
	Recorder          events.EventRecorder
	HealthzServer     HealthzUpdater
	ServiceHealth     ServiceHealthServer
	// KernelVersion decides conn_reuse_mode handling ("" = assume a current kernel).
	KernelVersion string
	// RulesBackend is where the sets and rules beside IPVS live: RulesBackendIPTables
	// (ipsets and iptables chains, upstream's; also "") or RulesBackendNFTables.
	RulesBackend string
	// WarmStart: program what has arrived while the initial lists still come in,
	// adding only (warm.go). Off: nothing before the lists are complete, as upstream.
	WarmStart bool
}

// Kernel is the set of kernel interfaces the proxier programs.
type Kernel struct {
	IPVS      ipvs.Interface
	IPSet     ipset.Interface
	IPTables  iptables.Interface
	Netlink   netlink.Handle
	Sysctl    sysctl.Interface
	Conntrack conntrack.Interface // may be nil: stale UDP flows are then left to expire
	// Reader, if set, holds handles of their own (sockets the writes do not wait on)
	// for the periodic resync's kernel reads, which run beside the sync loop
	// (resync.go). Without it those reads share IPVS and Netlink.
	Reader *KernelReader
	// NFTables may be nil (no nft binary): upstream's nftables-mode table is then
	// left in place.
	NFTables nftables.Interface
	// NFTRules is the table of the nftables rules backend (nftTable), shared by both
	// families' proxiers. The nftables backend writes it; the iptables backend, when
	// it is set, removes its family's objects from it once (a node switched back).
	// With the nftables backend IPSet and IPTables may be nil: they are then only
	// used, when set, to remove what the iptables backend left.
	NFTRules nftables.Ruleset
}

// KernelReader is what a periodic resync reads the kernel through.
type KernelReader struct {
	IPVS    ipvs.Interface
	Netlink netlink.Handle
	// NFTRules, if set, is the nftables backend's table on a socket of its own: the
	// backend lists its sets through it, so a change's element writes do not wait
	// for a listing of tens of thousands of elements.
	NFTRules nftables.Ruleset
}

// Proxier programs IPVS for one IP family. What it remembers is split by kind:
// its inputs (the Services, endpoints and the node), the desired state (index),
// what the kernel is known to hold (kernelMemory) and what failed (failureMemory);
// the sync loop (syncProxyRules) reads and writes them under mu.
type Proxier struct {
	opts   Options
	kernel Kernel
	clock  clock.Clock
	logger klog.Logger
	ctx    context.Context

	serviceChanges   *proxy.ServiceChangeTracker
	endpointsChanges *proxy.EndpointsChangeTracker

	// addrWatch: node address changes arrive as netlink notifications, which set
	// addrsChanged; a partial sync then reads the addresses only after one.
	addrWatch    bool
	addrsChanged atomic.Bool
	// rulesLapsed: the renewal beside the loop found the rules' liveness gone
	// (keepAliveBeside); the next sync is a full one.
	rulesLapsed atomic.Bool

	mu          sync.Mutex // guards everything below
	initialized atomic.Bool
	syncRunner  *async.BoundedFrequencyRunner
	rules       rules.Backend
	inputs
	index *desiredIndex
	bc    buildContext
	kernelMemory
	failureMemory
	// stats of the last sync, for tests and metrics
	lastSync SyncStats
	// goResync runs a resync's read; `go f()` but in tests.
	goResync func(f func())
	// resyncSliceKeys is a periodic resync's slice size (0: no slices).
	resyncSliceKeys int
	// betweenSlices, when set (tests), runs before each slice after the first.
	betweenSlices func()
}

// SyncStats describes one sync.
type SyncStats struct {
	Full bool
	// Warm: a sync before the lists were complete (warm.go), which removes nothing.
	Warm       bool
	Services   int // services whose desired state was rebuilt
	IPVSOps    int
	IPSetOps   int
	AddressOps int
	// NFTablesOps counts the nftables set elements written (added or deleted).
	NFTablesOps   int
	IPTablesWrite bool
	// Failed counts the writes the kernel refused (their objects are held back).
	Failed int
	// DriftCheck marks a periodic full sync over a state believed correct: the
	// operations it issues repair drift, but for notDrift (what its slices wrote for
	// the changes they took).
	DriftCheck bool
	notDrift   struct{ ipvs, ipset, addr, nft int }
	// Slices is how many syncs a periodic resync's comparison took, and LongestSlice
	// the longest of them: what a change waits for at most.
	Slices       int
	LongestSlice time.Duration
	// Compared counts the keys the sync compared one by one (a resync's members of
	// sets whose digests agree are not among them: digest.go).
	Compared int
	Err      error
	// ops counts the requests sent to the kernel, by kind.
	ops [numKernelOps]int
	// phases is where the sync's time went, in order (logged for full syncs).
	phases    []syncPhase
	lastPhase time.Time
}

func (s *SyncStats) count(op kernelOp) { s.ops[op]++ }

// syncPhase is one named part of a sync and how long it took.
type syncPhase struct {
	name string
	took time.Duration
}

// phase records that the part called name ended at now (it began where the last one
// ended, or at the sync's start).
func (s *SyncStats) phase(now time.Time, name string) {
	if !s.lastPhase.IsZero() {
		s.phases = append(s.phases, syncPhase{name, now.Sub(s.lastPhase)})
	}
	s.lastPhase = now
}

// phaseList renders the phases for a log line: "observe=1.2s sets=40ms ...".
func (s SyncStats) phaseList() string {
	var b strings.Builder
	for i, ph := range s.phases {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", ph.name, ph.took.Round(time.Millisecond))
	}
	return b.String()
}

var _ proxy.Provider = &Proxier{}

// NewProxier creates a proxier for one family and prepares the kernel (sysctls,
// timeouts). Kernel state is not touched otherwise until the first sync.
func NewProxier(ctx context.Context, opts Options, kernel Kernel, clk clock.Clock) (*Proxier, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "ipFamily", opts.IPFamily)
	if opts.Scheduler == "" {
		opts.Scheduler = defaultScheduler
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = defaultDrainTimeout
	}
	if opts.SyncPeriod <= 0 {
		return nil, fmt.Errorf("sync period must be positive, got %v", opts.SyncPeriod)
	}
	oldKernel, err := prepareKernel(ctx, logger, opts, kernel)
	if err != nil {
		return nil, err
	}
	excl := make([]*net.IPNet, 0, len(opts.ExcludeCIDRs))
	for _, c := range opts.ExcludeCIDRs {
		if (c.IP.To4() != nil) == (opts.IPFamily == v1.IPv4Protocol) {
			excl = append(excl, c)
		}
	}
	opts.ExcludeCIDRs = excl

	p := &Proxier{
		opts:             opts,
		kernel:           kernel,
		clock:            clk,
		logger:           logger,
		ctx:              klog.NewContext(ctx, logger),
		serviceChanges:   proxy.NewServiceChangeTracker(opts.IPFamily, opts.Recorder),
		endpointsChanges: proxy.NewEndpointsChangeTracker(opts.IPFamily, opts.NodeName),
		inputs:           newInputs(),
		index:            newDesiredIndex(),
		kernelMemory:     kernelMemory{needFull: true, draining: map[drainKey]int64{}},
		failureMemory:    newFailureMemory(),
		resyncSliceKeys:  defaultResyncSliceKeys,
		goResync:         func(f func()) { go f() },
	}
	if p.rules, err = newRulesBackend(opts.RulesBackend, p.rulesConfig(), rulesKernel(kernel)); err != nil {
		return nil, err
	}
	p.bc = buildContext{
		family:           opts.IPFamily,
		nodeName:         opts.NodeName,
		nodeIP:           opts.NodeIP,
		scheduler:        opts.Scheduler,
		localAddrs:       sets.New[string](),
		drainTerminating: !oldKernel,
		clusterOwner:     map[vsKey]*types.NamespacedName{},
	}
	p.syncRunner = async.NewBoundedFrequencyRunnerWithClock("sync-runner", p.syncProxyRules, opts.MinSyncPeriod, opts.SyncPeriod, 2, clk)
	p.addrsChanged.Store(true)
	if err := kernel.Netlink.WatchLocalAddresses(p.ctx, netlink.DefaultDummyDevice, p.onAddressChange); err != nil {
		logger.Error(err, "Failed to subscribe to node address changes; reading the node addresses on every sync")
	} else {
		p.addrWatch = true
	}
	return p, nil
}

// onAddressChange is called by the netlink watch when the node's addresses may
// have changed: the next sync reads them again.
func (p *Proxier) onAddressChange() {
	p.addrsChanged.Store(true)
	if p.initialized.Load() {
		p.Sync()
	}
}

// Sync requests a sync as soon as the runner allows.
func (p *Proxier) Sync() {
	if p.opts.HealthzServer != nil {
		p.opts.HealthzServer.QueuedUpdate(p.opts.IPFamily)
	}
	observeQueued(p.opts.IPFamily)
	p.syncRunner.Run()
}

// SyncLoop runs the sync loop until ctx (given to NewProxier) is done.
func (p *Proxier) SyncLoop() {
	if p.opts.HealthzServer != nil {
		p.opts.HealthzServer.Updated(p.opts.IPFamily)
	}
	observeQueued(p.opts.IPFamily)
	if p.opts.RulesBackend == RulesBackendNFTables {
		go p.keepAliveBeside()
	}
	p.syncRunner.Loop(p.ctx.Done())
}

func (p *Proxier) OnServiceAdd(service *proxy.ServiceRecord) { p.OnServiceUpdate(nil, service) }

func (p *Proxier) OnServiceUpdate(oldService, service *proxy.ServiceRecord) {
	if p.serviceChanges.Update(oldService, service) {
		observeServiceChange(p.serviceChanges.PendingChanges())
		if p.initialized.Load() {
			p.Sync()
		} else {
			p.wakeWarm()
		}
	}
}

func (p *Proxier) OnServiceDelete(service *proxy.ServiceRecord) { p.OnServiceUpdate(service, nil) }

func (p *Proxier) OnServiceSynced() {
	p.mu.Lock()
	p.servicesSynced = true
	p.initialized.Store(p.servicesSynced && p.endpointSlicesSynced)
	p.mu.Unlock()
	p.syncProxyRules()
}

func (p *Proxier) OnEndpointSliceAdd(slice *proxy.EndpointSliceRecord) {
	p.endpointSliceChanged(slice, false)
}

func (p *Proxier) OnEndpointSliceUpdate(_, slice *proxy.EndpointSliceRecord) {
	p.endpointSliceChanged(slice, false)
}

func (p *Proxier) OnEndpointSliceDelete(slice *proxy.EndpointSliceRecord) {
	p.endpointSliceChanged(slice, true)
}

func (p *Proxier) endpointSliceChanged(slice *proxy.EndpointSliceRecord, removed bool) {
	if p.endpointsChanges.EndpointSliceUpdate(slice, removed) {
		observeEndpointChange(p.endpointsChanges.PendingChangeCount())
		if p.initialized.Load() {
			p.Sync()
		} else {
			p.wakeWarm()
		}
	}
}

func (p *Proxier) OnEndpointSlicesSynced() {
	p.mu.Lock()
	p.endpointSlicesSynced = true
	p.initialized.Store(p.servicesSynced && p.endpointSlicesSynced)
	p.mu.Unlock()
	p.syncProxyRules()
}

func (p *Proxier) OnNodeAdd(node *v1.Node) { p.OnNodeUpdate(nil, node) }

func (p *Proxier) OnNodeUpdate(_, node *v1.Node) {
	if node.Name != p.opts.NodeName {
		p.logger.Error(nil, "Received a watch event for a node that doesn't match the current node", "eventNode", node.Name, "currentNode", p.opts.NodeName)
		return
	}
	p.mu.Lock()
	changed := !reflect.DeepEqual(p.nodeLabels, node.Labels)
	if changed {
		p.nodeLabels = make(map[string]string, len(node.Labels))
		for k, v := range node.Labels {
			p.nodeLabels[k] = v
		}
		p.nodeLabelsChanged = true
	}
	p.mu.Unlock()
	if changed {
		p.logger.V(4).Info("Updated proxier node labels", "labels", node.Labels)
		p.Sync()
	}
}

func (p *Proxier) OnNodeDelete(node *v1.Node) {
	if node.Name != p.opts.NodeName {
		p.logger.Error(nil, "Received a watch event for a node that doesn't match the current node", "eventNode", node.Name, "currentNode", p.opts.NodeName)
		return
	}
	p.mu.Lock()
	p.nodeLabels = nil
	p.nodeLabelsChanged = true
	p.mu.Unlock()
	p.Sync()
}

func (p *Proxier) OnNodeSynced() {}

// LastSyncStats returns what the last sync did.
func (p *Proxier) LastSyncStats() SyncStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastSync
}

// slowPartialSync is the duration from which a partial sync is logged with its phases.
const slowPartialSync = 500 * time.Millisecond

// syncProxyRules is the runner's function: every run of the sync loop. Every write
// to the kernel is a step of a plan carried out here (or of the resync's reading
// beside the loop, and the removals after the first full sync: resync.go and
// cleanup_beside.go).
func (p *Proxier) syncProxyRules() {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Before anything else, initialized or not: the nftables backend's rules stay
	// on only while they are renewed.
	var alive SyncStats
	if err := p.runRules(p.ctx, rules.KeepAlive{}, &alive); err != nil {
		p.logger.Error(err, "Failed to keep the rules on")
	}
	if !p.initialized.Load() {
		if p.opts.WarmStart {
			p.syncWarm()
			return
		}
		p.logger.V(2).Info("Not syncing ipvs rules until Services and Endpoints have been received from master")
		return
	}
	if p.rulesLapsed.Swap(false) {
		p.needFull = true
	}
	start := p.clock.Now()
	stats, full, err := p.runSyncs(start)
	stats.addSlice(alive) // the liveness element's renewal, if any
	stats.Full, stats.Err = full, err
	p.lastSync = stats
	elapsed := p.clock.Since(start)
	observeSync(p.opts.IPFamily, full, elapsed, stats, err)
	if err != nil {
		p.syncFailed(err, full)
		return
	}
	p.retryDelay = 0
	p.needFull = false
	if full {
		p.lastFull = start
	}
	if wait := p.retryWaitOrDrain(); wait > 0 {
		p.syncRunner.RetryAfter(wait)
	}
	// The sync completed: objects held back do not make the node unhealthy (they are
	// counted in kubeproxy_ipvs_held_back_objects and listed on the debug endpoint).
	if p.opts.HealthzServer != nil {
		p.opts.HealthzServer.Updated(p.opts.IPFamily)
	}
	p.logSync(stats, full, elapsed)
}

// runSyncs runs this run's syncs: the changes, or a full sync (at start, after a
// failure, or over a periodic resync's read, with the changes first and the
// comparison in slices), and reports whether it was full.
func (p *Proxier) runSyncs(start time.Time) (SyncStats, bool, error) {
	// A full sync reads the kernel first. After a failure (or at start) that read is
	// done here, holding back every change; a periodic resync reads beside the sync
	// loop instead (resync.go), and the sync after the read ends is the full one.
	full := p.needFull || p.applied == nil
	if p.warmed {
		p.warmed = false
		if !full {
			return p.endWarmStart(start)
		}
	}
	var snap *appliedState
	var changes SyncStats // a periodic resync's changes, applied before it
	var err error
	if !full {
		if p.resync == nil && p.resyncDue(start) {
			p.startResync()
		}
		if p.resyncRead() && p.changesPending() {
			// The changes first, in a partial sync the read's journal notes: the
			// resync's syncs take no changes, so all they write is drift.
			changes, err = p.syncChanges(p.ctx, start)
		}
		if err == nil {
			if s, rerr := p.takeResync(); rerr != nil {
				p.logger.Error(rerr, "Failed to read the kernel for a periodic resync; reading it again now")
				full = true
			} else {
				snap, full = s, s != nil
			}
		}
	} else if p.resync != nil {
		p.dropResync() // the inline read below supersedes it
	}
	var stats SyncStats
	if err == nil {
		syncStart := p.clock.Now()
		if full {
			stats, err = p.syncFull(p.ctx, snap, syncStart)
		} else {
			stats, err = p.syncChanges(p.ctx, syncStart)
		}
		if err == nil && full {
			p.afterFullSync(&stats) // cleanup_beside.go
		}
		if full {
			stats.Slices, stats.LongestSlice = 1, p.clock.Since(syncStart)
		}
	}
	stats.addChanges(changes) // nothing when none were applied first
	if err == nil && p.slicer != nil {
		var n int
		var longest time.Duration
		n, longest, err = p.resyncSlices(&stats)
		stats.Slices += n
		stats.LongestSlice = max(stats.LongestSlice, longest)
	}
	if err != nil {
		p.endSlicing()
	}
	return stats, full, err
}

// syncFailed is the failure contract: forget what we believe the kernel holds,
// reconcile fully on the next run, and retry soon (backing off up to the sync
// period).
func (p *Proxier) syncFailed(err error, full bool) {
	p.logger.Error(err, "Failed to sync IPVS proxy rules; retrying with a full sync", "full", full)
	p.applied = nil
	p.needFull = true
	if p.retryDelay < minRetryInterval {
		p.retryDelay = minRetryInterval
	} else if p.retryDelay *= 2; p.retryDelay > p.opts.SyncPeriod {
		p.retryDelay = p.opts.SyncPeriod
	}
	p.syncRunner.RetryAfter(p.retryDelay)
}

// logSync says what a sync did: where a full sync's time went (at scale these are
// the syncs that cost), the drift it repaired, and a slow partial sync's phases.
func (p *Proxier) logSync(stats SyncStats, full bool, elapsed time.Duration) {
	if full {
		p.logger.V(2).Info("Full sync complete", "elapsed", elapsed, "slices", stats.Slices, "longestSlice", stats.LongestSlice,
			"compared", stats.Compared, "services", stats.Services, "ipvsOps", stats.IPVSOps, "ipsetOps", stats.IPSetOps,
			"nftablesOps", stats.NFTablesOps, "addressOps", stats.AddressOps, "failed", stats.Failed, "phases", stats.phaseList())
		if repairs := stats.driftRepairs(); len(repairs) > 0 {
			// Someone else changed what we own (or an event was missed): say so once
			// per resync, beside kubeproxy_ipvs_drift_repairs_total.
			p.logger.Info("Periodic resync repaired drift", "writes", repairs)
		}
	} else if elapsed >= slowPartialSync {
		// A change's sync should take milliseconds; say where a slow one's time went.
		p.logger.V(2).Info("Slow partial sync", "elapsed", elapsed, "services", stats.Services,
			"ipvsOps", stats.IPVSOps, "ipsetOps", stats.IPSetOps, "failed", stats.Failed, "phases", stats.phaseList())
	}
	p.logger.V(4).Info("syncProxyRules complete", "elapsed", elapsed, "full", full, "services", stats.Services,
		"ipvsOps", stats.IPVSOps, "ipsetOps", stats.IPSetOps, "failed", stats.Failed)
}
