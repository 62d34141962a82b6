package ipvs

// Scale benchmarks (issue 8) over the fake kernel. The clusters come from
// test/scale/cluster (its address ranges are listed there); the node is the one of
// helpers_test.go: 192.168.0.10 on eth0, 192.168.1.10 on eth1, so every NodePort
// Service has two NodePort virtual servers (loopback addresses get none).
//
// The ipset Fake is used without helpers_test.go's referencedIPSet wrapper: that one
// copies every set on every batch to mirror iptables references, which would charge
// an O(cluster) cost to the proxier that no kernel has.
//
// Run: hack/bench.sh, or e.g.
//
//	go test -run '^$' -bench 'BenchmarkOneEndpointChange' -benchmem ./pkg/proxy/ipvs/

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/config"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/healthcheck"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/sysctl"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/scale/cluster"
)

// benchSizes are the Service counts of issue 8; BENCH_SIZES (comma separated)
// overrides them, e.g. BENCH_SIZES=1000 for a quick run.
func benchSizes(b *testing.B) []int {
	env := os.Getenv("BENCH_SIZES")
	if env == "" {
		return []int{1000, 10000, 50000}
	}
	var out []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("bad BENCH_SIZES entry %q", f)
		}
		out = append(out, n)
	}
	return out
}

const benchEndpointsPerService = 10

// benchCluster is a cluster of n Services (the API side: its objects are the
// generator's, and WithEndpoint changes them) and what the daemon's informers cache
// of it.
func benchCluster(n int) (*cluster.Cluster, *informerCache) {
	c := cluster.New(benchSpec(n))
	return c, cacheOf(c)
}

// benchSpec is the generated cluster of n Services; BENCH_ALL_LOCAL=1 puts every
// endpoint on this node, as the VM's scale test does.
func benchSpec(n int) cluster.Spec {
	return cluster.Spec{Services: n, EndpointsPerService: benchEndpointsPerService, AllLocal: os.Getenv("BENCH_ALL_LOCAL") == "1"}
}

// informerCache is what the daemon's informers hold: each object decoded from
// protobuf, as a client receives it from the apiserver, then put through its
// informer's transform (config.ReduceServices, config.ReduceEndpointSlices: records),
// one at a time.
type informerCache struct {
	services []*proxy.ServiceRecord
	slices   []*proxy.EndpointSliceRecord
}

func cacheOf(c *cluster.Cluster) *informerCache {
	ic := &informerCache{services: make([]*proxy.ServiceRecord, len(c.Services)), slices: make([]*proxy.EndpointSliceRecord, len(c.Slices))}
	for i := range c.Services {
		rec, err := config.ReduceServices(decoded(c.Services[i], &v1.Service{}))
		if err != nil {
			panic(err)
		}
		ic.services[i] = rec.(*proxy.ServiceRecord)
		ic.slices[i] = sliceRecord(decoded(c.Slices[i], &discovery.EndpointSlice{}))
	}
	return ic
}

// sliceRecord is slice as the EndpointSlice informer caches it for the bench node.
func sliceRecord(slice *discovery.EndpointSlice) *proxy.EndpointSliceRecord {
	rec, err := config.ReduceEndpointSlices(cluster.LocalNode)(slice)
	if err != nil {
		panic(err)
	}
	return rec.(*proxy.EndpointSliceRecord)
}

// decoded returns obj as a client decodes it: obj encoded to protobuf and decoded
// into out, every string and pointer of its own.
func decoded[T interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}](obj, out T) T {
	data, err := obj.Marshal()
	if err == nil {
		err = out.Unmarshal(data)
	}
	if err != nil {
		panic(err)
	}
	return out
}

// benchKernel is a fake kernel with the counters a benchmark reads.
type benchKernel struct {
	ipvs  *ipvs.Fake
	ipset *ipset.Fake
	ipt   *iptables.Fake
	nl    *netlink.Fake
	// resyncRead sums the time periodic resyncs spent reading the kernel.
	resyncRead time.Duration
	// stopProxier cancels the context of the proxier made by newBenchProxier.
	stopProxier context.CancelFunc
}

