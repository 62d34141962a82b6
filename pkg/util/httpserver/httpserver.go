// Package httpserver holds the limits of every HTTP server kube-proxy runs: the
// proxy health server (healthzBindAddress, 10256), each Service's health check
// (healthCheckNodePort) and the metrics server (metricsBindAddress, 10249). Their
// clients are load balancers, kubelet probes and a Prometheus scraper: small
// requests without bodies, so a client that is slow to send its headers, sends
// huge ones, sits idle or never reads its responses is dropped.
//
// No client can starve the others (issue 27). The listener (Limit) accepts
// every connection at once, so none waits in the kernel's accept queue behind a
// flood, and bounds what one source address and all sources together hold by
// shedding connections, never by refusing or delaying new ones. The victim is
// chosen so that a fresh client with no connection is served: from the source
// holding the most connections, an idle keep-alive connection first, then one
// whose request headers have not arrived, oldest first; a connection whose
// request is being served goes last (connTable). Only when more sources than
// MaxConnections hold one connection each can a fresh client be shed, and then
// only after that many newer connections. The server (New) serves at most
// MaxRequestsPerSource requests of one source at once and yields between
// requests, so that pipelined requests on many connections cannot take the
// CPU, or the locks handlers share, from a fresh client; and it gives every
// response a write deadline. A cap of accepted connections
// (golang.org/x/net/netutil.LimitListener, which we used before) let 100 idle
// connections lock every probe out; upstream kube-proxy has no limit at all.
package httpserver

import (
	"net"
	"net/http"
	"time"
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
	// WriteTimeout bounds each response, from the start of its handler to its
	// last byte, so that a client that never reads does not hold a goroutine
	// forever. A Stream given to New gets its requested length on top. 0: no
	// bound.
	WriteTimeout time.Duration
	// MaxConnectionsPerSource caps the connections one source address holds on
	// one listener; another one from it sheds one of its others. 0: no cap.
	MaxConnectionsPerSource int
	// MaxRequestsPerSource caps the requests of one source address served at
	// once by one server; the others wait for their turn. 0: no cap.
	MaxRequestsPerSource int
	// MaxConnections caps the connections held on one listener; another one
	// sheds one of the source holding the most (protects file descriptors). 0:
	// no cap.
	MaxConnections int
}

// DefaultLimits are what every kube-proxy HTTP server uses. A health probe or a
// scrape sends its headers at once and well under 1 KiB of them, and reads its
// response at once. A Prometheus server scrapes over one or two keep-alive
// connections, kubelet and most load balancers probe with a new connection
// each time and close it, a cloud load balancer probes from a handful of
// addresses (Azure from one, 168.63.129.16, for every load-balancing rule): 32
// connections from one address leave them room, and only idle connections are
// shed while a source's requests fit. A source's fifth request at once waits
// for one of its four to finish; it is not refused. 512 connections per
// listener bound descriptors (a node runs 2 listeners + one per
// externalTrafficPolicy: Local Service) and memory (about 20 KiB per idle
// connection: 10 MiB at the cap). 60 s to write a response is ample for
// /metrics on a large node and releases a never-reading client's goroutine
// after a minute.
var DefaultLimits = Limits{
	ReadHeaderTimeout:       10 * time.Second,
	IdleTimeout:             60 * time.Second,
	MaxHeaderBytes:          16 << 10,
	WriteTimeout:            60 * time.Second,
	MaxConnectionsPerSource: 32,
	MaxRequestsPerSource:    4,
	MaxConnections:          512,
}

// New returns an http.Server for handler with the timeouts and header cap of
// limits. Its connection states drive the shedding of a listener from Limit.
// Requests to streams may write for as long as they ask on top of
// limits.WriteTimeout.
func New(handler http.Handler, limits Limits, streams ...Stream) *http.Server {
	guarded := &guardedHandler{next: handler, writeTimeout: limits.WriteTimeout, streams: streams}
	if limits.MaxRequestsPerSource > 0 {
		guarded.gate = newRequestGate(limits.MaxRequestsPerSource)
	}
	return &http.Server{
		Handler:           guarded,
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		// No WriteTimeout: net/http/pprof refuses a profile longer than it.
		ConnState: trackConnState,
	}
}

// Limit returns l accepting every connection at once and holding at most
// limits.MaxConnectionsPerSource connections per source address and
// limits.MaxConnections in all, shedding connections to make room (l itself
// when both are 0). Serve it with a server from New, whose connection states
// choose what is shed.
func Limit(l net.Listener, limits Limits) net.Listener {
	if limits.MaxConnections <= 0 && limits.MaxConnectionsPerSource <= 0 {
		return l
	}
	return &Listener{Listener: l, table: newConnTable(limits.MaxConnectionsPerSource, limits.MaxConnections)}
}
