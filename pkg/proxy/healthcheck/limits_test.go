package healthcheck

// Addresses: 127.0.0.1 only (real listeners).

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
)

// shortLimits make the header timeout observable within a test.
var shortLimits = httpserver.Limits{
	ReadHeaderTimeout:       500 * time.Millisecond,
	IdleTimeout:             time.Second,
	MaxHeaderBytes:          4 << 10,
	WriteTimeout:            time.Second,
	MaxConnectionsPerSource: 2,
	MaxConnections:          6,
}

// floodLimits keep a flood's connections open for the length of a test, so
// that only the caps close them.
var floodLimits = httpserver.Limits{
	ReadHeaderTimeout:       10 * time.Second,
	IdleTimeout:             10 * time.Second,
	MaxHeaderBytes:          4 << 10,
	WriteTimeout:            10 * time.Second,
	MaxConnectionsPerSource: 2,
	MaxConnections:          6,
}

// flood is more of every kind than floodLimits let one source hold.
var flood = httpservertest.Flood{Source: "127.0.0.1", Idle: 20, Headers: 20, SlowReader: 20}

// TestServersUseDefaultLimits: the constructors the daemon uses build servers
// with httpserver.DefaultLimits whose connection states drive the listener's
// shedding.
func TestServersUseDefaultLimits(t *testing.T) {
	check := func(name string, f httpServerFactory, l listener) {
		srv, ok := f.New(http.NotFoundHandler()).(*http.Server)
		if !ok {
			t.Fatalf("%s: server %T, want *http.Server", name, f.New(http.NotFoundHandler()))
		}
		d := httpserver.DefaultLimits
		if srv.ReadHeaderTimeout != d.ReadHeaderTimeout || srv.IdleTimeout != d.IdleTimeout || srv.MaxHeaderBytes != d.MaxHeaderBytes || srv.ConnState == nil {
			t.Errorf("%s: ReadHeaderTimeout %v IdleTimeout %v MaxHeaderBytes %d ConnState set %v, want %+v and ConnState", name, srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes, srv.ConnState != nil, d)
		}
		std, ok := l.(stdNetListener)
		if !ok || limitsOrDefault(std.limits) != d {
			t.Errorf("%s: listener %#v, want stdNetListener with the default limits", name, l)
		}
		ln, err := l.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if _, ok := ln.(*httpserver.Listener); !ok {
			t.Errorf("%s: listens with %T, want *httpserver.Listener", name, ln)
		}
	}
	hs := NewProxyHealthServer("127.0.0.1:0", time.Minute)
	check("proxy health", hs.httpFactory, hs.listener)
	shs := NewServiceHealthServerForFamily("node-a", nil, v1.IPv4Protocol, nil, nil).(*serviceHealthServer)
	check("service health", shs.httpFactory, shs.listener)
}

// runProxyHealth runs a proxy health server on 127.0.0.1 with limits until the
// test ends, and returns its address.
func runProxyHealth(t *testing.T, limits httpserver.Limits) string {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	addrs := make(chan net.Addr, 1)
	hs := newProxyHealthServer(limitedCapturingListener{limits, addrs}, stdHTTPServerFactory{limits}, clk, "127.0.0.1:0", healthTimeout)
	hs.Updated(v1.IPv4Protocol)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hs.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case a := <-addrs:
		return a.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not listen")
	}
	return ""
}

// runServiceHealth serves one Service's health check on 127.0.0.1 with limits
// until the test ends, and returns its address.
func runServiceHealth(t *testing.T, limits httpserver.Limits) string {
	t.Helper()
	hcs := newServiceHealthServer("node-a", nil, v1.IPv4Protocol, []net.IP{net.ParseIP("127.0.0.1")}, alwaysHealthy{},
		stdNetListener{limits}, stdHTTPServerFactory{limits})
	port := freeLoopbackPort(t)
	svc := types.NamespacedName{Namespace: "default", Name: "lb"}
	if err := hcs.SyncServices(map[types.NamespacedName]uint16{svc: port}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hcs.SyncServices(nil) })
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
}

// TestProxyHealthServerLimits: on the real 10256-style server a client that
// never finishes its headers is dropped, and a flood of idle, half-sent and
// never-read connections from one source neither delays a probe from another
// nor keeps more than its cap.
func TestProxyHealthServerLimits(t *testing.T) {
	httpservertest.SlowClientDisconnected(t, runProxyHealth(t, shortLimits), shortLimits.ReadHeaderTimeout+2*time.Second)
	if held := httpservertest.FreshClientServed(t, runProxyHealth(t, floodLimits), "/livez", flood, "127.0.0.2", 5); held > floodLimits.MaxConnectionsPerSource {
		t.Errorf("the flooding source holds %d connections, cap %d", held, floodLimits.MaxConnectionsPerSource)
	}
}

// TestServiceHealthServerLimits: the same on a healthCheckNodePort server.
func TestServiceHealthServerLimits(t *testing.T) {
	httpservertest.SlowClientDisconnected(t, runServiceHealth(t, shortLimits), shortLimits.ReadHeaderTimeout+2*time.Second)
	if held := httpservertest.FreshClientServed(t, runServiceHealth(t, floodLimits), "/", flood, "127.0.0.2", 5); held > floodLimits.MaxConnectionsPerSource {
		t.Errorf("the flooding source holds %d connections, cap %d", held, floodLimits.MaxConnectionsPerSource)
	}
}

// limitedCapturingListener is stdNetListener{limits} that reports the address it
// got (port 0 picks one).
type limitedCapturingListener struct {
	limits httpserver.Limits
	addrs  chan net.Addr
}

func (c limitedCapturingListener) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	l, err := stdNetListener{c.limits}.Listen(ctx, network, addr)
	if err == nil {
		c.addrs <- l.Addr()
	}
	return l, err
}