func newBenchKernel() *benchKernel {
	k := &benchKernel{ipvs: ipvs.NewFake(), ipset: ipset.NewFake(), ipt: iptables.NewFake(iptables.ProtocolIPv4), nl: netlink.NewFake()}
	k.nl.AddLink("lo", "127.0.0.1", "::1")
	k.nl.AddLink("eth0", "192.168.0.10", "fd00:1::10")
	k.nl.AddLink("eth1", "192.168.1.10")
	return k
}

func (k *benchKernel) kernel() Kernel {
	return Kernel{IPVS: k.ipvs, IPSet: k.ipset, IPTables: k.ipt, Netlink: k.nl, Sysctl: sysctl.NewFake(nil), Conntrack: conntrack.NewFake()}
}

func (k *benchKernel) resetCounters() {
	k.ipvs.ResetOps()
	k.ipset.ResetCounters()
	k.ipt.ResetCounters()
	k.nl.ResetOps()
}

// kernelOpCounts counts what reached the kernel since the last reset: one per IPVS
// netlink call, per ipset entry or header changed (each is one netlink message inside
// the restore batch), per iptables-restore and per address netlink call (the
// per-sync node address dump included).
type kernelOpCounts struct{ ipvs, ipset, iptables, netlink int }

func (k *benchKernel) ops() kernelOpCounts {
	var o kernelOpCounts
	for _, n := range k.ipvs.Ops() {
		o.ipvs += n
	}
	o.ipset = k.ipset.Ops().Total()
	c := k.ipt.Counters()
	o.iptables = c.Restores + c.Commands
	for _, n := range k.nl.Ops() {
		o.netlink += n
	}
	return o
}

func (o kernelOpCounts) total() int { return o.ipvs + o.ipset + o.iptables + o.netlink }

