package app

// Addresses, all inside the test's own network namespace: the servers listen
// where the daemon's do by default (0.0.0.0:10256, 127.0.0.1:10249, and
// 0.0.0.0:30256 for one Service's healthCheckNodePort); the flood comes from
// 127.0.0.2-127.0.0.9, the probes from 127.0.0.100.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/healthcheck"
	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

const (
	// floodConns connections at once, a third to each server, a third of each
	// kind (idle keep-alive, half-sent headers, slowly read with pipelined
	// requests), from floodSources addresses; each reconnects reconnectPause
	// after the server sheds it, for floodFor.
	floodConns      = 3000
	floodSources    = 8
	floodFor        = 12 * time.Second
	reconnectPause  = 2 * time.Second
	maxDialsPerConn = 30
	// Every probeEvery, each server gets a request on a fresh connection from
	// probeSource, which must be answered within probeWithin.
	probeSource = "127.0.0.100"
	probeEvery  = 100 * time.Millisecond
	probeWithin = time.Second

	// envFloodRole and envFloodSpec tell TestHTTPFloodHelper what to do.
	envFloodRole = "KUBE_PROXY_IPVS_HTTP_FLOOD_ROLE"
	envFloodSpec = "KUBE_PROXY_IPVS_HTTP_FLOOD_SPEC"
)

// floodTarget is one server under the flood.
type floodTarget struct {
	Name      string
	Port      int
	FloodPath string // what idle and half-sent connections ask for
	SlowPath  string // what slow readers ask for, pipelined: the largest answer
	ProbePath string
}

func (f floodTarget) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port)) }

// floodSpec is what a helper process does: flood Targets, or serve them, until
// Until.
type floodSpec struct {
	Targets []floodTarget
	Until   time.Time
}

// floodStats is what the flood process reports, on a line of its own after
// floodStatsPrefix.
type floodStats struct {
	Dials, Failed, Shed int64
}

// serverStats is what the servers process reports, on a line of its own
// after serverStatsPrefix: the most file descriptors it had open.
type serverStats struct {
	MaxFDs int
}

const (
	floodStatsPrefix  = "HTTP-FLOOD-STATS "
	serverStatsPrefix = "HTTP-FLOOD-SERVER-STATS "
)

// The roles of TestHTTPFloodHelper.
const (
	roleServers = "servers"
	roleFlood   = "flood"
)

// daemonTargets are the daemon's three kinds of server, on the ports they
// have by default (30256 for a healthCheckNodePort).
var daemonTargets = []floodTarget{
	{Name: "proxy health", Port: 10256, FloodPath: "/healthz", SlowPath: "/healthz", ProbePath: "/healthz"},
	{Name: "service health check", Port: 30256, FloodPath: "/", SlowPath: "/", ProbePath: "/"},
	{Name: "metrics", Port: 10249, FloodPath: "/healthz", SlowPath: "/metrics", ProbePath: "/metrics"},
}

// TestIntegrationHTTPServersNotStarved: issue 27. Thousands of idle, half-sent
// and never-read connections to the proxy health server, a Service's health
// check and the metrics server, each built by its production constructor with
// the default limits, never keep a probe from another address waiting more
// than a second, and never make the servers hold more than their caps.
//
// The servers, the flood and the probes run in three processes, as on a node,
// an attacker's machine and a load balancer: in one, the flood's thousands of
// goroutines would delay the probes' own, and the probes' the servers'.
// floodAloneEnv is set by hack/integration.sh for the run that holds only this test.
const floodAloneEnv = "KPI_FLOOD_ALONE"

