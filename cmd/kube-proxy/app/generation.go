package app

// A proxier is built for the node facts known when it is built (nodefacts.go). When
// the Node later tells otherwise (the daemon started while the apiserver was
// unreachable, or before its Node had addresses or podCIDRs; or the Node's IPs
// changed), the proxier is rebuilt inside the process: a new one is built for the new
// facts, the running one is stopped with the informers that feed it, and the new one
// starts with informers of its own. The kernel state stays in place meanwhile, and the
// new proxier adopts it on its first full sync exactly as a restarted daemon does
// (TestKubeProxyRestartUnderLoad: not one connection fails). Upstream keeps what it
// assumed until it exits.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	proxyconfig "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/config"
	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// proxierGeneration is one provider built for one set of node facts and, once
// started, what runs it: the Service and EndpointSlice informers feeding it and its
// sync loop, all under a context of its own.
type proxierGeneration struct {
	facts    nodeFacts
	families []v1.IPFamily
	provider proxy.Provider
	heldBack func() any                          // nil: the provider keeps no list
	explain  metrics.Explainer                   // nil: the provider cannot
	vsStats  func() []metrics.VirtualServerStats // nil: none
	release  func()                              // nil: nothing to release

	ctx     context.Context
	cancel  context.CancelFunc
	started bool
	lists   *lists
	running sync.WaitGroup
}

// lists are the Service and EndpointSlice informers that feed one generation, with
// their configs, started: the first generation's are started before its proxier is
// built (newProxyServer), so that the API server's lists arrive while the node and
// the kernel are being prepared; the configs hand the provider what the informers
// already hold once they run.
type lists struct {
	factory  informers.SharedInformerFactory
	services *proxyconfig.ServiceConfig
	slices   *proxyconfig.EndpointSliceConfig
	cancel   context.CancelFunc
}

// startLists starts the lists of the Services kube-proxy serves (selector) and their
// EndpointSlices, under a context derived from ctx.
func startLists(ctx context.Context, s *ProxyServer, selector labels.Selector) *lists {
	lctx, cancel := context.WithCancel(ctx)
	resync := s.Config.ConfigSyncPeriod.Duration
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }
	f := informers.NewSharedInformerFactoryWithOptions(s.Client, resync,
		informers.WithTweakListOptions(tweak), informers.WithTransform(proxyconfig.TrimForCache))
	var svcLW, sliceLW *proxyconfig.EarlyListWatch
	if s.WarmStart {
		// The informers list through ListerWatchers that hand the configs each object
		// of the first lists as it arrives (pkg/proxy/config/early.go).
		client := s.Client
		svcLW = earlyInformer(f, client, &v1.Service{}, tweak,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.CoreV1().Services("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.CoreV1().Services("").Watch(ctx, o)
			})
		sliceLW = earlyInformer(f, client, &discovery.EndpointSlice{}, tweak,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return client.DiscoveryV1().EndpointSlices("").List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return client.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
			})
	}
	l := &lists{factory: f, cancel: cancel,
		services: proxyconfig.NewServiceConfig(lctx, f.Core().V1().Services(), resync),
		slices:   proxyconfig.NewEndpointSliceConfig(lctx, f.Discovery().V1().EndpointSlices(), resync, s.NodeName)}
	if s.WarmStart {
		l.services.EarlyFrom(svcLW)
		l.slices.EarlyFrom(sliceLW)
	}
	f.Start(lctx.Done())
	return l
}

// earlyInformer makes f's informer of obj's type list and watch through an
// EarlyListWatch over list and watch (with the factory's list options), and returns it.
func earlyInformer(f informers.SharedInformerFactory, client kubernetes.Interface, obj runtime.Object, tweak func(*metav1.ListOptions),
	list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext) *proxyconfig.EarlyListWatch {
	lw := proxyconfig.NewEarlyListWatch(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return watchFn(ctx, o)
		},
	}, client)
	f.InformerFor(obj, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(lw, obj, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	})
	return lw
}

// stop ends the lists and waits for their informers.
func (l *lists) stop() {
	l.cancel()
	l.factory.Shutdown()
}

