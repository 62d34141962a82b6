package httpserver

import (
	"context"
	"math"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stream is an endpoint whose response lasts as long as its client asks in a
// "seconds" query parameter, as net/http/pprof's do: its write deadline is
// that long plus WriteTimeout.
type Stream struct {
	// Path is the request path; ending in "/", every path under it.
	Path string
	// DefaultSeconds is the length of a request without (valid, positive)
	// seconds; 0: such a request is no stream.
	DefaultSeconds float64
}

// PprofStreams are net/http/pprof's endpoints that stream, mounted under
// /debug/pprof/: profile (30 s unless asked), trace (1 s unless asked) and a
// named profile asked for a delta (/debug/pprof/heap?seconds=30).
var PprofStreams = []Stream{
	{Path: "/debug/pprof/profile", DefaultSeconds: 30},
	{Path: "/debug/pprof/trace", DefaultSeconds: 1},
	{Path: "/debug/pprof/"},
}

// maxStream caps what a client can ask for: a day.
const maxStream = 24 * time.Hour

// guardedHandler serves each request with a write deadline and within its
// source's share of the server.
type guardedHandler struct {
	next http.Handler
	// writeTimeout from the start of the handler, plus the length of a
	// stream, is the response's write deadline (none when 0). The connection
	// keeps it until the next request's, so it also bounds the flush after
	// the handler.
	writeTimeout time.Duration
	streams      []Stream
	gate         *requestGate // nil: no cap
}

func (h *guardedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var deadline time.Time
	if h.writeTimeout > 0 {
		deadline = time.Now().Add(h.writeTimeout + streamLength(h.streams, r))
		// Fails only for a ResponseWriter that is not net/http's (a test
		// recorder).
		_ = http.NewResponseController(w).SetWriteDeadline(deadline)
	}
	if h.gate != nil {
		leave, ok := h.gate.enter(r.Context(), requestSource(r), deadline)
		if !ok {
			return // the connection went, or its response can no longer be written
		}
		defer leave()
	}
	// A client pipelining requests keeps its goroutine busy without blocking:
	// yield once per request so that others, a fresh probe among them, wait for
	// one request of each busy connection, not for 10 ms time slices.
	runtime.Gosched()
	h.next.ServeHTTP(w, r)
}

// streamLength is how long the response to r streams: 0 unless r is to one of
// streams (the first that matches).
func streamLength(streams []Stream, r *http.Request) time.Duration {
	for _, s := range streams {
		if r.URL.Path != s.Path && !(strings.HasSuffix(s.Path, "/") && strings.HasPrefix(r.URL.Path, s.Path)) {
			continue
		}
		seconds, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
		if err != nil || !(seconds > 0) { // NaN too
			seconds = s.DefaultSeconds
		}
		return time.Duration(math.Min(seconds, maxStream.Seconds()) * float64(time.Second))
	}
	return 0
}

// requestSource is the address requests are counted by, as connections are
// (sourceAddr): net/http sets RemoteAddr to "IP:port".
func requestSource(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// requestGate lets at most max requests of one source be served at once; the
// others wait for their turn. However many connections a source holds and
// however many requests it pipelines on them, it gets that many goroutines'
// worth of CPU and of the locks handlers share (the metrics registry's), so a
// fresh client waits for a few requests, not for thousands.
type requestGate struct {
	max int

	mu      sync.Mutex
	sources map[netip.Addr]*gateSlots
}

// gateSlots are one source's slots: a send holds one.
type gateSlots struct {
	slots chan struct{}
	users int // requests holding or waiting for a slot; the entry goes at 0
}

func newRequestGate(max int) *requestGate {
	return &requestGate{max: max, sources: map[netip.Addr]*gateSlots{}}
}

// enter waits for a slot of source, and returns the function that gives it
// back; false if ctx ended (the connection went) or deadline passed first.
func (g *requestGate) enter(ctx context.Context, source netip.Addr, deadline time.Time) (leave func(), ok bool) {
	g.mu.Lock()
	s := g.sources[source]
	if s == nil {
		s = &gateSlots{slots: make(chan struct{}, g.max)}
		g.sources[source] = s
	}
	s.users++
	g.mu.Unlock()
	leave = func() {
		<-s.slots
		g.done(source, s)
	}
	select {
	case s.slots <- struct{}{}:
		return leave, true
	default:
	}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case s.slots <- struct{}{}:
		return leave, true
	case <-ctx.Done():
	case <-expired:
	}
	g.done(source, s)
	return nil, false
}

func (g *requestGate) done(source netip.Addr, s *gateSlots) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.users--
	if s.users == 0 {
		delete(g.sources, source)
	}
}
