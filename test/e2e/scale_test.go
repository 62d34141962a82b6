//go:build e2e && e2escale

// The scale run of issues 8 and 15 in the real-kernel VM (make bench,
// hack/bench.sh): not part of `make e2e` (build tag e2escale). Run it alone:
//
//	go test -tags e2e,e2escale -count=1 -v -timeout 120m -run TestScaleVM ./test/e2e/
//
// KPI_SCALE_PROXIES (default "ours") lists the kube-proxies to run, one after
// the other, on the same objects in the same VM: "ours", "upstream" (upstream
// kube-proxy v1.37.2 in ipvs mode, built by test/e2e/lib/build-tools.sh, or
// KPI_UPSTREAM_KUBE_PROXY), or "ours,upstream", which ends with a side-by-side
// table (SCALE-CMP lines) with the ratio upstream / ours of every figure;
// "ours-nftables" is ours with the nftables rules backend, "upstream-nftables"
// upstream's nftables mode, and "-warm" or "-cold" after ours or ours-nftables runs
// it with --ipvs-warm-start=true or false (the default: nothing programmed before
// the lists are complete).
// KPI_SCALE_SERVICES (default 1000; more than 60,000 need KPI_E2E_SERVICE_CIDR=10.96.0.0/12)
// changes the Service count; past 20,000, or with KPI_SCALE_SEED=etcd, the
// objects are seeded straight into the test etcd (framework.BulkSeed, the
// etcd-seed tool: as the apiserver would store them, with the IPAddresses of
// their ClusterIPs) instead of created through the API, whose ClusterIP
// allocator makes creating N Services cost O(N^2); the run's "objects:" line
// says which, with the time taken (KPI_SCALE_SEED=api creates them through the
// API whatever the count). Seeded objects are not deleted at the end (their
// deletion is O(N^2) too; the control plane goes with the run).
// KPI_SCALE_CHANGES (default 10) the number of one-endpoint changes,
// KPI_SCALE_CHANGE_GAP (default 0) a pause between two changes (so that they
// fall before, during and after periodic resyncs), KPI_SCALE_CHANGE_MAX
// (default 1s for ours, 0 = none) the bound no change of ours may exceed and
// KPI_SCALE_CHANGE_P99 (default none) the bound on its p99, KPI_SCALE_RESYNC_MAX
// (default 2s, 0 = none) the bound on ours' mean periodic full resync in the sync
// loop (issue 15: "a periodic full resync of at most 2 s under TCG"), and
// KPI_SCALE_SYNC_PERIOD (e.g. 30s) replaces the ipvs.syncPeriod of
// framework.KubeProxyConfig (10s), KPI_SCALE_PROGRAM_TIMEOUT (default 15m) the
// start-up bound (ours fails past it; upstream, which at 10,000 Services under TCG
// is still in its first sync after 30 minutes, is reported as far as it got, its
// missing figures as "not after" the bound), KPI_SCALE_LOG_DIR keeps each daemon's
// log there (a relative path is taken from test/e2e, where go test runs),
// KPI_SCALE_ENDPOINTS (default 4) the endpoints per Service, and
// KPI_SCALE_RULES_BACKEND=nftables runs ours with --ipvs-rules-backend=nftables
// (the start-up then waits for its table's sets, and no iptables rule). KPI_VM_MEM
// (MiB) sizes the VM (main_test.go).
package e2e

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// scaleEndpoints is the endpoints per Service (KPI_SCALE_ENDPOINTS, 1-20).
var scaleEndpoints = 4

const (
	scaleNS      = "e2e-scale-vm"
	scaleWorkers = 8
	// Past this many Services the objects are seeded into etcd: creating them
	// through the API costs O(N^2) (kube-apiserver's ClusterIP allocator lists
	// every IPAddress per allocation; about 1,000 a minute past 15,000).
	scaleSeedAbove = 20000
	// Start-up: kube-proxy start until every Service is in IPVS, the ipsets and
	// iptables. Upstream took 133 s for KUBE-CLUSTER-IP at 1k under TCG.
	scaleProgramTimeout = 15 * time.Minute       // KPI_SCALE_PROGRAM_TIMEOUT replaces it
	scaleStartPoll      = 200 * time.Millisecond // between two in-VM reads of the virtual servers
	scaleSlowPoll       = time.Second            // between two in-VM ipset / iptables-save reads
	// One-endpoint changes: API write until the new real server is in IPVS.
	// Under TCG a change arriving during a full resync waits for it (upstream:
	// every sync is one, 8-20 s at 1k), hence 120 s.
	scaleChangeTimeout = 120 * time.Second
	scaleChangePoll    = 5 * time.Millisecond // between two in-VM reads of one virtual server
	// Endpoint k of the run (Service i, endpoint j: k = i*endpoints+j) is
	// 10.244.(64+k/250).(1+k%250) up to 10.244.199.250, then in 10.160.0.0/11
	// (scaleEndpointIP): ranges no other scenario uses; changes use 10.244.200-201.x.
	scaleWaiter = "/kpi/bin/e2e-ipvswait"
)

// vmKubeProxyNames parses KPI_SCALE_PROXIES.
func vmKubeProxyNames() ([]string, error) {
	v := os.Getenv("KPI_SCALE_PROXIES")
	if v == "" {
		return []string{"ours"}, nil
	}
	var out []string
	for _, n := range strings.Split(v, ",") {
		base, _ := splitStartSuffix(n)
		if base != colOurs && base != colOursNFT && (n != base || n != colUpstream && n != colUpstreamNFT) {
			return nil, fmt.Errorf("KPI_SCALE_PROXIES=%q: want a list of ours, ours-nftables (each with -warm or -cold or neither), upstream and upstream-nftables", v)
		}
		out = append(out, n)
	}
	return out, nil
}

func scaleEndpointIP(i, j int) string {
	k := i*scaleEndpoints + j
	if k < 250*136 { // up to 10.244.199.250: the addresses of every earlier run
		return fmt.Sprintf("10.244.%d.%d", 64+k/250, 1+k%250)
	}
	// Beyond (10k x 10 is 100,000): 10.160.0.0/11, which no other scenario uses.
	k -= 250 * 136
	return fmt.Sprintf("10.%d.%d.%d", 160+k/(250*256), (k/250)%256, 1+k%250)
}

// scaleChangeIP is the address change n of run r puts in place of an endpoint.
func scaleChangeIP(r, n int) string { return fmt.Sprintf("10.244.%d.%d", 200+r, n+1) }

func scaleResult(format string, args ...any) {
	fmt.Printf("SCALE-VM: "+format+"\n", args...)
}

func scaleMs(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 0, 64) + " ms" }

func scaleSecs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s" }

