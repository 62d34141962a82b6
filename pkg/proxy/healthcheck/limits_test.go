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

// shortLimits make the limits observable within a test.
var shortLimits = httpserver.Limits{
	ReadHeaderTimeout: 500 * time.Millisecond,
	IdleTimeout:       time.Second,
	MaxHeaderBytes:    4 << 10,
	MaxConnections:    2,
}

// TestServersUseDefaultLimits: the constructors the daemon uses build servers
// with httpserver.DefaultLimits.
func TestServersUseDefaultLimits(t *testing.T) {
	check := func(name string, f httpServerFactory, l listener) {
		srv, ok := f.New(http.NotFoundHandler()).(*http.Server)
		if !ok {
			t.Fatalf("%s: server %T, want *http.Server", name, f.New(http.NotFoundHandler()))
		}
		d := httpserver.DefaultLimits
		if srv.ReadHeaderTimeout != d.ReadHeaderTimeout || srv.IdleTimeout != d.IdleTimeout || srv.MaxHeaderBytes != d.MaxHeaderBytes {
			t.Errorf("%s: ReadHeaderTimeout %v IdleTimeout %v MaxHeaderBytes %d, want %+v", name, srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes, d)
		}
		std, ok := l.(stdNetListener)
		if !ok || limitsOrDefault(std.limits) != d {
			t.Errorf("%s: listener %#v, want stdNetListener with the default limits", name, l)
		}
	}
	hs := NewProxyHealthServer("127.0.0.1:0", time.Minute)
	check("proxy health", hs.httpFactory, hs.listener)
	shs := NewServiceHealthServerForFamily("node-a", nil, v1.IPv4Protocol, nil, nil).(*serviceHealthServer)
	check("service health", shs.httpFactory, shs.listener)
}

// TestProxyHealthServerLimits: on the real 10256-style server a client that
// never finishes its headers is dropped, and the connection cap holds.
func TestProxyHealthServerLimits(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	addrs := make(chan net.Addr, 1)
	hs := newProxyHealthServer(limitedCapturingListener{shortLimits, addrs}, stdHTTPServerFactory{shortLimits}, clk, "127.0.0.1:0", healthTimeout)
	hs.Updated(v1.IPv4Protocol)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hs.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var addr string
	select {
	case a := <-addrs:
		addr = a.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not listen")
	}
	httpservertest.SlowClientDisconnected(t, addr, shortLimits.ReadHeaderTimeout+2*time.Second)
	httpservertest.ConnectionCap(t, addr, "/livez", shortLimits.MaxConnections, shortLimits.ReadHeaderTimeout)
}

// TestServiceHealthServerLimits: the same on a healthCheckNodePort server.
func TestServiceHealthServerLimits(t *testing.T) {
	hcs := newServiceHealthServer("node-a", nil, v1.IPv4Protocol, []net.IP{net.ParseIP("127.0.0.1")}, alwaysHealthy{},
		stdNetListener{shortLimits}, stdHTTPServerFactory{shortLimits})
	port := freeLoopbackPort(t)
	svc := types.NamespacedName{Namespace: "default", Name: "lb"}
	if err := hcs.SyncServices(map[types.NamespacedName]uint16{svc: port}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hcs.SyncServices(nil) })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	httpservertest.SlowClientDisconnected(t, addr, shortLimits.ReadHeaderTimeout+2*time.Second)
	httpservertest.ConnectionCap(t, addr, "/", shortLimits.MaxConnections, shortLimits.ReadHeaderTimeout)
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
