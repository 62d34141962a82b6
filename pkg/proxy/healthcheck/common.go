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

type stdNetListener struct{}

func (stdNetListener) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, network, addr)
}

type stdHTTPServerFactory struct{}

func (stdHTTPServerFactory) New(handler http.Handler) httpServer {
	return &http.Server{Handler: handler}
}

var (
	_ listener          = stdNetListener{}
	_ httpServerFactory = stdHTTPServerFactory{}
)