func scaleMedian(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// scalePercentile is the nearest-rank percentile p (0-100) of ds.
// scalePercentile and scaleMax are 0 for no durations (upstream that never got to its
// changes).
func scalePercentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

func scaleMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// scaleDmesgTail is the end of the guest kernel log (an OOM kill shows there).
func scaleDmesgTail(ctx context.Context) string {
	out, _ := vm.Sh(ctx, "dmesg | tail -n 5")
	return strings.TrimSpace(out)
}

// memory returns VmRSS and VmHWM (peak) in MiB.
func (p *vmKubeProxy) memory(ctx context.Context) (rss, hwm float64) {
	out, _ := vm.Sh(ctx, fmt.Sprintf("cat /proc/%d/status", p.pid))
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// scaleSyncs is what the daemon's sync histograms say.
type scaleSyncs struct {
	all, full, partial       float64 // counts
	allSum, fullSum, partSum float64 // seconds
	fullOK                   bool    // the full-sync histogram exists (ours; upstream has none: every sync is full)
	reads, readSum           float64 // periodic resync reads beside the sync loop (ours)
	// The IPv4 family's syncs, where the daemon labels them (ours, upstream's
	// nftables mode): the other family has nothing to program, and its syncs
	// must not dilute a mean.
	v4, v4Sum, v4Full, v4FullSum float64
	v4OK, v4FullOK               bool
}

func scaleReadSyncs(t *testing.T, ctx context.Context) (scaleSyncs, string) {
	t.Helper()
	page, err := vm.Sh(ctx, "timeout 20 wget -q -O - http://127.0.0.1:10249/metrics")
	if err != nil {
		t.Fatalf("reading kube-proxy's /metrics in the VM: %v", err)
	}
	var s scaleSyncs
	var parts []string
	s.all, s.allSum, _ = framework.HistogramSummary(page, "kubeproxy_sync_proxy_rules_duration_seconds")
	s.full, s.fullSum, s.fullOK = framework.HistogramSummary(page, "kubeproxy_sync_full_proxy_rules_duration_seconds")
	s.partial, s.partSum, _ = framework.HistogramSummary(page, "kubeproxy_sync_partial_proxy_rules_duration_seconds")
	s.reads, s.readSum, _ = framework.HistogramSummary(page, "kubeproxy_ipvs_resync_read_duration_seconds")
	s.v4, s.v4Sum, s.v4OK = framework.HistogramSummaryOf(page, "kubeproxy_sync_proxy_rules_duration_seconds", `ip_family="IPv4"`)
	s.v4Full, s.v4FullSum, s.v4FullOK = framework.HistogramSummaryOf(page, "kubeproxy_sync_full_proxy_rules_duration_seconds", `ip_family="IPv4"`)
	for _, h := range []struct {
		name   string
		n, sum float64
	}{{"sync_proxy_rules", s.all, s.allSum}, {"sync_full_proxy_rules", s.full, s.fullSum}, {"sync_partial_proxy_rules", s.partial, s.partSum}, {"ipvs_resync_read (beside the sync loop)", s.reads, s.readSum}} {
		mean := 0.0
		if h.n > 0 {
			mean = h.sum / h.n
		}
		parts = append(parts, fmt.Sprintf("%s %.0f syncs, total %.3f s, mean %.1f ms", h.name, h.n, h.sum, mean*1000))
	}
	// The sums above are over both families; a family with nothing to program must
	// show apart.
	for _, fam := range []string{"IPv4", "IPv6"} {
		label := `ip_family="` + fam + `"`
		n, sum, _ := framework.HistogramSummaryOf(page, "kubeproxy_sync_proxy_rules_duration_seconds", label)
		fn, fsum, _ := framework.HistogramSummaryOf(page, "kubeproxy_sync_full_proxy_rules_duration_seconds", label)
		parts = append(parts, fmt.Sprintf("%s: %.0f syncs %.3f s, of which %.0f full %.3f s", fam, n, sum, fn, fsum))
	}
	return s, strings.Join(parts, "; ")
}

// fullSyncs returns the count and total seconds of full syncs: upstream's
// ipvs proxier has no full-sync histogram because every sync it makes is one.
func (s scaleSyncs) fullSyncs() (float64, float64) {
	if s.v4FullOK {
		return s.v4Full, s.v4FullSum
	}
	if s.v4OK && !s.fullOK {
		return s.v4, s.v4Sum
	}
	if s.fullOK {
		return s.full, s.fullSum
	}
	return s.all, s.allSum
}

// scaleWaitResult is what an in-VM e2e-ipvswait printed, with the host time
// its answer came back.
type scaleWaitResult struct {
	out string
	err error
	at  time.Time
}

// scaleVMWait runs e2e-ipvswait in the VM in the background; it creates
// marker once it polls. Its result arrives on the channel.
func scaleVMWait(ctx context.Context, marker string, args ...string) <-chan scaleWaitResult {
	ch := make(chan scaleWaitResult, 1)
	go func() {
		r, err := vm.Exec(ctx, append([]string{scaleWaiter, "-ready", marker}, args...)...)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("e2e-ipvswait exited %d: %s", r.ExitCode, strings.TrimSpace(r.Stderr))
		}
		ch <- scaleWaitResult{out: r.Stdout, err: err, at: time.Now()}
	}()
	return ch
}

// scaleWaitLines returns e2e-ipvswait's lines starting with word, split.
func scaleWaitLines(out, word string) [][]string {
	var res [][]string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == word {
			res = append(res, f[1:])
		}
	}
	return res
}

// scalePolls parses e2e-ipvswait's "polls N MS" line.
func scalePolls(out string) (polls, elapsedMs int) {
	for _, f := range scaleWaitLines(out, "polls") {
		if len(f) == 2 {
			polls, _ = strconv.Atoi(f[0])
			elapsedMs, _ = strconv.Atoi(f[1])
		}
	}
	return polls, elapsedMs
}