func TestIntegrationHTTPServersNotStarved(t *testing.T) {
	// Its bound is a latency (every probe within 1 s), so it runs with the CPU to
	// itself: hack/integration.sh runs it alone, after the other integration tests
	// (under `go test ./...` other packages' tests share the two cores).
	if os.Getenv(floodAloneEnv) != "1" {
		t.Skipf("SKIPPING %s: it measures probe latency under a flood and runs alone in hack/integration.sh (%s=1)", t.Name(), floodAloneEnv)
	}
	netns.Run(t, func(t *testing.T) {
		targets := daemonTargets
		start := time.Now()
		servers := startHelper(t, roleServers, floodSpec{Targets: targets, Until: start.Add(time.Minute)})
		stopped := false
		defer func() {
			if !stopped {
				servers.stop(serverStatsPrefix)
			}
		}()
		for _, target := range targets {
			waitAnswering(t, target)
		}

		start = time.Now()
		end := start.Add(floodFor)
		flood := startHelper(t, roleFlood, floodSpec{Targets: targets, Until: end})
		results := make([]probeResults, len(targets))
		var probes sync.WaitGroup
		for i, target := range targets {
			probes.Add(1)
			go func() {
				defer probes.Done()
				results[i] = probeUntil(target, end)
			}()
		}
		queued := watchAcceptQueues(targets, end)
		probes.Wait()
		var stats floodStats
		unmarshalReport(t, flood.wait(floodStatsPrefix), &stats)
		var sstats serverStats
		stopped = true
		unmarshalReport(t, servers.stop(serverStatsPrefix), &sstats)

		t.Logf("flood: %d connections opened (%d at once), %d shed by the servers, %d dropped before an answer, in %s (test %s)",
			stats.Dials, floodConns, stats.Shed, stats.Failed, floodFor, time.Since(start).Round(time.Millisecond))
		for i, target := range targets {
			r := results[i]
			t.Logf("%s: %d probes, slowest %s; at most %d connections waiting to be accepted", target.Name, r.count, r.slowest.Round(time.Millisecond), queued[i].Load())
			for _, f := range r.failures {
				t.Errorf("%s: %s", target.Name, f)
			}
			if r.count < int(floodFor/probeEvery)/4 { // sequential probes of up to a second each
				t.Errorf("%s: only %d probes in %s", target.Name, r.count, floodFor)
			}
		}
		// Each server holds at most floodSources x MaxConnectionsPerSource + 1
		// connections, and the process the connections it shed and has not
		// closed yet (closing waits for the goroutine serving them to wake up).
		maxFDs := len(targets) * httpserver.DefaultLimits.MaxConnections
		t.Logf("servers: at most %d file descriptors open (cap %d per source and %d in all per server)", sstats.MaxFDs, httpserver.DefaultLimits.MaxConnectionsPerSource, httpserver.DefaultLimits.MaxConnections)
		if sstats.MaxFDs == 0 || sstats.MaxFDs > maxFDs {
			t.Errorf("the servers had up to %d file descriptors open, want 1 to %d", sstats.MaxFDs, maxFDs)
		}
		if stats.Dials < floodConns {
			t.Errorf("only %d flood connections opened, want at least %d", stats.Dials, floodConns)
		}
	})
}

// waitAnswering waits (5 s at most) until target answers a probe.
func waitAnswering(t *testing.T, target floodTarget) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := httpservertest.Probe(probeSource, target.addr(), target.ProbePath, probeWithin)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s does not answer: %v", target.Name, target.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// helper is a TestHTTPFloodHelper process (in this network namespace).
type helper struct {
	t      *testing.T
	role   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	cancel context.CancelFunc
}

// startHelper starts TestHTTPFloodHelper as role, doing spec; it is killed if
// it runs 30 s past spec.Until.
func startHelper(t *testing.T, role string, spec floodSpec) *helper {
	t.Helper()
	encoded, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), spec.Until.Add(30*time.Second))
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestHTTPFloodHelper$", "-test.count", "1")
	cmd.Env = append(os.Environ(), envFloodRole+"="+role, envFloodSpec+"="+string(encoded))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, role: role, cmd: cmd, stdin: stdin, lines: make(chan string, 64), cancel: cancel}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	return h
}

