package app

// Addresses: the server listens on 127.0.0.1; clients connect from 127.0.0.1
// and 127.0.0.2.

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
)

// startMetricsServer runs serveHTTP on a free 127.0.0.1 port until the test
// ends and returns its address once it listens.
func startMetricsServer(t *testing.T, handler http.Handler, limits httpserver.Limits, streams ...httpserver.Stream) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHTTP(ctx, addr, handler, limits, streams...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveHTTP: %v", err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics server not listening on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetricsServerLimits: the metrics server drops a client that never
// finishes its headers, and a flood of idle, half-sent and never-read
// connections from one source neither delays a scrape from another nor keeps
// more than its cap.
func TestMetricsServerLimits(t *testing.T) {
	short := httpserver.Limits{ReadHeaderTimeout: 500 * time.Millisecond, IdleTimeout: time.Second, MaxHeaderBytes: 4 << 10,
		WriteTimeout: time.Second, MaxConnectionsPerSource: 2, MaxConnections: 6}
	mux := proxymetrics.NewMetricsMux("ipvs", false, nil)
	httpservertest.SlowClientDisconnected(t, startMetricsServer(t, mux, short), short.ReadHeaderTimeout+2*time.Second)

	long := short
	long.ReadHeaderTimeout, long.IdleTimeout, long.WriteTimeout = 10*time.Second, 10*time.Second, 10*time.Second
	flood := httpservertest.Flood{Source: "127.0.0.1", Idle: 20, Headers: 20, SlowReader: 20}
	if held := httpservertest.FreshClientServed(t, startMetricsServer(t, mux, long), "/metrics", flood, "127.0.0.2", 5); held > long.MaxConnectionsPerSource {
		t.Errorf("the flooding source holds %d connections, cap %d", held, long.MaxConnectionsPerSource)
	}
}

// TestMetricsServerStreamsProfiles: with httpserver.PprofStreams, as Run passes
// them when profiling is enabled, a CPU profile and a trace longer than the
// write timeout are delivered; without, the profile is cut. (The write timeout
// leaves a second for writing what took its seconds to collect: a heap delta
// is a GC and an encoding after its second, which took over 300 ms on a loaded
// 2-core host.)
func TestMetricsServerStreamsProfiles(t *testing.T) {
	limits := httpserver.DefaultLimits
	limits.WriteTimeout = time.Second
	mux := proxymetrics.NewMetricsMux("ipvs", true, nil)
	get := func(addr, path string) (int, error) {
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			t.Logf("%s: %d %s", path, resp.StatusCode, body)
		}
		return resp.StatusCode, err
	}
	streaming := startMetricsServer(t, mux, limits, httpserver.PprofStreams...)
	for _, path := range []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.5", "/debug/pprof/heap?seconds=1"} {
		if code, err := get(streaming, path); err != nil || code != http.StatusOK {
			t.Errorf("%s with streams: status %d, error %v; want 200", path, code, err)
		}
	}
	if _, err := get(startMetricsServer(t, mux, limits), "/debug/pprof/profile?seconds=3"); err == nil {
		t.Error("a 3 s profile delivered without streams and a 1 s write timeout")
	}
}
