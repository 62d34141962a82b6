// Package scale drives the proxier the way a cluster does, in-process: a fake
// clientset feeds real shared informers, pkg/proxy/config fans their events out to
// the IPVS proxier, and the proxier's own BoundedFrequencyRunner (SyncLoop) programs
// a fake kernel. RunChurn measures, for every EndpointSlice write, the time from the
// API write to the fake IPVS holding the new real server.
package scale

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	proxyconfig "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/config"
	proxyipvs "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/sysctl"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/scale/cluster"
)

// ChurnConfig describes one churn run.
type ChurnConfig struct {
	Services            int
	EndpointsPerService int
	// UpdatesPerSecond EndpointSlice writes are issued, each replacing one endpoint
	// of one Service with a fresh address, for Duration.
	UpdatesPerSecond int
	Duration         time.Duration
	MinSyncPeriod    time.Duration
	SyncPeriod       time.Duration
	// StartTimeout bounds the wait for the initial list to be programmed and Drain the
	// wait for the last updates to arrive.
	StartTimeout time.Duration
	Drain        time.Duration
}

// ChurnResult is what a run measured.
type ChurnResult struct {
	// Startup is from starting the informers to the fake IPVS holding every Service's
	// last real server (initial list, first full sync).
	Startup time.Duration
	// Updates were written; Latencies (sorted) are those that reached the fake IPVS
	// within Drain of the end; Missed did not.
	Updates   int
	Latencies []time.Duration
	Missed    int
	// Syncs the runner ran during the churn (from the proxier's sync counter).
	Syncs int
	// Achieved is the write rate actually reached (writes per second).
	Achieved float64
}

// Percentile returns the q-th (0..1) latency, nearest rank.
func (r *ChurnResult) Percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q*float64(len(r.Latencies))+0.5) - 1
	i = max(0, min(i, len(r.Latencies)-1))
	return r.Latencies[i]
}

// watchedIPVS wraps the fake IPVS: every real server add is checked against the
// expected ones and timestamped when it succeeds.
type watchedIPVS struct {
	ipvs.Interface
	mu       sync.Mutex
	expected map[string]time.Time // "vsKey/rsKey" -> time of the API write
	arrived  []time.Duration
	waiters  map[string]chan struct{}
}

func newWatchedIPVS(inner ipvs.Interface) *watchedIPVS {
	return &watchedIPVS{Interface: inner, expected: map[string]time.Time{}, waiters: map[string]chan struct{}{}}
}

func watchKey(vs *ipvs.VirtualServer, rs *ipvs.RealServer) string { return vs.Key() + "/" + rs.Key() }

func (w *watchedIPVS) AddRealServer(ctx context.Context, vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	err := w.Interface.AddRealServer(ctx, vs, rs)
	if err != nil {
		return err
	}
	w.added(vs, rs)
	return nil
}

// Write is how the proxier adds new virtual servers with their real servers.
func (w *watchedIPVS) Write(ctx context.Context, writes []ipvs.Write) []error {
	errs := w.Interface.Write(ctx, writes)
	for i, wr := range writes {
		if wr.Kind == ipvs.WriteAddRealServer && errs[i] == nil {
			w.added(wr.VS, wr.RS)
		}
	}
	return errs
}

func (w *watchedIPVS) added(vs *ipvs.VirtualServer, rs *ipvs.RealServer) {
	now := time.Now()
	k := watchKey(vs, rs)
	w.mu.Lock()
	if t0, ok := w.expected[k]; ok {
		w.arrived = append(w.arrived, now.Sub(t0))
		delete(w.expected, k)
	}
	if ch, ok := w.waiters[k]; ok {
		close(ch)
		delete(w.waiters, k)
	}
	w.mu.Unlock()
}

// expect records that a write made at t0 must produce key.
func (w *watchedIPVS) expect(key string, t0 time.Time) {
	w.mu.Lock()
	w.expected[key] = t0
	w.mu.Unlock()
}

// waitFor returns a channel closed when key is added.
func (w *watchedIPVS) waitFor(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	w.waiters[key] = ch
	return ch
}

func (w *watchedIPVS) outstanding() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.expected)
}

// clusterIPKey is the watch key of Service i's ClusterIP virtual server and ip.
func clusterIPKey(i int, ip string) string {
	vs := &ipvs.VirtualServer{Address: net.ParseIP(cluster.ClusterIP(i)), Protocol: ipvs.TCP, Port: cluster.ServicePort}
	rs := &ipvs.RealServer{Address: net.ParseIP(ip), Port: cluster.TargetPort}
	return watchKey(vs, rs)
}

// syncCounter counts the proxier's runs through its healthz hook, which the proxier
// calls after every successful sync.
type syncCounter struct {
	mu    sync.Mutex
	syncs int
}

func (s *syncCounter) QueuedUpdate(v1.IPFamily) {}
func (s *syncCounter) Updated(v1.IPFamily) {
	s.mu.Lock()
	s.syncs++
	s.mu.Unlock()
}
func (s *syncCounter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncs
}

// withDefaults refuses a config with nothing to run and fills in the periods and
// timeouts left at zero.
func (cfg ChurnConfig) withDefaults() (ChurnConfig, error) {
	if cfg.Services <= 0 || cfg.EndpointsPerService <= 0 || cfg.UpdatesPerSecond <= 0 || cfg.Duration <= 0 {
		return cfg, fmt.Errorf("invalid churn config %+v", cfg)
	}
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = 30 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 5 * time.Minute
	}
	if cfg.Drain <= 0 {
		cfg.Drain = cfg.MinSyncPeriod + 5*time.Second
	}
	return cfg, nil
}

