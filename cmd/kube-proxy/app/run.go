package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"

	proxyconfig "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/config"
	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver"
)

// Labels that take a Service away from kube-proxy (upstream pkg/proxy/apis).
const (
	labelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	labelHeadless         = "service.kubernetes.io/headless"
)

// serviceLabelSelector is `!service.kubernetes.io/service-proxy-name,
// !service.kubernetes.io/headless`, built from requirements as upstream does.
func serviceLabelSelector() (labels.Selector, error) {
	noProxyName, err := labels.NewRequirement(labelServiceProxyName, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("building the service-proxy-name selector: %w", err)
	}
	noHeadless, err := labels.NewRequirement(labelHeadless, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("building the headless selector: %w", err)
	}
	return labels.NewSelector().Add(*noProxyName, *noHeadless), nil
}

// Run starts the health and metrics servers, the informers and the proxier's
// sync loop, and blocks until ctx ends (SIGTERM/SIGINT: returns nil and leaves
// the kernel rules in place so traffic keeps flowing until the next kube-proxy
// takes over), a server fails with bindAddressHardFail, or the --config file
// changes (returns an error so the pod restarts with the new file).
func (s *ProxyServer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errCh := make(chan error, 4)
	cfg := s.Config

	if err := s.Broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("starting the event broadcaster: %w", err)
	}
	defer s.Broadcaster.Shutdown()

	if s.HealthzServer != nil {
		go s.serve(ctx, "healthz", cfg.HealthzBindAddress, s.HealthzServer.Run, errCh)
	}
	if cfg.MetricsBindAddress != "" {
		handler := proxymetrics.NewMetricsMux("ipvs", cfg.EnableProfiling, func() any {
			return map[string]any{"kubeproxy.config.k8s.io": cfg}
		})
		if s.HeldBack != nil {
			handler = proxymetrics.WithHeldBack(handler, s.live.heldBack)
		}
		if s.Explain != nil {
			handler = proxymetrics.WithExplain(handler, s.live.explain)
		}
		handler = proxymetrics.WithZPages(handler, s.zpages())
		var streams []httpserver.Stream
		if cfg.EnableProfiling {
			streams = httpserver.PprofStreams
		}
		run := func(ctx context.Context) error {
			return serveHTTP(ctx, cfg.MetricsBindAddress, handler, httpserver.DefaultLimits, streams...)
		}
		go s.serve(ctx, "metrics", cfg.MetricsBindAddress, run, errCh)
	}

	selector, err := serviceLabelSelector()
	if err != nil {
		return err
	}
	// One watch of this Node for the daemon's life: the health server's node
	// eligibility, the running proxier's topology labels, and the node facts a
	// proxier is rebuilt for (generation.go).
	resync := cfg.ConfigSyncPeriod.Duration
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(s.Client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.NodeName).String()
		}),
		informers.WithTransform(proxyconfig.TrimForCache))
	nodeConfig := proxyconfig.NewNodeConfig(ctx, nodeFactory.Core().V1().Nodes(), resync)
	nodes := newNodeWatch()
	nodeConfig.RegisterEventHandler(nodes)
	if s.HealthzServer != nil {
		nodeConfig.RegisterEventHandler(healthzNodeHandler{s.HealthzServer})
	}
	go nodeConfig.Run(ctx.Done())
	nodeFactory.Start(ctx.Done())
	defer func() {
		// Stop the informer first; Shutdown waits for its goroutines.
		cancel()
		nodeFactory.Shutdown()
	}()

	s.Recorder.Eventf(s.NodeRef, nil, v1.EventTypeNormal, "Starting", "StartKubeProxy", "Starting kube-proxy.")

	if s.ConfigFile != "" {
		go func() {
			if err := watchConfigFile(ctx, s.ConfigFile, s.deps.configPoll); err != nil {
				errCh <- err
			}
		}()
	}

	return s.runProxiers(ctx, nodes, selector, errCh)
}

// serve runs a server; with bindAddressHardFail a failure ends the daemon,
// otherwise it is logged and retried, as upstream does.
func (s *ProxyServer) serve(ctx context.Context, name, addr string, run func(context.Context) error, errCh chan<- error) {
	logger := klog.FromContext(ctx).WithValues("server", name, "address", addr)
	retry := s.deps.serverRetry
	if retry <= 0 {
		retry = 5 * time.Second
	}
	for {
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("server stopped")
		}
		if s.Config.BindAddressHardFail {
			errCh <- fmt.Errorf("%s server on %s: %w", name, addr, err)
			return
		}
		logger.Error(err, "Server failed; retrying", "retryAfter", retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// serveHTTP serves handler on addr until ctx ends, with limits on slow, idle and
// never-reading clients, header size and the connections a source and all hold.
// A request to one of streams (the pprof profiles when profiling is enabled) may
// write for as long as it asks.
func serveHTTP(ctx context.Context, addr string, handler http.Handler, limits httpserver.Limits, streams ...httpserver.Stream) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	ln = httpserver.Limit(ln, limits)
	srv := httpserver.New(handler, limits, streams...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}
