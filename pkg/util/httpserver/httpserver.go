// Package httpserver holds the limits of every HTTP server kube-proxy runs: the
// proxy health server (healthzBindAddress, 10256), each Service's health check
// (healthCheckNodePort) and the metrics server (metricsBindAddress, 10249). Their
// clients are load balancers, kubelet probes and a Prometheus scraper: small
// requests without bodies, so a client that is slow to send its headers, sends
// huge ones or sits idle is dropped, and the number of connections served at once
// is capped so that a flood of them cannot exhaust the process's descriptors.
package httpserver

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits of one server.
type Limits struct {
	// ReadHeaderTimeout closes a connection whose request headers have not
	// arrived in time (a slow or silent client).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no new request.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the request line and headers.
	MaxHeaderBytes int
	// MaxConnections caps the connections served at once on one listener; more
	// wait in the kernel's accept queue until one closes.
	MaxConnections int
}

// DefaultLimits are what every kube-proxy HTTP server uses. A health probe or a
// scrape sends its headers at once and well under 1 KiB of them; no WriteTimeout,
// because /debug/pprof/profile streams for as long as the client asked.
var DefaultLimits = Limits{
	ReadHeaderTimeout: 10 * time.Second,
	IdleTimeout:       60 * time.Second,
	MaxHeaderBytes:    16 << 10,
	MaxConnections:    100,
}

// New returns an http.Server for handler with the timeouts and header cap of
// limits.
func New(handler http.Handler, limits Limits) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
	}
}

// Limit returns l accepting at most limits.MaxConnections connections at once
// (unlimited when it is 0).
func Limit(l net.Listener, limits Limits) net.Listener {
	if limits.MaxConnections <= 0 {
		return l
	}
	return netutil.LimitListener(l, limits.MaxConnections)
}