// newChurnProxier is the IPv4 proxier of node cluster.LocalNode over fakes of
// every kernel interface, its IPVS watched and its syncs counted.
func newChurnProxier(ctx context.Context, cfg ChurnConfig, watched *watchedIPVS, counter *syncCounter) (*proxyipvs.Proxier, error) {
	nl := netlink.NewFake()
	nl.AddLink("lo", "127.0.0.1", "::1")
	nl.AddLink("eth0", "192.168.0.10")
	p, err := proxyipvs.NewProxier(ctx, proxyipvs.Options{
		IPFamily:      v1.IPv4Protocol,
		NodeName:      cluster.LocalNode,
		NodeIP:        net.ParseIP("192.168.0.10"),
		SyncPeriod:    cfg.SyncPeriod,
		MinSyncPeriod: cfg.MinSyncPeriod,
		Scheduler:     "rr",
		MasqueradeBit: 14,
		HealthzServer: counter,
		KernelVersion: "6.1.0-57-amd64",
	}, proxyipvs.Kernel{
		IPVS: watched, IPSet: ipset.NewFake(), IPTables: iptables.NewFake(iptables.ProtocolIPv4),
		Netlink: nl, Sysctl: sysctl.NewFake(nil), Conntrack: conntrack.NewFake(),
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("creating proxier: %w", err)
	}
	return p, nil
}

// writeChurn writes cfg.UpdatesPerSecond EndpointSlice updates per second for
// cfg.Duration, each replacing one endpoint with a fresh address that watched
// then expects, and counts them in res (Updates, Achieved).
func writeChurn(ctx context.Context, cfg ChurnConfig, c *cluster.Cluster, client *fake.Clientset, watched *watchedIPVS, res *ChurnResult) error {
	interval := time.Second / time.Duration(cfg.UpdatesPerSecond)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	churnStart := time.Now()
	sliceClient := client.DiscoveryV1().EndpointSlices(cluster.Namespace)
	for u := 0; time.Since(churnStart) < cfg.Duration; u++ {
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		// Spread the writes over the cluster and over each Service's endpoints.
		svc := (u * 7919) % cfg.Services
		ip := c.NextEndpointIP()
		s := c.WithEndpoint(svc, u%cfg.EndpointsPerService, ip)
		t0 := time.Now()
		watched.expect(clusterIPKey(svc, ip), t0)
		if _, err := sliceClient.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating EndpointSlice %s: %w", s.Name, err)
		}
		res.Updates++
	}
	res.Achieved = float64(res.Updates) / time.Since(churnStart).Seconds()
	return nil
}

// RunChurn builds the cluster, starts the whole pipeline, waits for the initial
// programming, then writes cfg.UpdatesPerSecond EndpointSlice updates per second for
// cfg.Duration and collects the latencies. Everything it starts stops when it returns.
func RunChurn(ctx context.Context, cfg ChurnConfig) (*ChurnResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	c := cluster.New(cluster.Spec{Services: cfg.Services, EndpointsPerService: cfg.EndpointsPerService})
	objs := make([]runtime.Object, 0, 2*cfg.Services)
	for i := range c.Services {
		objs = append(objs, c.Services[i], c.Slices[i])
	}
	client := fake.NewSimpleClientset(objs...)

	watched := newWatchedIPVS(ipvs.NewFake())
	counter := &syncCounter{}
	p, err := newChurnProxier(ctx, cfg, watched, counter)
	if err != nil {
		return nil, err
	}

	last := cfg.Services - 1
	ready := watched.waitFor(clusterIPKey(last, c.Slices[last].Endpoints[cfg.EndpointsPerService-1].Addresses[0]))
	start := time.Now()
	// As the daemon's (cmd/kube-proxy/app/run.go): trimmed Services, slice records.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(proxyconfig.TrimForCache))
	svcConfig := proxyconfig.NewServiceConfig(ctx, factory.Core().V1().Services(), 0)
	svcConfig.RegisterEventHandler(p)
	epConfig := proxyconfig.NewEndpointSliceConfig(ctx, factory.Discovery().V1().EndpointSlices(), 0, cluster.LocalNode)
	epConfig.RegisterEventHandler(p)
	var wg sync.WaitGroup
	defer func() {
		// Stop everything before waiting for it: the informers only end on ctx.
		cancel()
		factory.Shutdown()
		wg.Wait()
	}()
	wg.Add(3)
	go func() { defer wg.Done(); svcConfig.Run(ctx.Done()) }()
	go func() { defer wg.Done(); epConfig.Run(ctx.Done()) }()
	go func() { defer wg.Done(); p.SyncLoop() }()
	factory.Start(ctx.Done())

	select {
	case <-ready:
	case <-time.After(cfg.StartTimeout):
		return nil, fmt.Errorf("initial list of %d Services not programmed within %v", cfg.Services, cfg.StartTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := &ChurnResult{Startup: time.Since(start)}

	syncsBefore := counter.count()
	if err := writeChurn(ctx, cfg, c, client, watched, res); err != nil {
		return nil, err
	}

	deadline := time.Now().Add(cfg.Drain)
	for watched.outstanding() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	res.Syncs = counter.count() - syncsBefore
	watched.mu.Lock()
	res.Latencies = append([]time.Duration(nil), watched.arrived...)
	res.Missed = len(watched.expected)
	watched.mu.Unlock()
	slices.Sort(res.Latencies)
	return res, nil
}
