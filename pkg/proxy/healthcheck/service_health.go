package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// ServiceHealthServer serves one health check per Service with
// externalTrafficPolicy: Local, on its healthCheckNodePort: 200 while this node has
// local endpoints for it (and the proxy is healthy), else 503, so external load
// balancers send traffic only to nodes that can serve it locally.
type ServiceHealthServer interface {
	// SyncServices makes newServices (Service -> healthCheckNodePort) the set
	// served: ports of Services no longer present, or whose port changed, are
	// closed; new ones opened. A port that cannot be opened is reported with a
	// FailedToStartServiceHealthcheck event and retried on the next call; the
	// other Services are unaffected.
	SyncServices(newServices map[types.NamespacedName]uint16) error
	// SyncEndpoints sets the number of local ready endpoints of each Service; a
	// served Service absent from newEndpoints has none.
	SyncEndpoints(newEndpoints map[types.NamespacedName]int) error
}

// proxyHealthChecker is what the Service health checks need of ProxyHealthServer.
type proxyHealthChecker interface {
	Health() ProxyHealth
}

// NewServiceHealthServerForFamily returns the ServiceHealthServer of one family's
// proxier, as upstream runs one per family on dual-stack nodes: with nil listenIPs
// it listens on 0.0.0.0 (tcp4) or [::] (tcp6, v6-only), so the two families can
// serve the same healthCheckNodePort side by side. listenIPs are the addresses
// to listen on (those matching nodePortAddresses). healthzServer's Health
// (without node eligibility, as upstream) sets serviceProxyHealthy; nil counts as
// healthy. recorder may be nil.
func NewServiceHealthServerForFamily(hostname string, recorder events.EventRecorder, family v1.IPFamily, listenIPs []net.IP, healthzServer *ProxyHealthServer) ServiceHealthServer {
	var checker proxyHealthChecker = alwaysHealthy{}
	if healthzServer != nil {
		checker = healthzServer
	}
	return newServiceHealthServer(hostname, recorder, family, listenIPs, checker, stdNetListener{}, stdHTTPServerFactory{})
}

type alwaysHealthy struct{}

func (alwaysHealthy) Health() ProxyHealth { return ProxyHealth{Healthy: true} }

// listenAddress is one socket a health check opens per Service.
type listenAddress struct {
	network string // "tcp", "tcp4" or "tcp6"
	ip      net.IP
}

func listenAddresses(family v1.IPFamily, listenIPs []net.IP) []listenAddress {
	if len(listenIPs) == 0 {
		switch family {
		case v1.IPv4Protocol:
			return []listenAddress{{"tcp4", net.IPv4zero}}
		case v1.IPv6Protocol:
			return []listenAddress{{"tcp6", net.IPv6zero}}
		default:
			// Go listens dual-stack on [::] for "tcp" and an unspecified address.
			return []listenAddress{{"tcp", net.IPv4zero}}
		}
	}
	addrs := make([]listenAddress, 0, len(listenIPs))
	for _, ip := range listenIPs {
		network := "tcp6"
		if ip.To4() != nil {
			network = "tcp4"
		}
		addrs = append(addrs, listenAddress{network, ip})
	}
	return addrs
}

type serviceHealthServer struct {
	hostname    string
	recorder    events.EventRecorder // may be nil
	addresses   []listenAddress
	health      proxyHealthChecker
	listener    listener
	httpFactory httpServerFactory
	logger      klog.Logger

	mu       sync.RWMutex
	services map[types.NamespacedName]*healthCheck
}

func newServiceHealthServer(hostname string, recorder events.EventRecorder, family v1.IPFamily, listenIPs []net.IP, health proxyHealthChecker, l listener, f httpServerFactory) *serviceHealthServer {
	logger := klog.Background().WithName("service-health")
	if family != "" {
		logger = klog.LoggerWithValues(logger, "ipFamily", family)
	}
	return &serviceHealthServer{
		hostname:    hostname,
		recorder:    recorder,
		addresses:   listenAddresses(family, listenIPs),
		health:      health,
		listener:    l,
		httpFactory: f,
		logger:      logger,
		services:    map[types.NamespacedName]*healthCheck{},
	}
}

// healthCheck is the health check of one Service: its sockets and the count
// SyncEndpoints last gave.
type healthCheck struct {
	name      types.NamespacedName
	port      uint16
	sockets   []servingSocket
	endpoints int
}