// newBenchProxier is newTestEnv for benchmarks: the same node and options over k.
func newBenchProxier(b *testing.B, k *benchKernel, clk *testingclock.FakeClock) *Proxier {
	b.Helper()
	opts := Options{
		IPFamily:      v1.IPv4Protocol,
		NodeName:      cluster.LocalNode,
		NodeIP:        []byte{192, 168, 0, 10},
		SyncPeriod:    30 * time.Second,
		Scheduler:     "rr",
		MasqueradeBit: 14,
		ServiceHealth: healthcheck.NewFakeServiceHealthServer(),
		KernelVersion: "6.1.0-57-amd64",
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	k.stopProxier = cancel
	p, err := NewProxier(ctx, opts, k.kernel(), clk)
	if err != nil {
		b.Fatalf("NewProxier: %v", err)
	}
	// A periodic resync's read runs inline (in the daemon it runs beside the sync
	// loop), timed on its own: the sync that starts it takes it.
	p.goResync = func(f func()) {
		start := time.Now()
		f()
		k.resyncRead += time.Since(start)
	}
	return p
}

func benchClock() *testingclock.FakeClock {
	return testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
}

// feed hands the whole cluster to the proxier, as the informers' initial list does,
// and marks Services synced; the first sync runs on OnEndpointSlicesSynced. It feeds
// the trackers as OnServiceAdd and OnEndpointSliceAdd do but without their
// pending-changes gauge, which walks every Service on every event and so makes an
// initial list of n slices O(n^2) (minutes at 50k; see docs/PERFORMANCE.md, Scale).
// The one-endpoint change benchmark goes through the real handler.
func feed(p *Proxier, ic *informerCache) {
	for i := range ic.services {
		p.serviceChanges.Update(nil, ic.services[i])
		p.endpointsChanges.EndpointSliceUpdate(ic.slices[i], false)
	}
	p.OnServiceSynced()
}

func mustSynced(b *testing.B, p *Proxier, wantFull bool) SyncStats {
	b.Helper()
	st := p.LastSyncStats()
	if st.Err != nil {
		b.Fatalf("sync failed: %v", st.Err)
	}
	if st.Full != wantFull {
		b.Fatalf("sync full=%v, want %v", st.Full, wantFull)
	}
	return st
}

// startSteady builds a proxier over a fresh fake kernel that has done its first full
// sync of c, and checks that the kernel holds what the cluster implies.
func startSteady(b *testing.B, c *cluster.Cluster, ic *informerCache) (*Proxier, *benchKernel, *testingclock.FakeClock) {
	b.Helper()
	k, clk := newBenchKernel(), benchClock()
	p := newBenchProxier(b, k, clk)
	feed(p, ic)
	p.OnEndpointSlicesSynced()
	mustSynced(b, p, true)
	checkProgrammed(b, k, c)
	return p, k, clk
}

// checkProgrammed asserts the number of virtual and real servers the fake IPVS holds:
// one ClusterIP virtual server per Service plus one per node address (2) per NodePort
// Service; eTP=Local NodePort virtual servers only get the local endpoint.
func checkProgrammed(b *testing.B, k *benchKernel, c *cluster.Cluster) {
	b.Helper()
	n := len(c.Services)
	nodePorts := (n + cluster.NodePortEvery - 1) / cluster.NodePortEvery
	local := (n + cluster.LocalPolicyEvery - 1) / cluster.LocalPolicyEvery
	per := c.Spec.EndpointsPerService
	wantVS := n + 2*nodePorts
	wantRS := n*per + 2*(nodePorts-local)*per + 2*local
	if c.Spec.AllLocal {
		wantRS = n*per + 2*nodePorts*per
	}
	vss, err := k.ipvs.GetVirtualServers(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	rs := 0
	for _, vs := range vss {
		got, err := k.ipvs.GetRealServers(context.Background(), vs)
		if err != nil {
			b.Fatal(err)
		}
		rs += len(got)
	}
	if len(vss) != wantVS || rs != wantRS {
		b.Fatalf("fake IPVS holds %d virtual / %d real servers, want %d / %d", len(vss), rs, wantVS, wantRS)
	}
	k.resetCounters()
}

func sizeName(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("services=%dk", n/1000)
	}
	return fmt.Sprintf("services=%d", n)
}

// BenchmarkFullSyncInitial: the first sync of a daemon on an empty kernel: merge the
// trackers' initial changes, build every Service's desired state, dump the (empty)
// kernel, diff, and write everything.
func BenchmarkFullSyncInitial(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(sizeName(n), func(b *testing.B) {
			c, ic := benchCluster(n)
			var last *benchKernel
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				last = nil
				runtime.GC()
				k := newBenchKernel()
				p := newBenchProxier(b, k, benchClock())
				feed(p, ic)
				b.StartTimer()
				p.OnEndpointSlicesSynced()
				b.StopTimer()
				mustSynced(b, p, true)
				last = k
				b.StartTimer()
			}
			b.StopTimer()
			checkProgrammed(b, last, c)
		})
	}
}

