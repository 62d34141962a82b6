package app

// Addresses: 127.0.0.1 only.

import (
	"context"
	"net"
	"testing"
	"time"

	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
)

// TestMetricsServerLimits: the metrics server drops a client that never finishes
// its headers and serves at most MaxConnections connections at once.
func TestMetricsServerLimits(t *testing.T) {
	limits := httpserver.Limits{ReadHeaderTimeout: 500 * time.Millisecond, IdleTimeout: time.Second, MaxHeaderBytes: 4 << 10, MaxConnections: 2}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHTTP(ctx, addr, proxymetrics.NewMetricsMux("ipvs", false, nil), limits) }()
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
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics server not listening on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	httpservertest.SlowClientDisconnected(t, addr, limits.ReadHeaderTimeout+2*time.Second)
	httpservertest.ConnectionCap(t, addr, "/metrics", limits.MaxConnections, limits.ReadHeaderTimeout)
}
