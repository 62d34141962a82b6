// Package healthcheck serves kube-proxy's own health (/healthz and /livez on
// healthzBindAddress) and the per-Service health checks that external load
// balancers probe on healthCheckNodePort for externalTrafficPolicy: Local.
//
// Both behave as upstream kube-proxy v1.37 (pkg/proxy/healthcheck): same status
// codes, headers and JSON bodies, same health rule.
package healthcheck

import (
	"context"
	"net"
	"net/http"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver"
)

// listener opens listening sockets; tests replace it to avoid real ports.
type listener interface {
	Listen(ctx context.Context, network, addr string) (net.Listener, error)
}

// httpServerFactory builds HTTP servers; tests replace it to avoid real serving.
type httpServerFactory interface {
	New(handler http.Handler) httpServer
}

// httpServer is the part of *http.Server we use.
type httpServer interface {
	Serve(l net.Listener) error
	Close() error
}

// stdNetListener listens for real, accepting every connection at once and
// shedding others so that one source, or all, hold no more than limits allow
// per listener (the zero value: httpserver.DefaultLimits): a flood of
// connections cannot keep a load balancer's or kubelet's probe waiting.
type stdNetListener struct {
	limits httpserver.Limits
}

func (s stdNetListener) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return httpserver.Limit(l, limitsOrDefault(s.limits)), nil
}

// stdHTTPServerFactory builds http.Servers with the timeouts and header cap of
// limits (the zero value: httpserver.DefaultLimits), so a slow, idle or
// never-reading client is dropped (upstream sets none of them), and whose
// connection states tell a stdNetListener what to shed.
type stdHTTPServerFactory struct {
	limits httpserver.Limits
}

func (f stdHTTPServerFactory) New(handler http.Handler) httpServer {
	return httpserver.New(handler, limitsOrDefault(f.limits))
}

func limitsOrDefault(l httpserver.Limits) httpserver.Limits {
	if l == (httpserver.Limits{}) {
		return httpserver.DefaultLimits
	}
	return l
}

var (
	_ listener          = stdNetListener{}
	_ httpServerFactory = stdHTTPServerFactory{}
)
