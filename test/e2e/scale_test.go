//go:build e2e && e2escale

// The scale run of issue 8 in the real-kernel VM (make bench, hack/bench.sh):
// not part of `make e2e` (build tag e2escale). Run it alone:
//
//	go test -tags e2e,e2escale -count=1 -v -timeout 60m -run TestScaleVM ./test/e2e/
//
// KPI_SCALE_SERVICES (default 1000, at most 4000) changes the Service count;
// KPI_SCALE_SYNC_PERIOD (e.g. 60s) replaces the ipvs.syncPeriod of
// framework.KubeProxyConfig (10s).
package e2e

import (
	"context"
	"fmt"
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

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

const (
	scaleNS        = "e2e-scale-vm"
	scaleEndpoints = 4
	scaleChanges   = 10
	scaleWorkers   = 8
	// Start-up: kube-proxy start until every Service is in IPVS.
	scaleProgramTimeout = 10 * time.Minute
	scaleStartPoll      = 200 * time.Millisecond // between two in-VM reads of every Service's real servers
	// One-endpoint changes: API write until the new real server is in IPVS.
	// Under TCG a full resync of 1,000 Services took 11-25 s (host load 3-5),
	// longer than syncPeriod 10s, and a change arriving during one waits for it
	// and may get a full sync of its own: up to ~50 s, hence 120 s.
	scaleChangeTimeout = 120 * time.Second
	scaleChangePoll    = 5 * time.Millisecond // between two in-VM reads of one virtual server
	// Endpoint k of the run (Service i, endpoint j: k = 4i+j) is
	// 10.244.(64+k/250).(1+k%250): 10.244.64.1 up to 10.244.127.250, a range
	// no other scenario uses.
	scaleWaiter = "/kpi/bin/e2e-ipvswait"
)

func scaleEndpointIP(i, j int) string {
	k := i*scaleEndpoints + j
	return fmt.Sprintf("10.244.%d.%d", 64+k/250, 1+k%250)
}

// scaleChangeIP is the address change n puts in place of an endpoint.
func scaleChangeIP(n int) string { return fmt.Sprintf("10.244.200.%d", n+1) }

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

// scaleMetrics reads the daemon's sync histograms in the VM.
func scaleMetrics(t *testing.T, ctx context.Context) string {
	t.Helper()
	page, err := vm.Sh(ctx, "timeout 20 wget -q -O - http://127.0.0.1:10249/metrics")
	if err != nil {
		t.Fatalf("reading kube-proxy's /metrics in the VM: %v", err)
	}
	var parts []string
	for _, h := range []string{"sync_proxy_rules", "sync_full_proxy_rules", "sync_partial_proxy_rules"} {
		n, sum, ok := framework.HistogramSummary(page, "kubeproxy_"+h+"_duration_seconds")
		if !ok {
			parts = append(parts, h+": absent")
			continue
		}
		mean := 0.0
		if n > 0 {
			mean = sum / n
		}
		parts = append(parts, fmt.Sprintf("%s %.0f syncs, total %.3f s, mean %.1f ms", h, n, sum, mean*1000))
	}
	return strings.Join(parts, "; ")
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

// scalePolls parses e2e-ipvswait's "polls N MS" line.
func scalePolls(out string) (polls, elapsedMs int) {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "polls" {
			polls, _ = strconv.Atoi(f[1])
			elapsedMs, _ = strconv.Atoi(f[2])
		}
	}
	return polls, elapsedMs
}

// scaleWaitMarker waits until an e2e-ipvswait has created its marker.
func scaleWaitMarker(t *testing.T, ctx context.Context, marker string) {
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
}

// TestScaleVM: 1,000 Services x 4 endpoints written to the apiserver, then
// our kube-proxy started in the VM: the time until the kernel's IPVS holds
// all of them; then 10 single-endpoint changes, each timed from the API
// write until IPVS holds the new real server.
func TestScaleVM(t *testing.T) {
	ctx := context.Background()
	nsvc := 1000
	if v := os.Getenv("KPI_SCALE_SERVICES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < scaleChanges || n > 4000 {
			t.Fatalf("KPI_SCALE_SERVICES=%q: want a number from %d to 4000", v, scaleChanges)
		}
		nsvc = n
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
	load0, _ := os.ReadFile("/proc/loadavg")
	cpu, _ := vm.Sh(ctx, "awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo; nproc; awk '/^MemTotal/ {print int($2/1024)}' /proc/meminfo; uname -r")
	cpuf := strings.Split(strings.TrimSpace(cpu), "\n")
	for len(cpuf) < 4 {
		cpuf = append(cpuf, "?")
	}
	accel := "kvm"
	if strings.Contains(cpuf[0], "TCG") {
		accel = "tcg"
	}

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
	t.Cleanup(func() {
		s := time.Now()
		if err := framework.BulkDelete(context.Background(), bulk, scaleNS, scaleWorkers); err != nil {
			t.Errorf("deleting the scale objects: %v", err)
		}
		logf("scale objects deleted in %s", scaleSecs(time.Since(s)))
	})
	s := time.Now()
	svcs, err := framework.BulkCreate(ctx, bulk, scaleNS, "s", nsvc, scaleWorkers, func(i int) []framework.Endpoint {
		eps := make([]framework.Endpoint, scaleEndpoints)
		for j := range eps {
			eps[j] = framework.Endpoint{PodName: fmt.Sprintf("s-%d-%d", i, j), IP: scaleEndpointIP(i, j)}
		}
		return eps
	})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Since(s)
	logf("%d Services and %d EndpointSlices created in %s", nsvc, nsvc, scaleSecs(created))

	// Start-up: the in-VM poller reads every Service's virtual server and
	// counts those holding exactly their 4 real servers; it prints a line
	// whenever the count changes.
	var want strings.Builder
	for i, b := range svcs {
		want.WriteString("TCP/" + b.VIP())
		for j := 0; j < scaleEndpoints; j++ {
			want.WriteString(" " + scaleEndpointIP(i, j) + ":8080")
		}
		want.WriteString("\n")
	}
	if err := vm.WriteFile(ctx, "/tmp/scale-want.txt", []byte(want.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	startMarker := "/tmp/scale-start.started"
	wctx, cancel := context.WithTimeout(ctx, scaleProgramTimeout+30*time.Second)
	defer cancel()
	done := scaleVMWait(wctx, startMarker, "-all", "/tmp/scale-want.txt",
		"-interval", scaleStartPoll.String(), "-timeout", scaleProgramTimeout.String())
	scaleWaitMarker(t, ctx, startMarker)

	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() {
			t.Logf("kube-proxy log tail:\n%s", node.KubeProxyLog(ctx, 40))
			out, _ := vm.Sh(ctx, "ipvsadm -Ln | awk '$1==\"TCP\"||$1==\"UDP\" {v++} $1==\"->\" {r++} END {print v, \"virtual servers,\", r-1, \"real servers\"}'")
			t.Logf("IPVS in the VM: %s", out)
		}
		if err := node.StopKubeProxy(ctx); err != nil {
			t.Errorf("stopping kube-proxy: %v", err)
		}
		// Leave the node as the other scenarios expect it: nothing of ours.
		r, err := vm.Exec(ctx, "/kpi/bin/kube-proxy", "--cleanup", "--config=/kpi/kube-proxy/config.yaml", "--v=0")
		if err != nil || r.ExitCode != 0 {
			t.Errorf("kube-proxy --cleanup: %v exit %d %s", err, r.ExitCode, r.Stderr)
		}
	})
	t0 := time.Now()
	if err := node.StartKubeProxy(ctx, cp, config); err != nil {
		t.Fatal(err)
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
			if !node.KubeProxyRunning(ctx) {
				cancel()
				t.Fatalf("kube-proxy exited during the start-up; log tail:\n%s", node.KubeProxyLog(ctx, 40))
			}
		}
	}
	startup := res.at.Sub(t0)
	if res.err != nil {
		t.Fatalf("not every Service programmed %s after kube-proxy started: %v\n%s", scaleProgramTimeout, res.err, res.out)
	}
	var progress []string
	for _, line := range strings.Split(strings.TrimSpace(res.out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "progress" {
			progress = append(progress, fmt.Sprintf("%s s: %s", scaleMsToS(f[1]), f[2]))
		}
	}
	polls, pollms := scalePolls(res.out)
	afterStart := scaleMetrics(t, ctx)

	// Exactly what the API says, for every Service.
	table, err := vm.Sh(ctx, "ipvsadm -Ln")
	if err != nil {
		t.Fatal(err)
	}
	ipvs := framework.ParseIPVSTable(table)
	var wrong []string
	for i, b := range svcs {
		var want []string
		for j := 0; j < scaleEndpoints; j++ {
			want = append(want, scaleEndpointIP(i, j)+":8080 Masq 1")
		}
		sort.Strings(want)
		if got := ipvs["TCP "+b.VIP()]; strings.Join(got, ",") != strings.Join(want, ",") {
			wrong = append(wrong, fmt.Sprintf("%s %s: %q, want %q", b.Service.Name, b.VIP(), got, want))
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("%d of %d Services wrong in IPVS, e.g.:\n%s", len(wrong), nsvc, strings.Join(wrong[:min(5, len(wrong))], "\n"))
	}

	// Single-endpoint changes, spread over the Services.
	var lat, writes []time.Duration
	var detail []string
	iters, loopms := 0, 0
	for n := 0; n < scaleChanges; n++ {
		i := n*(nsvc/scaleChanges) + nsvc/(2*scaleChanges)
		b := &svcs[i]
		newIP := scaleChangeIP(n)
		marker := fmt.Sprintf("/tmp/scale-change-%d.started", n)
		cctx, ccancel := context.WithTimeout(ctx, scaleChangeTimeout+10*time.Second)
		done := scaleVMWait(cctx, marker, "-vs", "TCP/"+b.VIP(), "-rs", newIP+":8080",
			"-interval", scaleChangePoll.String(), "-timeout", scaleChangeTimeout.String())
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
		updated, err := bulk.DiscoveryV1().EndpointSlices(scaleNS).Update(ctx, slice, metav1.UpdateOptions{})
		tw := time.Since(t0)
		if err != nil {
			ccancel()
			t.Fatalf("updating EndpointSlice %s: %v", slice.Name, err)
		}
		b.Slice = updated
		res := <-done
		ccancel()
		if res.err != nil {
			t.Fatalf("change %d (%s %s: %s -> %s) not in IPVS %s after the API write: %v", n, b.Service.Name, b.VIP(), old, newIP, scaleChangeTimeout, res.err)
		}
		d := res.at.Sub(t0)
		lat = append(lat, d)
		writes = append(writes, tw)
		a, m := scalePolls(res.out)
		iters += a
		loopms += m
		detail = append(detail, fmt.Sprintf("%s (%s -> %s) %s", b.Service.Name, old, newIP, scaleMs(d)))
	}
	afterChanges := scaleMetrics(t, ctx)
	if !node.KubeProxyRunning(ctx) {
		t.Fatalf("kube-proxy died during the run; log tail:\n%s", node.KubeProxyLog(ctx, 40))
	}
	load1, _ := os.ReadFile("/proc/loadavg")

	sorted := append([]time.Duration(nil), lat...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] < sorted[b] })
	iterMs := 0.0
	if iters > 0 {
		iterMs = float64(loopms) / float64(iters)
	}
	pollAvg := 0.0
	if polls > 0 {
		pollAvg = float64(pollms) / float64(polls)
	}
	host, _ := os.ReadFile("/proc/cpuinfo")
	hostCPU := "?"
	for _, line := range strings.Split(string(host), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			hostCPU = strings.TrimSpace(v)
			break
		}
	}
	fmt.Println()
	scaleResult("machine: host %d cores (%s), load average %s at start, %s at end", runtime.NumCPU(), hostCPU,
		strings.Join(strings.Fields(string(load0))[:3], " "), strings.Join(strings.Fields(string(load1))[:3], " "))
	scaleResult("VM: accel %s (cpu %q), %s vCPUs, %s MiB, kernel %s", accel, cpuf[0], cpuf[1], cpuf[2], cpuf[3])
	scaleResult("objects: %d ClusterIP Services (1 TCP port) x %d endpoints, one EndpointSlice each, written in %s (%d client goroutines, QPS 500) before kube-proxy started",
		nsvc, scaleEndpoints, scaleSecs(created), scaleWorkers)
	scaleResult("start to all programmed: %s from starting kube-proxy in the VM until IPVS held all %d virtual servers x %d real servers (in-VM netlink poll of every Service every %s; a poll cycle took %.0f ms on average, %d polls)",
		scaleSecs(startup), nsvc, scaleEndpoints, scaleStartPoll, pollAvg, polls)
	scaleResult("  progression (in-VM time since the poller started, a few agent round trips before kube-proxy: Services complete in IPVS): %s", strings.Join(progress, "; "))
	scaleResult("  daemon's view after start-up: %s", afterStart)
	scaleResult("one-endpoint change, API write to IPVS (%d changes, host clock): min %s, median %s, max %s", len(lat), scaleMs(sorted[0]), scaleMs(scaleMedian(lat)), scaleMs(sorted[len(sorted)-1]))
	scaleResult("  the API write alone (EndpointSlice Update round trip): median %s, max %s", scaleMs(scaleMedian(writes)), scaleMs(scaleMax(writes)))
	scaleResult("  resolution: in-VM netlink poll of the virtual server every %s (a poll cycle took %.1f ms on average); a no-op agent exec round trip takes %s (median of %d)",
		scaleChangePoll, iterMs, scaleMs(rtt), len(rtts))
	scaleResult("  each: %s", strings.Join(detail, ", "))
	scaleResult("  daemon's view after the changes: %s", afterChanges)
	scaleResult("config: framework.KubeProxyConfig(\"\"): mode ipvs, scheduler rr, syncPeriod %s, minSyncPeriod 0s", syncPeriod)
}

func scaleMax(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// msToS turns "12340" (ms) into "12.3".
func scaleMsToS(v string) string {
	n, err := strconv.Atoi(v)
	if err != nil {
		return v
	}
	return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64)
}