// wait waits for the helper to exit and returns the rest of its line that
// starts with prefix ("" if none), logging the others.
func (h *helper) wait(prefix string) string {
	defer h.cancel()
	var found string
	for line := range h.lines {
		if rest, ok := strings.CutPrefix(line, prefix); ok && prefix != "" {
			found = rest
			continue
		}
		h.t.Logf("[%s] %s", h.role, line)
	}
	if err := h.cmd.Wait(); err != nil {
		h.t.Errorf("%s process: %v", h.role, err)
	}
	return found
}

// stop tells a servers helper to end (it waits for its stdin to close) and
// waits for it, as wait.
func (h *helper) stop(prefix string) string {
	_ = h.stdin.Close()
	return h.wait(prefix)
}

// unmarshalReport decodes a helper's report into v.
func unmarshalReport(t *testing.T, report string, v any) {
	t.Helper()
	if report == "" {
		t.Errorf("no %T reported", v)
		return
	}
	if err := json.Unmarshal([]byte(report), v); err != nil {
		t.Errorf("report %q: %v", report, err)
	}
}

// TestHTTPFloodHelper is a helper process of
// TestIntegrationHTTPServersNotStarved, when started by it in a private
// network namespace; otherwise it does nothing.
func TestHTTPFloodHelper(t *testing.T) {
	role := os.Getenv(envFloodRole)
	if role == "" {
		return
	}
	if private, err := netns.InPrivateNamespace(); err != nil || !private {
		t.Fatalf("refusing to run outside a private network namespace (%v)", err)
	}
	var spec floodSpec
	if err := json.Unmarshal([]byte(os.Getenv(envFloodSpec)), &spec); err != nil {
		t.Fatal(err)
	}
	switch role {
	case roleServers:
		runDaemonServers(t, spec)
	case roleFlood:
		runFlood(t, spec)
	default:
		t.Fatalf("unknown role %q", role)
	}
}

// runDaemonServers runs daemonTargets as the daemon does until stdin closes
// or spec.Until, and prints its serverStats.
func runDaemonServers(t *testing.T, spec floodSpec) {
	raiseNoFile(t, 16384)
	ctx, cancel := context.WithDeadline(context.Background(), spec.Until)
	defer cancel()
	health := healthcheck.NewProxyHealthServer("0.0.0.0:10256", time.Minute)
	health.SyncNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	health.Updated(v1.IPv4Protocol)
	errs := make(chan error, 2)
	go func() { errs <- health.Run(ctx) }()

	services := healthcheck.NewServiceHealthServerForFamily("node-a", nil, v1.IPv4Protocol, nil, health)
	svc := types.NamespacedName{Namespace: "default", Name: "lb"}
	if err := services.SyncServices(map[types.NamespacedName]uint16{svc: 30256}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = services.SyncServices(nil) }()
	if err := services.SyncEndpoints(map[types.NamespacedName]int{svc: 1}); err != nil {
		t.Fatal(err)
	}

	// As Run does with profiling enabled.
	mux := proxymetrics.NewMetricsMux("ipvs", true, nil)
	go func() {
		errs <- serveHTTP(ctx, "127.0.0.1:10249", mux, httpserver.DefaultLimits, httpserver.PprofStreams...)
	}()

	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	var stats serverStats
	for {
		if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
			stats.MaxFDs = max(stats.MaxFDs, len(fds))
		}
		select {
		case <-stdinClosed:
		case <-ctx.Done():
		case err := <-errs:
			t.Fatalf("a server ended: %v", err)
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	encoded, err := json.Marshal(stats)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(serverStatsPrefix + string(encoded))
}

// runFlood opens floodConns connections to spec's targets, each reconnecting
// after the server sheds it, until spec.Until, and prints its floodStats.
func runFlood(t *testing.T, spec floodSpec) {
	raiseNoFile(t, floodConns+1024)
	var stats floodStats
	var wg sync.WaitGroup
	for i := range floodConns {
		target := spec.Targets[i%len(spec.Targets)]
		kind := httpservertest.Kind(i / len(spec.Targets) % 3)
		source := fmt.Sprintf("127.0.0.%d", 2+i%floodSources)
		path := target.FloodPath
		if kind == httpservertest.SlowReader {
			path = target.SlowPath
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range maxDialsPerConn {
				if time.Now().After(spec.Until) {
					return
				}
				c, err := httpservertest.Dial(source, target.addr(), path, kind, time.Now().Add(2*time.Second))
				if err != nil {
					atomic.AddInt64(&stats.Failed, 1) // shed before the server answered it
				} else {
					atomic.AddInt64(&stats.Dials, 1)
					if waitShed(c, spec.Until) {
						atomic.AddInt64(&stats.Shed, 1)
					}
					c.Close()
				}
				time.Sleep(reconnectPause)
			}
		}()
	}
	wg.Wait()
	encoded, err := json.Marshal(stats)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(floodStatsPrefix + string(encoded))
}

// raiseNoFile raises this process's open file limit to at least n.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	lim.Cur = n
	lim.Max = max(lim.Max, n)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raising RLIMIT_NOFILE to %d: %v", n, err)
	}
}