// BenchmarkFullSyncResync: the periodic full sync (every syncPeriod) at steady state:
// rebuild every Service, dump the whole kernel, diff; nothing is out of date, so the
// only write is the iptables-restore a full sync always does.
func BenchmarkFullSyncResync(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(sizeName(n), func(b *testing.B) {
			c, ic := benchCluster(n)
			p, k, clk := startSteady(b, c, ic)
			// BENCH_SLICE_KEYS sets the slice size (0: one comparison, as before slices).
			if v, ok := os.LookupEnv("BENCH_SLICE_KEYS"); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					b.Fatalf("BENCH_SLICE_KEYS=%q: %v", v, err)
				}
				p.resyncSliceKeys = n
			}
			runtime.GC()
			var ops kernelOpCounts
			var longest time.Duration
			slices := 0
			k.resyncRead = 0
			b.ReportAllocs()
			b.ResetTimer()
			// The benchmark's clock is a fake one: time the slices by the real clock,
			// from one slice's start to the next. The first slice is left out: here
			// the resync's read runs in it, where a daemon reads beside the loop.
			var sliceStart time.Time
			first := false
			p.betweenSlices = func() {
				now := time.Now()
				if !first {
					longest = max(longest, now.Sub(sliceStart))
				}
				first = false
				sliceStart = now
			}
			for range b.N {
				clk.Step(31 * time.Second)
				k.resetCounters()
				first = true
				p.syncProxyRules()
				b.StopTimer()
				if !first {
					longest = max(longest, time.Since(sliceStart))
				}
				mustSynced(b, p, true)
				slices += p.LastSyncStats().Slices
				o := k.ops()
				ops.ipvs += o.ipvs
				ops.ipset += o.ipset
				ops.iptables += o.iptables
				ops.netlink += o.netlink
				b.StartTimer()
			}
			b.StopTimer()
			if ops.ipset != 0 {
				b.Fatalf("a steady-state full sync changed %d ipset entries, want 0", ops.ipset)
			}
			b.ReportMetric(float64(ops.total())/float64(b.N), "kernel-ops/op")
			// Of the time per op, the kernel read a daemon makes beside its sync loop;
			// the rest is what changes queued meanwhile wait for.
			b.ReportMetric(float64(k.resyncRead.Milliseconds())/float64(b.N), "read-ms/op")
			// The comparison runs in slices (resync_slices.go): a change waits for one.
			b.ReportMetric(float64(slices)/float64(b.N), "slices/op")
			b.ReportMetric(float64(longest.Microseconds())/1000, "longest-later-slice-ms")
		})
	}
}

// BenchmarkOneEndpointChange: at steady state, one EndpointSlice update (an 11th
// endpoint added to a Service, or removed again) from the handler call to the end of
// the sync it triggers. Removals drain: the real server goes to weight 0 and the next
// sync lists that virtual server's destinations and deletes it, which is counted in
// the next change's operations.
func BenchmarkOneEndpointChange(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(sizeName(n), func(b *testing.B) {
			c, ic := benchCluster(n)
			p, k, _ := startSteady(b, c, ic)
			runtime.GC()
			var sum kernelOpCounts
			maxOps := 0
			maxServices := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// Spread the changes over the cluster; an add and its removal hit the
				// same Service.
				svc := (i / 2 * 7919) % n
				old := ic.slices[svc]
				var cur *proxy.EndpointSliceRecord
				if i%2 == 0 {
					cur = sliceRecord(c.WithEndpoint(svc, benchEndpointsPerService, c.NextEndpointIP()))
				} else {
					cur = sliceRecord(c.WithoutEndpoint(svc, benchEndpointsPerService))
				}
				ic.slices[svc] = cur
				p.OnEndpointSliceUpdate(old, cur)
				p.syncProxyRules()
				b.StopTimer()
				st := mustSynced(b, p, false)
				o := k.ops()
				k.resetCounters()
				sum.ipvs += o.ipvs
				sum.ipset += o.ipset
				sum.iptables += o.iptables
				sum.netlink += o.netlink
				maxOps = max(maxOps, o.total())
				maxServices = max(maxServices, st.Services)
				b.StartTimer()
			}
			b.StopTimer()
			if maxServices != 1 {
				b.Fatalf("a one-endpoint change rebuilt up to %d Services, want 1", maxServices)
			}
			per := func(v int) float64 { return float64(v) / float64(b.N) }
			b.ReportMetric(per(sum.total()), "kernel-ops/op")
			b.ReportMetric(float64(maxOps), "max-kernel-ops")
			b.ReportMetric(per(sum.ipvs), "ipvs-ops/op")
			b.ReportMetric(per(sum.ipset), "ipset-ops/op")
			b.ReportMetric(per(sum.iptables), "iptables-ops/op")
			b.ReportMetric(per(sum.netlink), "netlink-ops/op")
		})
	}
}