// buildGeneration builds the provider for s's node facts, with a context derived
// from ctx that stop cancels (its sync loop returns then).
func buildGeneration(ctx context.Context, s *ProxyServer) (*proxierGeneration, error) {
	gctx, cancel := context.WithCancel(ctx)
	s.HeldBack, s.Explain, s.virtualServerStats, s.releaseProxier = nil, nil, nil, nil
	p, err := s.deps.newProvider(gctx, s)
	if err != nil {
		cancel()
		return nil, err
	}
	s.Proxier = p
	return &proxierGeneration{
		facts: s.facts, families: slices.Clone(s.IPFamilies), provider: p,
		heldBack: s.HeldBack, explain: s.Explain, vsStats: s.virtualServerStats, release: s.releaseProxier,
		ctx: gctx, cancel: cancel,
	}, nil
}

// start feeds the provider from lists of its own (Services without the labels that
// take them away from kube-proxy, EndpointSlices; the ones started early, if no
// generation took them yet) and this node's Node from the node watch, and runs its
// sync loop.
func (g *proxierGeneration) start(s *ProxyServer, nodes *nodeWatch, selector labels.Selector) {
	l := s.early
	s.early = nil
	if l == nil {
		l = startLists(g.ctx, s, selector)
	}
	g.lists = l
	l.services.RegisterEventHandler(g.provider)
	l.slices.RegisterEventHandler(g.provider)
	nodes.setTarget(g.provider)
	// The configs' Run delivers the synced calls, on which a proxier syncs at once:
	// stop waits for them as for the sync loop.
	g.goRun(func() { l.services.Run(g.ctx.Done()) })
	g.goRun(func() { l.slices.Run(g.ctx.Done()) })
	g.goRun(g.provider.SyncLoop)
	g.started = true
}

func (g *proxierGeneration) goRun(f func()) {
	g.running.Add(1)
	go func() {
		defer g.running.Done()
		f()
	}()
}

// stop ends the generation (started or not) and waits until nothing of it runs: no
// informer delivers to the provider and no sync is in flight. The kernel state
// stays as the provider left it.
func (g *proxierGeneration) stop(nodes *nodeWatch) {
	if g.started {
		nodes.setTarget(nil)
	}
	g.cancel()
	if g.lists != nil {
		g.lists.stop()
	}
	g.running.Wait()
	if g.release != nil {
		g.release()
	}
}

// liveGeneration is the running generation, for the metrics server's readers.
type liveGeneration struct {
	gen atomic.Pointer[proxierGeneration]
}

func (l *liveGeneration) heldBack() any {
	if g := l.gen.Load(); g != nil && g.heldBack != nil {
		return g.heldBack()
	}
	return []ipvsproxy.HeldBackObject{}
}

// explain explains a Service with the running generation's proxiers.
func (l *liveGeneration) explain(ctx context.Context, namespace, name string) (any, string, bool, error) {
	if g := l.gen.Load(); g != nil && g.explain != nil {
		return g.explain(ctx, namespace, name)
	}
	return nil, "", false, errors.New("no proxier is running")
}

func (l *liveGeneration) virtualServerStats() []metrics.VirtualServerStats {
	if g := l.gen.Load(); g != nil && g.vsStats != nil {
		return g.vsStats()
	}
	return nil
}