// scaleWaitMarker waits until an e2e-ipvswait has created its marker and
// returns the host time it saw it.
func scaleWaitMarker(t *testing.T, ctx context.Context, marker string) time.Time {
	t.Helper()
	err := framework.Eventually(ctx, 60*time.Second, 20*time.Millisecond, func(ctx context.Context) error {
		r, err := vm.Exec(ctx, "test", "-e", marker)
		if err != nil {
			return framework.StopTrying(err)
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("the in-VM wait loop has not started (no %s)", marker)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// scaleFigures are one kube-proxy's results.
type scaleFigures struct {
	name string
	// start-up, from starting the process (host clock)
	startAll  time.Duration            // IPVS, every watched set and iptables
	startIPVS time.Duration            // every virtual server with its real servers
	startSets map[string]time.Duration // each watched set complete
	startIPT  time.Duration            // the KUBE-CLUSTER-IP match-set rule in nat
	firstSync string                   // the daemon's view after start-up
	// full resyncs while the changes ran (mean), and how many
	fullMean     time.Duration
	fullCount    int
	lat          []time.Duration // one-endpoint changes, API write to IPVS
	rss, hwm     float64         // MiB at the end
	cpu          scaleCPU        // the daemon's CPU time from its start to everything programmed
	startFull    time.Duration   // the start-up full sync (IPv4) in the daemon's histogram
	fullHow      string          // how the full resync figure was taken
	rulesBackend string          // ours' rules backend, "" for upstream
	// changesNotAfter is the change bound when a change of upstream's did not land
	// by it (the changes stopped there).
	changesNotAfter time.Duration
	// unfinished is the program timeout when upstream had not programmed everything
	// by then: its start-up figures still zero are "more than unfinished", and it
	// has no change or resync figures (it was still in its first sync).
	unfinished time.Duration
}

// scaleWatchedSets are the sets whose completion the start-up waits for, with
// the members nsvc Services x endpoints make at least: ipsets, or with the
// nftables rules backend the same sets of its table.
func scaleWatchedSets(nsvc int, nft bool) []struct {
	name string
	want int
} {
	if nft {
		return []struct {
			name string
			want int
		}{{"nft:ip-cluster-ip", nsvc}, {"nft:ip-loop-back", nsvc * scaleEndpoints}}
	}
	return []struct {
		name string
		want int
	}{{"KUBE-CLUSTER-IP", nsvc}, {"KUBE-LOOP-BACK", nsvc * scaleEndpoints}}
}

const scaleIPTablesText = "--match-set KUBE-CLUSTER-IP dst,dst"

// TestScaleVM: Services x 4 endpoints written to the apiserver, then each
// kube-proxy of KPI_SCALE_PROXIES started in the VM in turn: the time until
// IPVS, the ipsets and iptables hold all of them; then one-endpoint changes,
// each timed from the API write until IPVS holds the new real server; the
// full resyncs; the memory. With two kube-proxies, a side-by-side table.
func TestScaleVM(t *testing.T) {
	ctx := context.Background()
	names, err := vmKubeProxyNames()
	if err != nil {
		t.Fatal(err)
	}
	nsvc := 1000
	if v := os.Getenv("KPI_SCALE_SERVICES"); v != "" {
		n, err := strconv.Atoi(v)
		// The Service addresses must fit the apiserver's range (framework.ControlPlane):
		// a /16 unless KPI_E2E_SERVICE_CIDR widens it.
		_, cidr, cerr := net.ParseCIDR(framework.ServiceRangeIPv4())
		limit := 60000
		if cerr == nil {
			if ones, bits := cidr.Mask.Size(); ones < 16 {
				limit = (1 << (bits - ones)) - 5536
			}
		}
		if err != nil || n < 10 || n > limit {
			t.Fatalf("KPI_SCALE_SERVICES=%q: want a number from 10 to %d (the apiserver's Service range is %s; KPI_E2E_SERVICE_CIDR=10.96.0.0/12 allows more)", v, limit, framework.ServiceRangeIPv4())
		}
		nsvc = n
	}
	// More than scaleSeedAbove Services are seeded into etcd (framework.BulkSeed)
	// unless KPI_SCALE_SEED=api; KPI_SCALE_SEED=etcd seeds any count.
	seed := nsvc > scaleSeedAbove
	switch v := os.Getenv("KPI_SCALE_SEED"); v {
	case "":
	case "etcd", "api":
		seed = v == "etcd"
	default:
		t.Fatalf("KPI_SCALE_SEED=%q: want etcd (seed the objects into etcd) or api (create them through the API)", v)
	}
	if v := os.Getenv("KPI_SCALE_ENDPOINTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 20 {
			t.Fatalf("KPI_SCALE_ENDPOINTS=%q: want a number from 1 to 20", v)
		}
		scaleEndpoints = n
	}
	rulesBackend := os.Getenv("KPI_SCALE_RULES_BACKEND") // ours only
	if rulesBackend != "" && rulesBackend != "iptables" && rulesBackend != "nftables" {
		t.Fatalf("KPI_SCALE_RULES_BACKEND=%q: want iptables or nftables", rulesBackend)
	}
	nchanges := 10
	if v := os.Getenv("KPI_SCALE_CHANGES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 || n > nsvc {
			t.Fatalf("KPI_SCALE_CHANGES=%q: want 1-200 (and at most the Services)", v)
		}
		nchanges = n
	}
	if v := os.Getenv("KPI_SCALE_CHANGE_GAP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("KPI_SCALE_CHANGE_GAP=%q: want a duration", v)
		}
		scaleChangeGap = d
	}
	changeMax, changeP99, resyncMax := time.Second, time.Duration(0), 2*time.Second
	for env, bound := range map[string]*time.Duration{"KPI_SCALE_CHANGE_MAX": &changeMax, "KPI_SCALE_CHANGE_P99": &changeP99, "KPI_SCALE_RESYNC_MAX": &resyncMax} {
		if v := os.Getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				t.Fatalf("%s=%q: want a duration (0: no bound)", env, v)
			}
			*bound = d
		}
	}
	config := framework.KubeProxyConfig("")
	syncPeriod := "10s"
	if v := os.Getenv("KPI_SCALE_SYNC_PERIOD"); v != "" {
		if _, err := time.ParseDuration(v); err != nil || !strings.Contains(config, "  syncPeriod: 10s\n") {
			t.Fatalf("KPI_SCALE_SYNC_PERIOD=%q: want a duration (and a config with syncPeriod: 10s to replace)", v)
		}
		config = strings.Replace(config, "  syncPeriod: 10s\n", "  syncPeriod: "+v+"\n", 1)
		syncPeriod = v
	}
	if node.KubeProxyRunning(ctx) {
		t.Fatal("a kube-proxy is already running in the VM: TestScaleVM starts its own and must run alone (-run TestScaleVM)")
	}
	// The in-VM poller: one process polling netlink, as a shell loop around
	// ipvsadm costs ~300 ms per iteration under TCG.
	waiter := filepath.Join(t.TempDir(), "e2e-ipvswait")
	build := exec.CommandContext(ctx, "go", "build", "-o", waiter, "./test/e2e/cmd/e2e-ipvswait")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building e2e-ipvswait: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(waiter)
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.WriteFile(ctx, scaleWaiter, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	scaleWaiterBin = bin
	load0, _ := os.ReadFile("/proc/loadavg")
	loadText := func(b []byte) string { return strings.Join(strings.Fields(string(b))[:3], " ") }
	cpu, _ := vm.Sh(ctx, "awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo; nproc; awk '/^MemTotal/ {print int($2/1024)}' /proc/meminfo; uname -r")
	cpuf := strings.Split(strings.TrimSpace(cpu), "\n")
	for len(cpuf) < 4 {
		cpuf = append(cpuf, "?")
	}
	accel := "kvm"
	if strings.Contains(cpuf[0], "TCG") {
		accel = "tcg"
	}
	vmText := fmt.Sprintf("accel %s, %s vCPUs, %s MiB, kernel %s", accel, cpuf[1], cpuf[2], cpuf[3])

	// No-op round trip host -> agent -> host: the resolution of every timing.
	var rtts []time.Duration
	for i := 0; i < 7; i++ {
		s := time.Now()
		if _, err := vm.Exec(ctx, "true"); err != nil {
			t.Fatal(err)
		}
		rtts = append(rtts, time.Since(s))
	}
	rtt := scaleMedian(rtts)

	// The objects, before any kube-proxy runs.
	bulk, err := cp.BulkClient()
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.CreateNamespace(ctx, bulk, scaleNS); err != nil {
		t.Fatal(err)
	}
	eps := func(i int) []framework.Endpoint {
		eps := make([]framework.Endpoint, scaleEndpoints)
		for j := range eps {
			eps[j] = framework.Endpoint{PodName: fmt.Sprintf("s-%d-%d", i, j), IP: scaleEndpointIP(i, j)}
		}
		return eps
	}
	s := time.Now()
	var svcs []framework.BulkService
	if seed {
		// No cleanup: deleting a Service costs the allocator a list of every
		// IPAddress too (O(N^2) for all of them), and the control plane is
		// TestMain's, stopped and removed when the run ends (TestScaleVM runs
		// alone).
		svcs, err = framework.BulkSeed(ctx, cp, bulk, scaleNS, "s", nsvc, eps)
	} else {
		t.Cleanup(func() {
			s := time.Now()
			if err := framework.BulkDelete(context.Background(), bulk, scaleNS, scaleWorkers); err != nil {
				t.Errorf("deleting the scale objects: %v", err)
			}
			logf("scale objects deleted in %s", scaleSecs(time.Since(s)))
		})
		svcs, err = framework.BulkCreate(ctx, bulk, scaleNS, "s", nsvc, scaleWorkers, eps)
	}
	if err != nil {
		t.Fatal(err)
	}
	created := time.Since(s)
	objectsHow := fmt.Sprintf("created through the API in %s (%d client goroutines, QPS 500)", scaleSecs(created), scaleWorkers)
	if seed {
		objectsHow = fmt.Sprintf("seeded into etcd by etcd-seed, not created through the API (framework.BulkSeed: stored as the apiserver stores them, with their IPAddresses, bypassing its O(N^2) ClusterIP allocator), all listed by the apiserver after %s", scaleSecs(created))
	}
	logf("%d Services and %d EndpointSlices %s", nsvc, nsvc, objectsHow)
	scaleResult("binary: %s", binaryNote)
	scaleResult("machine: host %d cores (%s), load average %s at start", runtime.NumCPU(), scaleHostCPU(),
		strings.Join(strings.Fields(string(load0))[:3], " "))
	scaleResult("VM: accel %s (cpu %q), %s vCPUs, %s MiB, kernel %s", accel, cpuf[0], cpuf[1], cpuf[2], cpuf[3])
	scaleResult("objects: %d ClusterIP Services (1 TCP port) x %d endpoints on this node, one EndpointSlice each, %s, before any kube-proxy started",
		nsvc, scaleEndpoints, objectsHow)
	scaleResult("config: framework.KubeProxyConfig(\"\"): mode ipvs, scheduler rr, syncPeriod %s, minSyncPeriod 0s; the same file for every kube-proxy (upstream-nftables: mode nftables and an nftables section with the same periods)", syncPeriod)
	if os.Getenv("KPI_SCALE_DISABLE_COMPRESSION") == "1" {
		scaleResult("kubeconfig: disable-compression: true for every kube-proxy (KPI_SCALE_DISABLE_COMPRESSION=1): the apiserver sends lists and watches without gzip")
	}
	scaleResult("resolution: a no-op agent exec round trip takes %s (median of %d); IPVS polled every %s at start-up and %s per change, ipsets and iptables every %s, each stretched to 3x the poller's last read of it",
		scaleMs(rtt), len(rtts), scaleStartPoll, scaleChangePoll, scaleSlowPoll)

	scaleProfileSecs = scaleProfileSeconds(t)
	var all []*scaleFigures
	for r, name := range names {
		p := &vmKubeProxy{name: name, bin: "/kpi/bin/kube-proxy", log: "/tmp/scale-kube-proxy-" + name + ".log",
			disableCompression: os.Getenv("KPI_SCALE_DISABLE_COMPRESSION") == "1"}
		cfg := config
		base, args := splitStartSuffix(name)
		p.args = args
		switch base {
		case colUpstream:
			p.bin = upstreamKubeProxyBin
		case colUpstreamNFT:
			p.bin = upstreamKubeProxyBin
			cfg = upstreamNFTConfig(config)
		case colOursNFT:
			p.rulesBackend = "nftables"
		default:
			p.rulesBackend = rulesBackend
		}
		if scaleProfileSecs > 0 {
			cfg = scaleProfileConfig(cfg)
		}
		scaleWaitTrash(t, name)
		all = append(all, scaleRunProxy(t, ctx, bulk, p, r, svcs, nchanges, cfg, syncPeriod))
		// A run stopped or failed later keeps the columns done so far.
		scaleWriteJSON(t, all, nil, nsvc, nchanges, vmText, loadText(load0)+" / (the run had not ended)")
	}
	// The kernel's own tools for the same content (KPI_SCALE_FLOOR=1), on the
	// clean node the last run left.
	var floor *scaleFloor
	if os.Getenv("KPI_SCALE_FLOOR") == "1" {
		scaleWaitTrash(t, "the tools' floor")
		fl := scaleRunFloor(t, ctx, nsvc)
		floor = &fl
		for _, tl := range fl.Tools {
			scaleResult("[floor] %s: %.1f s (user %.1f s, system %.1f s)", tl.Name, tl.Wall, tl.User, tl.Sys)
		}
	}
	load1, _ := os.ReadFile("/proc/loadavg")
	scaleResult("load average at the end %s", strings.Join(strings.Fields(string(load1))[:3], " "))
	if len(all) == 2 && all[1].name == colUpstream && all[0].name == colOurs {
		scaleCompare(all[1], all[0], nsvc, rulesBackend == "nftables")
	}
	scaleCompareAll(all, floor, nsvc)
	scaleWriteJSON(t, all, floor, nsvc, nchanges, vmText, loadText(load0)+" / "+loadText(load1))
	for _, f := range all {
		if isUpstream(f.name) || len(f.lat) == 0 {
			continue
		}
		if m := scaleMax(f.lat); changeMax > 0 && m > changeMax {
			t.Errorf("%s: a one-endpoint change took %s, over the bound of %s (KPI_SCALE_CHANGE_MAX)", f.name, scaleMs(m), scaleMs(changeMax))
		}
		if p99 := scalePercentile(f.lat, 99); changeP99 > 0 && p99 > changeP99 {
			t.Errorf("%s: one-endpoint changes p99 %s, over the bound of %s (KPI_SCALE_CHANGE_P99)", f.name, scaleMs(p99), scaleMs(changeP99))
		}
		if resyncMax > 0 && f.fullMean > resyncMax {
			t.Errorf("%s: periodic full resyncs took %s in the sync loop (mean of %d), over the bound of %s (KPI_SCALE_RESYNC_MAX)", f.name, scaleMs(f.fullMean), f.fullCount, scaleMs(resyncMax))
		}
	}
}