// tcpEstablished is TCP_ESTABLISHED of the kernel's tcp_states.h, as in
// tcp_info's state.
const tcpEstablished = 1

// waitShed waits until the server closes c (true) or until end (false),
// without reading from it: a slow reader must stay slow.
func waitShed(c net.Conn, end time.Time) bool {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return false
	}
	for time.Now().Before(end) {
		var state uint8 = tcpEstablished
		_ = raw.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				state = info.State
			}
		})
		if state != tcpEstablished {
			return true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false
}

type probeResults struct {
	count    int
	slowest  time.Duration
	failures []string
}

// probeUntil probes target every probeEvery until end.
func probeUntil(target floodTarget, end time.Time) probeResults {
	var r probeResults
	start := time.Now()
	for next := start; next.Before(end); next = next.Add(probeEvery) {
		time.Sleep(time.Until(next))
		took, err := httpservertest.Probe(probeSource, target.addr(), target.ProbePath, probeWithin)
		r.count++
		r.slowest = max(r.slowest, took)
		if err != nil && len(r.failures) < 5 {
			r.failures = append(r.failures, fmt.Sprintf("probe %s into the flood: %v (after %s)", time.Since(start).Round(time.Millisecond), err, took.Round(time.Millisecond)))
		}
		if took > probeEvery {
			next = time.Now() // no burst to catch up
		}
	}
	return r
}

// watchAcceptQueues samples, every 250 ms until end, the accept queue of
// each target's listening socket (its rx_queue in /proc/net/tcp{,6}), and
// returns the longest.
func watchAcceptQueues(targets []floodTarget, end time.Time) []*atomic.Int64 {
	longest := make([]*atomic.Int64, len(targets))
	for i := range longest {
		longest[i] = new(atomic.Int64)
	}
	go func() {
		for time.Now().Before(end) {
			queued := map[int]int{}
			for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
				acceptQueues(file, queued)
			}
			for i, target := range targets {
				if n := int64(queued[target.Port]); n > longest[i].Load() {
					longest[i].Store(n)
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	return longest
}

// tcpListenHex is TCP_LISTEN of the kernel's tcp_states.h, as /proc/net/tcp's
// st column shows it.
const tcpListenHex = "0A"

// acceptQueues adds, per local port, the length of the accept queue of the
// listening sockets a /proc/net/tcp{,6} file lists.
func acceptQueues(file string, queued map[int]int) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue ...; addresses
		// are HEX_IP:HEX_PORT.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[3] != tcpListenHex {
			continue
		}
		local, queues := fields[1], fields[4]
		port, err := strconv.ParseUint(local[strings.LastIndexByte(local, ':')+1:], 16, 16)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(queues[strings.IndexByte(queues, ':')+1:], 16, 32); err == nil {
			queued[int(port)] += int(n)
		}
	}
}