// runProxiers runs the proxier newProxyServer built, and replaces it whenever the
// Node read by the node watch tells other node facts than it was built from. When
// the start-up facts were assumed, the first proxier starts only once the node watch
// has read the Node (or learnt that it does not exist): until then (the apiserver
// unreachable) no informer could deliver anything to program anyway, and the kernel
// state stays exactly as it is. It returns nil when ctx ends and the first error
// from errCh.
func (s *ProxyServer) runProxiers(ctx context.Context, nodes *nodeWatch, selector labels.Selector, errCh <-chan error) error {
	logger := klog.FromContext(ctx)
	nodeCIDR := s.Config.DetectLocalMode == "NodeCIDR"
	cur := s.built
	defer func() { cur.stop(nodes) }()
	if cur.facts.complete(nodeCIDR) {
		cur.start(s, nodes, selector)
	} else {
		logger.Info("Waiting for the node watch to read the Node before the first sync; the kernel state stays as it is until then", "node", klog.KRef("", s.NodeName))
	}
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			logger.Info("Shutting down; the IPVS, ipset and iptables rules stay in place")
			return nil
		case err := <-errCh:
			return err
		case <-nodes.changed:
			if retry != nil {
				continue // a failed rebuild is retried on its own schedule
			}
		case <-retry:
			retry = nil
		}
		node, synced := nodes.latest()
		if !synced {
			continue
		}
		next := cur.facts.learn(node, s.Config.BindAddress)
		if changed := cur.facts.changes(next, nodeCIDR); len(changed) > 0 {
			gen, err := s.rebuild(ctx, cur, next, changed, nodes, selector)
			if err != nil {
				logger.Error(err, "Failed to rebuild the proxier for the Node's values; the current one keeps running", "retryAfter", s.deps.rebuildRetry)
				retry = time.After(s.deps.rebuildRetry)
			} else {
				cur = gen
			}
		}
		if !cur.started {
			if !cur.facts.complete(nodeCIDR) {
				logger.Info("Starting the proxier with assumed node values; it is rebuilt when the Node tells them", cur.facts.logValues(nodeCIDR)...)
			}
			cur.start(s, nodes, selector)
		}
	}
}

// rebuild builds a proxier for facts; only then does it stop cur and, if cur was
// running, start the new one. On failure cur is left as it was.
func (s *ProxyServer) rebuild(ctx context.Context, cur *proxierGeneration, facts nodeFacts, changed []string, nodes *nodeWatch, selector labels.Selector) (*proxierGeneration, error) {
	logger := klog.FromContext(ctx)
	nodeCIDR := s.Config.DetectLocalMode == "NodeCIDR"
	logger.Info("The Node tells other values than the proxier was built with; rebuilding it",
		"changed", changed, "oldNodeIPs", cur.facts.ipsString(), "oldNodeIPsAssumed", cur.facts.ipsAssumed, "oldPodCIDRs", cur.facts.podCIDRs,
		"newNodeIPs", facts.ipsString(), "newPodCIDRs", facts.podCIDRs, "detectLocalMode", s.Config.DetectLocalMode)
	start := time.Now()
	next := *s
	next.setNodeFacts(logger, facts)
	gen, err := buildGeneration(ctx, &next)
	if err != nil {
		return nil, err
	}
	wasStarted := cur.started
	cur.stop(nodes)
	s.adopt(&next, gen)
	if s.HealthzServer != nil {
		// A family no proxier runs for any more has nothing left to sync: its last
		// queued change must not fail /livez.
		for _, f := range cur.families {
			if !slices.Contains(gen.families, f) {
				s.HealthzServer.Updated(f)
			}
		}
	}
	if wasStarted {
		gen.start(s, nodes, selector)
	}
	logger.Info("Rebuilt the proxier; it adopts the kernel state on its first full sync", append(facts.logValues(nodeCIDR),
		"ipFamilies", gen.families, "nodePortAddresses", s.NodePortAddresses, "took", time.Since(start))...)
	return gen, nil
}

// adopt makes next's node facts and proxier s's own (next is a copy of s that
// buildGeneration built gen from).
func (s *ProxyServer) adopt(next *ProxyServer, gen *proxierGeneration) {
	s.facts, s.PrimaryIPFamily, s.NodeIPs, s.PodCIDRs = next.facts, next.PrimaryIPFamily, next.NodeIPs, next.PodCIDRs
	s.IPFamilies, s.NodePortAddresses = next.IPFamilies, next.NodePortAddresses
	s.Proxier, s.HeldBack, s.Explain, s.virtualServerStats, s.releaseProxier = next.Proxier, next.HeldBack, next.Explain, next.virtualServerStats, next.releaseProxier
	s.handles = next.handles
	s.live.gen.Store(gen)
}