// scaleChangeGap is the pause between two one-endpoint changes (KPI_SCALE_CHANGE_GAP).
var scaleChangeGap time.Duration

// IPVS keeps a deleted real server in its namespace's trash until a timer, every
// 60 s, finds it idle for 120 s (ip_vs_dest_trash_expire), and the kernel looks
// every real server added meanwhile up in that whole list first
// (ip_vs_trash_get_dest). Right after a column's --cleanup the trash holds all of
// that column's real servers, so the next column (or the tools' floor) would pay
// for the previous one: at 10,000 x 4 its ipvs phase took 30 s instead of 2-4 s.
// Each one waits until the trash is empty: scaleTrashWait (KPI_SCALE_TRASH_WAIT,
// 0 for none) after the last --cleanup.
var (
	scaleTrashWait    = 200 * time.Second
	scaleTrashEmptyAt time.Time
)

// scaleWaitTrash sleeps until the IPVS trash of the last --cleanup is empty.
func scaleWaitTrash(t *testing.T, next string) {
	t.Helper()
	if v := os.Getenv("KPI_SCALE_TRASH_WAIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KPI_SCALE_TRASH_WAIT=%q: %v", v, err)
		}
		scaleTrashWait = d
	}
	d := time.Until(scaleTrashEmptyAt)
	if scaleTrashEmptyAt.IsZero() || scaleTrashWait <= 0 || d <= 0 {
		return
	}
	if d > scaleTrashWait {
		d = scaleTrashWait
	}
	logf("%s waits %s for the IPVS real-server trash of the last --cleanup to empty (KPI_SCALE_TRASH_WAIT)", next, scaleSecs(d))
	time.Sleep(d)
}

