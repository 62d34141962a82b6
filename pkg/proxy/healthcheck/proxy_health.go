package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// ToBeDeletedTaint is the taint the Cluster Autoscaler puts on a node it is about
// to delete; /healthz fails on such a node so load balancers drain it first.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// ProxierHealth is the health of the proxier of one IP family.
type ProxierHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// ProxyHealth is the body of /healthz and /livez. Field names, order and
// omissions are upstream's, which clients parse.
type ProxyHealth struct {
	// LastUpdated is the most recent Updated time of any family; in a 200
	// response it is the current time, as kube-proxy has always answered.
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is set only in /healthz responses.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Healthy is true when every family's proxier is healthy.
	Healthy bool                          `json:"healthy"`
	Status  map[v1.IPFamily]ProxierHealth `json:"status,omitempty"`
}

// ProxyHealthServer tracks whether each family's proxier keeps up with the changes
// queued for it, and whether this node should receive traffic, and serves both on
// /healthz and /livez.
//
// A family is unhealthy when a change has been queued for it (QueuedUpdate) and not
// synced (Updated) for healthTimeout or more. A family that never called Updated
// is not judged at all: a proxier that is still starting up is healthy. /livez
// reports that; /healthz additionally requires the node to be eligible.
type ProxyHealthServer struct {
	listener    listener
	httpFactory httpServerFactory
	clock       clock.Clock

	addr          string
	healthTimeout time.Duration

	mu                  sync.RWMutex
	lastUpdated         map[v1.IPFamily]time.Time
	oldestPendingQueued map[v1.IPFamily]time.Time
	nodeEligible        bool
}

// NewProxyHealthServer returns a server for addr (healthzBindAddress) that reports
// a family unhealthy once a queued change waits healthTimeout (upstream: 2 x
// syncPeriod).
func NewProxyHealthServer(addr string, healthTimeout time.Duration) *ProxyHealthServer {
	return NewProxyHealthServerWithClock(addr, healthTimeout, clock.RealClock{})
}

// NewProxyHealthServerWithClock is NewProxyHealthServer with an injected clock.
func NewProxyHealthServerWithClock(addr string, healthTimeout time.Duration, clk clock.Clock) *ProxyHealthServer {
	return newProxyHealthServer(stdNetListener{}, stdHTTPServerFactory{}, clk, addr, healthTimeout)
}

func newProxyHealthServer(l listener, f httpServerFactory, clk clock.Clock, addr string, healthTimeout time.Duration) *ProxyHealthServer {
	return &ProxyHealthServer{
		listener:            l,
		httpFactory:         f,
		clock:               clk,
		addr:                addr,
		healthTimeout:       healthTimeout,
		lastUpdated:         make(map[v1.IPFamily]time.Time),
		oldestPendingQueued: make(map[v1.IPFamily]time.Time),
	}
}

// QueuedUpdate records that ipFamily's proxier received a change it has not yet
// programmed. Only the oldest pending change counts.
func (hs *ProxyHealthServer) QueuedUpdate(ipFamily v1.IPFamily) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if _, pending := hs.oldestPendingQueued[ipFamily]; !pending {
		hs.oldestPendingQueued[ipFamily] = hs.clock.Now()
	}
}

// Updated records that ipFamily's proxier has programmed everything queued so far.
func (hs *ProxyHealthServer) Updated(ipFamily v1.IPFamily) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	delete(hs.oldestPendingQueued, ipFamily)
	hs.lastUpdated[ipFamily] = hs.clock.Now()
}

// SyncNode records the state of this node; call it with the node object on every
// add and update event and with nil when the node is deleted. Until the first
// call the node is not eligible: upstream also requires the node to exist.
func (hs *ProxyHealthServer) SyncNode(node *v1.Node) {
	eligible := nodeEligible(node)
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.nodeEligible = eligible
}

// nodeEligible is upstream's rule: the node exists, is not being deleted and is
// not tainted for deletion by the Cluster Autoscaler.
func nodeEligible(node *v1.Node) bool {
	if node == nil || !node.DeletionTimestamp.IsZero() {
		return false
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == ToBeDeletedTaint {
			return false
		}
	}
	return true
}

// NodeEligible reports whether the node should receive traffic.
func (hs *ProxyHealthServer) NodeEligible() bool {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	return hs.nodeEligible
}

// Health returns the proxiers' health, without node eligibility.
func (hs *ProxyHealthServer) Health() ProxyHealth {
	hs.mu.RLock()
	defer hs.mu.RUnlock()

	now := hs.clock.Now()
	health := ProxyHealth{
		CurrentTime: now,
		Healthy:     true,
		Status:      make(map[v1.IPFamily]ProxierHealth, len(hs.lastUpdated)),
	}
	for family, lastUpdated := range hs.lastUpdated {
		if lastUpdated.After(health.LastUpdated) {
			health.LastUpdated = lastUpdated
		}
		healthy := true
		if queued, pending := hs.oldestPendingQueued[family]; pending && now.Sub(queued) >= hs.healthTimeout {
			healthy = false
			health.Healthy = false
		}
		health.Status[family] = ProxierHealth{LastUpdated: lastUpdated, Healthy: healthy}
	}
	return health
}

// Handler returns the /healthz and /livez mux Run serves.
func (hs *ProxyHealthServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", hs.serveHealthz)
	mux.HandleFunc("/livez", hs.serveLivez)
	return mux
}

// Run serves /healthz and /livez on the configured address until ctx is done. It
// returns an error if it cannot listen or serving fails, nil once ctx is done.
func (hs *ProxyHealthServer) Run(ctx context.Context) error {
	l, err := hs.listener.Listen(ctx, "tcp", hs.addr)
	if err != nil {
		return fmt.Errorf("failed to start proxy healthz on %s: %w", hs.addr, err)
	}
	server := hs.httpFactory.New(hs.Handler())
	klog.FromContext(ctx).V(3).Info("Starting healthz HTTP server", "address", hs.addr)

	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			_ = server.Close()
		case <-stopped:
		}
	}()

	if err := server.Serve(l); err != nil && !(errors.Is(err, http.ErrServerClosed) && ctx.Err() != nil) {
		return fmt.Errorf("proxy healthz on %s closed with error: %w", hs.addr, err)
	}
	return nil
}

func (hs *ProxyHealthServer) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	health := hs.Health()
	eligible := hs.NodeEligible()
	health.NodeEligible = &eligible
	hs.respond(w, health, health.Healthy && eligible, metrics.ProxyHealthzTotal)
}

func (hs *ProxyHealthServer) serveLivez(w http.ResponseWriter, _ *http.Request) {
	health := hs.Health()
	hs.respond(w, health, health.Healthy, metrics.ProxyLivezTotal)
}

// respond writes health with upstream's headers and status and counts the
// response code.
func (hs *ProxyHealthServer) respond(w http.ResponseWriter, health ProxyHealth, healthy bool, responses *basemetrics.CounterVec) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if healthy {
		responses.WithLabelValues("200").Inc()
		w.WriteHeader(http.StatusOK)
		// Older releases reported the last sync loop run, idle or not, here;
		// upstream keeps that meaning by reporting "now" while healthy.
		health.LastUpdated = hs.clock.Now()
	} else {
		responses.WithLabelValues("503").Inc()
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	body, _ := json.Marshal(health) // cannot fail: times, bools and a string-keyed map
	_, _ = w.Write(body)
}