type servingSocket struct {
	listener net.Listener
	server   httpServer
}

func (s *serviceHealthServer) SyncServices(newServices map[types.NamespacedName]uint16) error {
	s.mu.Lock()
	defer s.mu.Unlock()

	for name, hc := range s.services {
		if port, ok := newServices[name]; ok && port == hc.port {
			continue
		}
		s.logger.V(2).Info("Closing healthcheck", "service", name, "port", hc.port)
		hc.close(s.logger)
		delete(s.services, name)
	}

	for name, port := range newServices {
		if s.services[name] != nil {
			continue
		}
		s.logger.V(2).Info("Opening healthcheck", "service", name, "port", port)
		hc := &healthCheck{name: name, port: port}
		if err := s.open(hc); err != nil {
			s.logger.Error(err, "Failed to start healthcheck", "node", s.hostname, "service", name, "port", port)
			if s.recorder != nil {
				s.recorder.Eventf(
					&v1.ObjectReference{
						Kind:      "Service",
						Namespace: name.Namespace,
						Name:      name.Name,
						// Upstream sets this placeholder UID; kept so events
						// aggregate the same way.
						UID: types.UID(name.String()),
					}, nil, v1.EventTypeWarning, "FailedToStartServiceHealthcheck", "Listen",
					"node %s failed to start healthcheck %q on port %d: %v", s.hostname, name.String(), port, err)
			}
			// Not recorded: the next SyncServices tries again.
			continue
		}
		s.services[name] = hc
	}
	return nil
}

// open listens on every address and starts serving; on any failure it closes
// what it opened, so that a retry or another owner can take the port.
func (s *serviceHealthServer) open(hc *healthCheck) error {
	for _, a := range s.addresses {
		addr := net.JoinHostPort(a.ip.String(), strconv.Itoa(int(hc.port)))
		l, err := s.listener.Listen(context.Background(), a.network, addr)
		if err != nil {
			hc.close(s.logger)
			return fmt.Errorf("listening on %s %s: %w", a.network, addr, err)
		}
		server := s.httpFactory.New(serviceHandler{name: hc.name, s: s})
		hc.sockets = append(hc.sockets, servingSocket{listener: l, server: server})
		go func() {
			if err := server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.Error(err, "Healthcheck closed", "service", hc.name, "address", addr)
				return
			}
			s.logger.V(3).Info("Healthcheck closed", "service", hc.name, "address", addr)
		}()
	}
	return nil
}

// close stops serving and releases the ports at once: the listener is closed here
// rather than left to Serve, which may not have started yet.
func (hc *healthCheck) close(logger klog.Logger) {
	for _, sock := range hc.sockets {
		if err := sock.server.Close(); err != nil {
			logger.Error(err, "Error closing healthcheck server", "service", hc.name)
		}
		_ = sock.listener.Close() // already closed when Serve had started
	}
	hc.sockets = nil
}

func (s *serviceHealthServer) SyncEndpoints(newEndpoints map[types.NamespacedName]int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, hc := range s.services {
		// Absent means none (upstream): the Service has no local endpoints.
		hc.endpoints = newEndpoints[name]
		s.logger.V(3).Info("Reporting endpoints for healthcheck", "service", name, "endpointCount", hc.endpoints)
	}
	return nil
}

// serviceHandler answers the health check of one Service.
type serviceHandler struct {
	name types.NamespacedName
	s    *serviceHealthServer
}

func (h serviceHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.s.mu.RLock()
	hc, ok := h.s.services[h.name]
	count := 0
	if ok {
		count = hc.endpoints
	}
	h.s.mu.RUnlock()
	if !ok {
		// The check is being closed. Upstream answers an empty 200 here; a 503
		// keeps load balancers away from a node that no longer serves it.
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	proxyHealthy := h.s.health.Health().Healthy

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
	if count != 0 && proxyHealthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(serviceHealthBody(h.name, count, proxyHealthy))
}

// serviceHealthBody is upstream's body byte for byte: tab-indented, no trailing
// newline. Namespace and name are DNS labels, so %q quotes them as JSON would.
func serviceHealthBody(name types.NamespacedName, localEndpoints int, proxyHealthy bool) []byte {
	return fmt.Appendf(nil, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
		name.Namespace, name.Name, localEndpoints, proxyHealthy)
}