func scaleHostCPU() string {
	host, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(host), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// scaleRunProxy measures one kube-proxy on the objects as they are now; run
// r (0, 1) picks the addresses its changes use. It leaves the node clean
// (the proxy stopped, our --cleanup run, which also removes what upstream
// programs).
func scaleRunProxy(t *testing.T, ctx context.Context, client kubernetes.Interface, p *vmKubeProxy, r int, svcs []framework.BulkService, nchanges int, config, syncPeriod string) *scaleFigures {
	t.Helper()
	nsvc := len(svcs)
	f := &scaleFigures{name: p.name, startSets: map[string]time.Duration{}, rulesBackend: p.rulesBackend}
	upNFT := p.name == colUpstreamNFT
	if !isUpstream(p.name) && f.rulesBackend == "" {
		f.rulesBackend = "iptables"
	}
	say := func(format string, args ...any) { scaleResult("["+p.name+"] "+format, args...) }

	// What IPVS must hold: every Service's current endpoints.
	var want strings.Builder
	for _, b := range svcs {
		want.WriteString("TCP/" + b.VIP())
		for _, ep := range b.Slice.Endpoints {
			want.WriteString(" " + ep.Addresses[0] + ":8080")
		}
		want.WriteString("\n")
	}
	scaleWant = []byte(want.String())
	if err := vm.WriteFile(ctx, scaleWantPath, scaleWant, 0o644); err != nil {
		t.Fatal(err)
	}
	nft := p.rulesBackend == "nftables"
	var setsArg []string
	for _, s := range scaleWatchedSets(nsvc, nft) {
		setsArg = append(setsArg, fmt.Sprintf("%s=%d", s.name, s.want))
	}
	iptText := scaleIPTablesText
	if nft {
		iptText = "" // no iptables rule to wait for: the table's sets are the rules' part
	}
	allArg := []string{"-all", scaleWantPath}
	if upNFT {
		// Upstream's nftables mode writes its whole ruleset in one transaction: the
		// service-ips map complete is everything there (checked below).
		allArg, iptText = nil, ""
		setsArg = []string{fmt.Sprintf("nftset:%s/service-ips=%d", upstreamNFTTable, nsvc)}
	}
	programTimeout := scaleProgramTimeout
	if v := os.Getenv("KPI_SCALE_PROGRAM_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KPI_SCALE_PROGRAM_TIMEOUT=%q: %v", v, err)
		}
		programTimeout = d
	}
	startMarker := fmt.Sprintf("/tmp/scale-start-%s.started", p.name)
	wctx, cancel := context.WithTimeout(ctx, programTimeout+30*time.Second)
	defer cancel()
	done := scaleVMWait(wctx, startMarker, append(allArg, "-cpu-exe", p.bin,
		"-interval", scaleStartPoll.String(), "-timeout", programTimeout.String(),
		"-sets", strings.Join(setsArg, ","), "-iptables", iptText, "-slow-interval", scaleSlowPoll.String())...)
	markerSeen := scaleWaitMarker(t, ctx, startMarker)

	var prof *scaleProfiling
	cleaned := false
	cleanup := func() {
		if cleaned {
			return
		}
		cleaned = true
		ctx := context.Background()
		if t.Failed() {
			t.Logf("%s kube-proxy log tail:\n%s", p.name, p.logTail(ctx, 40))
			out, _ := vm.Sh(ctx, "ipvsadm -Ln | awk '$1==\"TCP\"||$1==\"UDP\" {v++} $1==\"->\" {r++} END {print v, \"virtual servers,\", r-1, \"real servers\"}'")
			t.Logf("IPVS in the VM: %s", out)
		}
		if dir := os.Getenv("KPI_SCALE_LOG_DIR"); dir != "" {
			// The daemon's whole log, for the sync timings it prints.
			out, err := vm.Sh(ctx, "cat "+p.log)
			if err == nil {
				err = os.MkdirAll(dir, 0o755)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, "kube-proxy-"+p.name+".log"), []byte(out), 0o644)
			}
			if err != nil {
				t.Errorf("keeping the %s kube-proxy log in KPI_SCALE_LOG_DIR=%s: %v", p.name, dir, err)
			}
		}
		if prof != nil {
			if err := prof.keep(ctx, scaleProfileSecs); err != nil {
				t.Errorf("KPI_SCALE_PROFILE: %v", err)
			}
		}
		if err := p.stop(ctx); err != nil {
			t.Errorf("stopping %s kube-proxy: %v", p.name, err)
		}
		// What the daemon started may outlive it (an nft or ipset child in the
		// middle of a large write): the cleanup and the next column wait for it.
		scaleWaitQuiet(t, ctx, p.name+" stopped")
		// Leave the node as the next run and the other scenarios expect it:
		// nothing (our --cleanup also removes upstream's ipvs-mode state).
		s := time.Now()
		// Ours' config: the file the daemon ran with may be upstream's nftables mode.
		if err := vm.WriteFile(ctx, "/tmp/scale-cleanup-config.yaml", []byte(framework.KubeProxyConfig("")), 0o644); err != nil {
			t.Errorf("writing the cleanup config: %v", err)
		}
		// Removing a table of 50,000 Services takes minutes under TCG: the
		// cleanup gets scaleQuietMax, not Exec's default 2 minutes.
		cctx, ccancel := context.WithTimeout(ctx, scaleQuietMax)
		r, err := vm.Exec(cctx, "/kpi/bin/kube-proxy", "--cleanup", "--config=/tmp/scale-cleanup-config.yaml", "--v=0")
		ccancel()
		if err != nil || r.ExitCode != 0 {
			t.Errorf("kube-proxy --cleanup: %v exit %d %s", err, r.ExitCode, r.Stderr)
		}
		logf("[%s] kube-proxy --cleanup took %s", p.name, scaleSecs(time.Since(s)))
		scaleWaitQuiet(t, ctx, p.name+" --cleanup")
		scaleTrashEmptyAt = time.Now().Add(scaleTrashWait)
		if os.Getenv("KPI_SCALE_REBOOT") == "1" { // the reboot path, tried at any size
			if err := scaleReboot(ctx); err != nil {
				t.Fatalf("KPI_SCALE_REBOOT: %v", err)
			}
		}
	}
	t.Cleanup(cleanup)
	defer cleanup()

	t0 := time.Now()
	if err := p.start(ctx, config); err != nil {
		t.Fatal(err)
	}
	if scaleProfileSecs > 0 {
		var err error
		if prof, err = scaleStartProfile(ctx, p.name, scaleProfileSecs); err != nil {
			t.Fatal(err)
		}
	}
	var res scaleWaitResult
	alive := time.NewTicker(5 * time.Second)
	defer alive.Stop()