// heapInUse returns runtime.MemStats.HeapInuse after two collections, and HeapAlloc
// (the live objects' bytes, without the free space of the spans that hold them).
func heapInUse() (inuse, live uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.HeapAlloc
}

// rssBytes reads VmRSS of this process (0 where /proc is missing).
func rssBytes() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// writeHeapProfile writes a heap profile to $BENCH_HEAPPROFILE when it is set, for
// `go tool pprof -sample_index=inuse_space`: the steady-state heap benchmark calls it
// while the proxier, the fake kernel and the objects are all still reachable.
func writeHeapProfile(b *testing.B) {
	path := os.Getenv("BENCH_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSteadyStateHeap measures the heap at steady state and splits it by
// dropping one part at a time: what the informer caches hold (informerCache: trimmed
// Services and slice records, whose endpoints the proxier's tracker shares), the
// proxier (trackers, maps, desired index, applied state), and the fake kernel (which
// on a node lives in the kernel, not in the daemon). heap-MiB is objects + proxier:
// what the daemon itself would hold. Each iteration is one incremental sync, so the
// state measured has been through the steady-state code path. Run with -benchtime=1x.
func BenchmarkSteadyStateHeap(b *testing.B) {
	for _, n := range benchSizes(b) {
		b.Run(sizeName(n), func(b *testing.B) {
			// The generated objects are the API server's side, not the daemon's.
			c := cluster.New(benchSpec(n))
			base, baseLive := heapInUse()
			ic := cacheOf(c)
			withObjects, withObjectsLive := heapInUse()
			p, k, _ := startSteady(b, c, ic)
			b.ResetTimer()
			for i := range b.N {
				svc := (i * 7919) % n
				old := ic.slices[svc]
				cur := sliceRecord(c.WithEndpoint(svc, 0, c.NextEndpointIP()))
				ic.slices[svc] = cur
				p.OnEndpointSliceUpdate(old, cur)
				p.syncProxyRules()
			}
			b.StopTimer()
			mustSynced(b, p, false)
			// Kept reachable through held until each part is dropped on purpose.
			held := &struct {
				p *Proxier
				k *benchKernel
			}{p, k}
			p, k = nil, nil
			rss := rssBytes()
			full, fullLive := heapInUse()
			writeHeapProfile(b)
			// The fake netlink holds the proxier's address watch (a closure over
			// the proxier) until the proxier's context ends, as a real
			// subscription would: end it, so dropping the proxier frees it.
			held.k.stopProxier()
			held.k.nl.NotifyAddressChange()
			held.p = nil
			withKernel, withKernelLive := heapInUse()
			held.k = nil
			withoutKernel, _ := heapInUse()
			runtime.KeepAlive(held)
			runtime.KeepAlive(c)
			// The informer cache lives as long as the proxier, which shares the
			// records' endpoints: were it dead here, dropping the proxier would free
			// them too and count them twice (once under objects).
			runtime.KeepAlive(ic)
			mib := func(v int64) float64 { return float64(v) / (1 << 20) }
			objects := int64(withObjects) - int64(base)
			proxier := int64(full) - int64(withKernel)
			fakes := int64(withKernel) - int64(withoutKernel)
			b.ReportMetric(mib(objects+proxier), "heap-MiB")
			// The same without the spans' free space: what the objects themselves take.
			live := int64(withObjectsLive) - int64(baseLive) + int64(fullLive) - int64(withKernelLive)
			b.ReportMetric(mib(live), "live-MiB")
			b.ReportMetric(mib(proxier), "proxier-MiB")
			b.ReportMetric(mib(objects), "objects-MiB")
			b.ReportMetric(mib(int64(withObjectsLive)-int64(baseLive)), "objects-live-MiB")
			b.ReportMetric(mib(fakes), "fake-kernel-MiB")
			b.ReportMetric(mib(int64(rss)), "rss-MiB")
		})
	}
}