wait:
	for {
		select {
		case res = <-done:
			break wait
		case <-alive.C:
			if !p.running(ctx) {
				cancel()
				r := <-done
				t.Fatalf("%s kube-proxy exited during the start-up (dmesg: %s); the poller had printed:\n%s\nlog tail:\n%s",
					p.name, scaleDmesgTail(ctx), r.out, p.logTail(ctx, 40))
			}
		}
	}
	f.startAll = res.at.Sub(t0)
	f.cpu = scaleParseCPU(res.out)
	if res.err != nil && (!isUpstream(p.name) || !p.running(ctx)) {
		t.Fatalf("%s: not everything programmed %s after kube-proxy started: %v\n%s", p.name, programTimeout, res.err, res.out)
	}
	// The poller's clock started a little before kube-proxy: its times minus
	// that head start are times since kube-proxy started.
	head := t0.Sub(markerSeen)
	since := func(ms string) time.Duration {
		n, _ := strconv.Atoi(ms)
		return time.Duration(n)*time.Millisecond - head
	}
	var progress []string
	for _, l := range scaleWaitLines(res.out, "progress") {
		progress = append(progress, fmt.Sprintf("%s: %s", scaleSecs(since(l[0])), l[1]))
	}
	for _, l := range scaleWaitLines(res.out, "ipvs") {
		f.startIPVS = since(l[0])
	}
	for _, l := range scaleWaitLines(res.out, "set") {
		if len(l) >= 2 {
			f.startSets[l[0]] = since(l[1])
		}
	}
	for _, l := range scaleWaitLines(res.out, "iptables") {
		f.startIPT = since(l[0])
	}
	if res.err != nil {
		// Upstream at thousands of Services under TCG is still in its first sync
		// when the time is up: it is measured as far as it got, and what it lacks
		// is reported as a lower bound instead of failing the comparison.
		f.startAll, f.unfinished = 0, programTimeout
		f.rss, f.hwm = p.memory(ctx)
		var had []string
		if f.startIPVS > 0 {
			had = append(had, "IPVS complete at "+scaleSecs(f.startIPVS))
		}
		for name, d := range f.startSets {
			if d > 0 {
				had = append(had, fmt.Sprintf("%s complete at %s", name, scaleSecs(d)))
			}
		}
		if f.startIPT > 0 {
			had = append(had, "the iptables rule at "+scaleSecs(f.startIPT))
		}
		if len(had) == 0 {
			had = []string{"nothing complete"}
		}
		if len(progress) > 8 { // upstream programs a few Services a second
			progress = append(append(progress[:3:3], "..."), progress[len(progress)-3:]...)
		}
		say("NOT everything programmed %s after the start (%v); it had: %s; progress: %s; no changes or resyncs measured (still in its first sync); memory then: RSS %.0f MiB, peak %.0f MiB; CPU by then: %s",
			programTimeout, res.err, strings.Join(had, ", "), strings.Join(progress, "; "), f.rss, f.hwm, f.cpu)
		return f
	}
	afterStart, afterStartText := scaleReadSyncs(t, ctx)
	if afterStart.fullOK {
		// Ours runs both families; the one with nothing to program may end its first
		// full sync after the poller saw everything, and a start-up sync must not be
		// counted as a periodic resync below.
		err := framework.Eventually(ctx, 3*time.Minute, time.Second, func(ctx context.Context) error {
			afterStart, afterStartText = scaleReadSyncs(t, ctx)
			if afterStart.full < 2 {
				return fmt.Errorf("%.0f full syncs recorded, want both families' first (%s)", afterStart.full, afterStartText)
			}
			return nil
		})
		if err != nil {
			logf("[%s] %v: the resync figures may include a start-up sync", p.name, err)
		}
	}
	f.firstSync = afterStartText
	_, sum := afterStart.fullSyncs() // upstream's ipvs mode: every sync is a full one
	f.startFull = time.Duration(sum * float64(time.Second))

	// Exactly what the API says, for every Service.
	var table string
	if upNFT {
		// Every Service's chain, by name, in upstream's table, and for a sample of
		// them the endpoints its rule DNATs to (read over netlink).
		r, err := vm.Exec(ctx, scaleWaiter, "-list-chains", upstreamNFTTable, "-prefix", "service-")
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("e2e-ipvswait -list-chains exited %d: %s", r.ExitCode, r.Stderr)
		}
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, l := range scaleWaitLines(r.Stdout, "chain") {
			have[l[0]] = true
		}
		var missing, sample []string
		want := map[string]string{}
		for i, b := range svcs {
			c := upstreamNFTServiceChain(scaleNS, b.Service.Name, "tcp", "http")
			if !have[c] {
				missing = append(missing, c)
			}
			if i%max(1, nsvc/50) == 0 {
				sample = append(sample, c)
				var eps []string
				for _, ep := range b.Slice.Endpoints {
					eps = append(eps, ep.Addresses[0])
				}
				sort.Strings(eps)
				want[c] = strings.Join(eps, " ")
			}
		}
		if len(missing) > 0 {
			t.Fatalf("%s: %d of %d Service chains missing in table %s, e.g. %q (it has %d service- chains)", p.name, len(missing), nsvc, upstreamNFTTable,
				missing[:min(3, len(missing))], len(have))
		}
		r, err = vm.Exec(ctx, append([]string{scaleWaiter, "-list-chains", upstreamNFTTable, "-dnats"}, sample...)...)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("e2e-ipvswait -dnats exited %d: %s", r.ExitCode, r.Stderr)
		}
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, l := range scaleWaitLines(r.Stdout, "dnat") {
			ips := append([]string(nil), l[1:]...)
			sort.Strings(ips)
			if strings.Join(ips, " ") != want[l[0]] {
				t.Fatalf("%s: chain %s DNATs to %q, want %q", p.name, l[0], ips, want[l[0]])
			}
			got++
		}
		if got != len(sample) {
			t.Fatalf("%s: read the DNAT targets of %d of %d sampled Service chains", p.name, got, len(sample))
		}
	} else {
		var err error
		if table, err = vm.Sh(ctx, "ipvsadm -Ln"); err != nil {
			t.Fatal(err)
		}
	}
	ipvs := framework.ParseIPVSTable(table)
	var wrong []string
	for _, b := range svcs {
		if upNFT {
			break
		}
		var want []string
		for _, ep := range b.Slice.Endpoints {
			want = append(want, ep.Addresses[0]+":8080 Masq 1")
		}
		sort.Strings(want)
		if got := ipvs["TCP "+b.VIP()]; strings.Join(got, ",") != strings.Join(want, ",") {
			wrong = append(wrong, fmt.Sprintf("%s %s: %q, want %q", b.Service.Name, b.VIP(), got, want))
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("%s: %d of %d Services wrong in IPVS, e.g.:\n%s", p.name, len(wrong), nsvc, strings.Join(wrong[:min(5, len(wrong))], "\n"))
	}
	var setTimes []string
	for _, s := range scaleWatchedSets(nsvc, nft) {
		setTimes = append(setTimes, fmt.Sprintf("%s (>= %d members) %s", s.name, s.want, scaleSecs(f.startSets[s.name])))
	}
	iptFigure := fmt.Sprintf("iptables (nat %q) %s", scaleIPTablesText, scaleSecs(f.startIPT))
	if nft {
		iptFigure = "rules backend nftables (no iptables rule)"
	}
	if upNFT {
		setTimes = []string{fmt.Sprintf("map %s/service-ips (>= %d elements) %s, every Service chain there", upstreamNFTTable, nsvc, scaleSecs(f.startSets[strings.TrimSuffix(setsArg[0], fmt.Sprintf("=%d", nsvc))]))}
		iptFigure = "no IPVS (upstream's nftables mode)"
	}
	ipvsFigure := fmt.Sprintf("IPVS all %d virtual servers x %d real servers %s; ", nsvc, scaleEndpoints, scaleSecs(f.startIPVS))
	if upNFT {
		ipvsFigure = ""
	}
	say("start to all programmed: %s (host clock, kube-proxy start to the poller's answer); %s%s; %s",
		scaleSecs(f.startAll), ipvsFigure, strings.Join(setTimes, "; "), iptFigure)
	say("  IPVS progression (since kube-proxy start: virtual servers holding exactly their real servers): %s", strings.Join(progress, "; "))
	say("  daemon's view after start-up: %s", afterStartText)
	say("  CPU time from the start to everything programmed: %s; system CPU is %.0f %% of the start-up's wall time", f.cpu, 100*f.cpu.sys()/f.startAll.Seconds())
	if v := scaleVMCPU(res.out); v != "" {
		say("  meanwhile (poller start to end): %s", v)
	}

	// Single-endpoint changes, spread over the Services.
	var writes []time.Duration
	var detail []string
	iters, loopms := 0, 0
	for n := 0; n < nchanges; n++ {
		i := n*(nsvc/nchanges) + nsvc/(2*nchanges)
		b := &svcs[i]
		newIP := scaleChangeIP(r, n)
		marker := fmt.Sprintf("/tmp/scale-change-%s-%d.started", p.name, n)
		cctx, ccancel := context.WithTimeout(ctx, scaleChangeTimeout+10*time.Second)
		waitArgs := []string{"-vs", "TCP/" + b.VIP(), "-rs", newIP + ":8080"}
		if upNFT {
			waitArgs = []string{"-nft-dnat", upstreamNFTTable + "/" + upstreamNFTServiceChain(scaleNS, b.Service.Name, "tcp", "http") + "=" + newIP}
		}
		done := scaleVMWait(cctx, marker, append(waitArgs,
			"-interval", scaleChangePoll.String(), "-timeout", scaleChangeTimeout.String())...)
		scaleWaitMarker(t, ctx, marker)
		slice := b.Slice.DeepCopy()
		old := slice.Endpoints[0].Addresses[0]
		slice.Endpoints[0] = discoveryv1.Endpoint{
			Addresses:  []string{newIP},
			Conditions: slice.Endpoints[0].Conditions,
			NodeName:   slice.Endpoints[0].NodeName,
			TargetRef:  slice.Endpoints[0].TargetRef,
		}
		t0 := time.Now()
		updated, err := client.DiscoveryV1().EndpointSlices(scaleNS).Update(ctx, slice, metav1.UpdateOptions{})
		tw := time.Since(t0)
		if err != nil {
			ccancel()
			t.Fatalf("updating EndpointSlice %s: %v", slice.Name, err)
		}
		b.Slice = updated
		res := <-done
		ccancel()
		if res.err != nil && isUpstream(p.name) && p.running(ctx) {
			// Upstream measured as far as it gets: this change and the ones after it
			// are reported as not done by the bound.
			f.changesNotAfter = scaleChangeTimeout
			detail = append(detail, fmt.Sprintf("%s (%s -> %s) NOT after %s", b.Service.Name, old, newIP, scaleSecs(scaleChangeTimeout)))
			say("change %d not in the kernel %s after the API write: no further changes measured (%v)", n, scaleSecs(scaleChangeTimeout), res.err)
			break
		}
		if res.err != nil {
			t.Fatalf("%s: change %d (%s %s: %s -> %s) not in the kernel %s after the API write: %v", p.name, n, b.Service.Name, b.VIP(), old, newIP, scaleChangeTimeout, res.err)
		}
		d := res.at.Sub(t0)
		f.lat = append(f.lat, d)
		writes = append(writes, tw)
		a, m := scalePolls(res.out)
		iters += a
		loopms += m
		detail = append(detail, fmt.Sprintf("%s (%s -> %s) %s", b.Service.Name, old, newIP, scaleMs(d)))
		time.Sleep(scaleChangeGap)
	}
	// At least one periodic full resync after the start-up one, to time it.
	period, _ := time.ParseDuration(syncPeriod)
	var afterChanges scaleSyncs
	var afterChangesText string
	f.fullHow = "periodic full resyncs (every syncPeriod " + syncPeriod + "), from the daemon's full-sync histogram"
	if !afterStart.fullOK {
		f.fullHow = "periodic syncs (every syncPeriod " + syncPeriod + "; each is a full one), from the daemon's sync histogram"
	}
	if upNFT {
		// Its periodic syncs are partial; the full one comes every hour. A change of
		// the node's topology labels runs the same full sync now.
		before, _, err := upstreamNFTFullSync(t, ctx, client, r)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		afterStart = before
		f.fullHow = "a full sync forced by a change of the node's zone label (it runs at start-up and every hour; its periodic syncs every " + syncPeriod + " are partial), from its full-sync histogram"
	}
	err := framework.Eventually(ctx, period+3*time.Minute, 2*time.Second, func(ctx context.Context) error {
		afterChanges, afterChangesText = scaleReadSyncs(t, ctx)
		n1, _ := afterStart.fullSyncs()
		if n2, _ := afterChanges.fullSyncs(); n2 <= n1 {
			return fmt.Errorf("no full resync since the start-up yet (%s)", afterChangesText)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	n1, s1 := afterStart.fullSyncs()
	n2, s2 := afterChanges.fullSyncs()
	f.fullCount = int(n2 - n1)
	f.fullMean = time.Duration((s2 - s1) / (n2 - n1) * float64(time.Second))
	if !p.running(ctx) {
		t.Fatalf("%s kube-proxy died during the run; log tail:\n%s", p.name, p.logTail(ctx, 40))
	}
	f.rss, f.hwm = p.memory(ctx)
	iterMs := 0.0
	if iters > 0 {
		iterMs = float64(loopms) / float64(iters)
	}
	say("one-endpoint change, API write to the kernel (%d changes, host clock): p50 %s, p99 %s, max %s (min %s); the API write alone: median %s, max %s; in-VM poll cycle %.1f ms",
		len(f.lat), scaleMs(scalePercentile(f.lat, 50)), scaleMs(scalePercentile(f.lat, 99)), scaleMs(scaleMax(f.lat)), scaleMs(scalePercentile(f.lat, 0)),
		scaleMs(scaleMedian(writes)), scaleMs(scaleMax(writes)), iterMs)
	say("  each: %s", strings.Join(detail, ", "))
	say("full resyncs after the start-up (daemon's histograms%s): %d, mean %s", map[bool]string{true: "", false: "; every upstream sync is a full one"}[afterChanges.fullOK], f.fullCount, scaleMs(f.fullMean))
	if n := afterChanges.reads - afterStart.reads; n > 0 {
		say("periodic resync reads beside the sync loop (changes do not wait for them): %.0f, mean %s", n, scaleMs(time.Duration((afterChanges.readSum-afterStart.readSum)/n*float64(time.Second))))
	}
	say("  daemon's view at the end: %s", afterChangesText)
	say("memory at the end: RSS %.0f MiB, peak RSS %.0f MiB", f.rss, f.hwm)
	return f
}

// scaleCompare prints the side-by-side table: upstream, ours, upstream/ours.
func scaleCompare(up, ours *scaleFigures, nsvc int, oursNFT bool) {
	row := func(figure string, u, o time.Duration) {
		ratio := "-"
		ut := scaleSecsOrMs(u)
		switch {
		case o > 0 && u > 0:
			ratio = fmt.Sprintf("%.1fx", float64(u)/float64(o))
		case o > 0 && up.unfinished > 0 && strings.HasPrefix(figure, "start"):
			ut = "not after " + scaleSecs(up.unfinished)
			ratio = fmt.Sprintf("> %.1fx", float64(up.unfinished)/float64(o))
		case up.unfinished > 0:
			ut = "not measured (in its first sync)"
		}
		fmt.Printf("SCALE-CMP: | %s | %s | %s | %s |\n", figure, ut, scaleSecsOrMs(o), ratio)
	}
	fmt.Println()
	fmt.Printf("SCALE-CMP: %d Services x %d endpoints, same VM, same objects, same config; ratio = upstream / ours\n", nsvc, scaleEndpoints)
	fmt.Println("SCALE-CMP: | figure | upstream v1.37.2 | ours | ratio |")
	fmt.Println("SCALE-CMP: | --- | --- | --- | --- |")
	row("start to all programmed (IPVS, ipsets, iptables)", up.startAll, ours.startAll)
	row("start to IPVS complete", up.startIPVS, ours.startIPVS)
	oursSets := scaleWatchedSets(nsvc, oursNFT)
	for i, s := range scaleWatchedSets(nsvc, false) {
		name := s.name
		if oursNFT {
			name += " / " + oursSets[i].name
		}
		row("start to "+name+" complete", up.startSets[s.name], ours.startSets[oursSets[i].name])
	}
	row("start to the iptables rules", up.startIPT, ours.startIPT)
	row(fmt.Sprintf("full resync (mean of %d / %d)", up.fullCount, ours.fullCount), up.fullMean, ours.fullMean)
	row(fmt.Sprintf("one-endpoint change p50 (%d changes)", len(ours.lat)), scalePercentile(up.lat, 50), scalePercentile(ours.lat, 50))
	row("one-endpoint change p99", scalePercentile(up.lat, 99), scalePercentile(ours.lat, 99))
	row("one-endpoint change max", scaleMax(up.lat), scaleMax(ours.lat))
	mem := func(figure string, u, o float64) {
		fmt.Printf("SCALE-CMP: | %s | %.0f MiB | %.0f MiB | %.1fx |\n", figure, u, o, u/o)
	}
	if up.unfinished > 0 {
		mem("RSS at the end (upstream: when its time was up)", up.rss, ours.rss)
		mem("peak RSS", up.hwm, ours.hwm)
		return
	}
	mem("RSS at the end", up.rss, ours.rss)
	mem("peak RSS", up.hwm, ours.hwm)
}

func scaleSecsOrMs(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if d < 10*time.Second {
		return scaleMs(d)
	}
	return scaleSecs(d)
}
