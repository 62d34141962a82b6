// Package metrics declares every Prometheus metric kube-proxy-ipvs exports and the
// HTTP mux that serves them on metricsBindAddress.
//
// The upstream metrics (kubeproxy_*) keep upstream v1.37 names, types, help text,
// label names (in upstream order) and buckets, so existing dashboards and alerting
// rules work unchanged. They are declared with k8s.io/component-base/metrics and
// registered in its legacyregistry, as upstream does, so the exposition is
// identical: "[ALPHA] " help prefixes, the Go and process collectors, the registry
// meta metrics, kubernetes_build_info and the client-go rest_client_* metrics.
//
// Our own metrics use the kubeproxy_ipvs_ prefix and are described in ipvs.go.
//
// Metrics are lazily instantiated by component-base: until RegisterMetrics has run,
// every call on them is a no-op, so library code and tests may use them freely.
package metrics

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	// Upstream kube-proxy links these in for their side effect of registering
	// rest_client_* (client-go) and kubernetes_build_info in legacyregistry.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
)

const kubeProxySubsystem = "kubeproxy"

// Label values shared by several metrics.
const (
	// LabelIPFamily is the label upstream uses for the proxier's IP family
	// ("IPv4" or "IPv6", i.e. string(v1.IPFamily)).
	LabelIPFamily = "ip_family"

	// TrafficPolicyInternal and TrafficPolicyExternal are the values of the
	// traffic_policy label of SyncProxyRulesNoLocalEndpointsTotal.
	TrafficPolicyInternal = "internal"
	TrafficPolicyExternal = "external"
)

// syncDurationBuckets are upstream's buckets for every sync-duration histogram:
// 1ms doubling up to ~16s.
var syncDurationBuckets = metrics.ExponentialBuckets(0.001, 2, 15)

// Upstream metrics. Label order matters for WithLabelValues; it is the upstream one.
var (
	// SyncProxyRulesLatency is the duration of one sync (full or partial).
	// Labels: ip_family.
	SyncProxyRulesLatency = metrics.NewHistogramVec(
		&metrics.HistogramOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_duration_seconds",
			Help:           "SyncProxyRules latency in seconds",
			Buckets:        syncDurationBuckets,
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// SyncFullProxyRulesLatency is the duration of one full sync. Upstream
	// registers it only in iptables and nftables mode; we register it too because
	// our ipvs proxier also distinguishes full and partial syncs.
	// Labels: ip_family.
	SyncFullProxyRulesLatency = metrics.NewHistogramVec(
		&metrics.HistogramOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_full_proxy_rules_duration_seconds",
			Help:           "SyncProxyRules latency in seconds for full resyncs",
			Buckets:        syncDurationBuckets,
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// SyncPartialProxyRulesLatency is the duration of one partial sync.
	// Labels: ip_family.
	SyncPartialProxyRulesLatency = metrics.NewHistogramVec(
		&metrics.HistogramOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_partial_proxy_rules_duration_seconds",
			Help:           "SyncProxyRules latency in seconds for partial resyncs",
			Buckets:        syncDurationBuckets,
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// SyncProxyRulesLastTimestamp is when proxy rules were last synced
	// successfully. Labels: ip_family.
	SyncProxyRulesLastTimestamp = metrics.NewGaugeVec(
		&metrics.GaugeOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_last_timestamp_seconds",
			Help:           "The last time proxy rules were successfully synced",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// SyncProxyRulesLastQueuedTimestamp is when a sync was last requested. Much
	// later than SyncProxyRulesLastTimestamp means the sync loop is stuck.
	// Labels: ip_family.
	SyncProxyRulesLastQueuedTimestamp = metrics.NewGaugeVec(
		&metrics.GaugeOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_last_queued_timestamp_seconds",
			Help:           "The last time a sync of proxy rules was queued",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// NetworkProgrammingLatency is the time from a Service or Pod change (the
	// EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time) to the sync
	// that programmed it; the SLI of
	// https://github.com/kubernetes/community/blob/master/sig-scalability/slos/network_programming_latency.md.
	// It depends on the control plane's clock. Labels: ip_family.
	NetworkProgrammingLatency = metrics.NewHistogramVec(
		&metrics.HistogramOpts{
			Subsystem: kubeProxySubsystem,
			Name:      "network_programming_duration_seconds",
			Help:      "In Cluster Network Programming Latency in seconds",
			Buckets: metrics.MergeBuckets(
				metrics.LinearBuckets(0.25, 0.25, 2), // 0.25s, 0.5s
				metrics.LinearBuckets(1, 1, 59),      // 1s .. 59s
				metrics.LinearBuckets(60, 5, 12),     // 60s .. 115s
				metrics.LinearBuckets(120, 30, 7),    // 2min .. 5min
			),
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// EndpointChangesPending is the number of EndpointSlice changes not yet synced.
	EndpointChangesPending = metrics.NewGauge(
		&metrics.GaugeOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_endpoint_changes_pending",
			Help:           "Pending proxy rules Endpoint changes",
			StabilityLevel: metrics.ALPHA,
		},
	)

	// EndpointChangesTotal counts the EndpointSlice changes seen.
	EndpointChangesTotal = metrics.NewCounter(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_endpoint_changes_total",
			Help:           "Cumulative proxy rules Endpoint changes",
			StabilityLevel: metrics.ALPHA,
		},
	)

	// ServiceChangesPending is the number of Service changes not yet synced.
	ServiceChangesPending = metrics.NewGauge(
		&metrics.GaugeOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_service_changes_pending",
			Help:           "Pending proxy rules Service changes",
			StabilityLevel: metrics.ALPHA,
		},
	)

	// ServiceChangesTotal counts the Service changes seen.
	ServiceChangesTotal = metrics.NewCounter(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_service_changes_total",
			Help:           "Cumulative proxy rules Service changes",
			StabilityLevel: metrics.ALPHA,
		},
	)

	// SyncProxyRulesNoLocalEndpointsTotal is the number of Services with a Local
	// traffic policy and no local endpoints. A gauge despite its name (upstream).
	// Labels: traffic_policy (TrafficPolicyInternal/External), ip_family.
	SyncProxyRulesNoLocalEndpointsTotal = metrics.NewGaugeVec(
		&metrics.GaugeOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_no_local_endpoints_total",
			Help:           "Number of services with a Local traffic policy and no endpoints",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"traffic_policy", LabelIPFamily},
	)

	// IPTablesRestoreFailuresTotal counts failed iptables-restore runs.
	// Labels: ip_family.
	IPTablesRestoreFailuresTotal = metrics.NewCounterVec(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "sync_proxy_rules_iptables_restore_failures_total",
			Help:           "Cumulative proxy iptables restore failures",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// ProxyHealthzTotal counts /healthz responses by HTTP status code ("200", "503").
	ProxyHealthzTotal = metrics.NewCounterVec(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "proxy_healthz_total",
			Help:           "Cumulative proxy healthz HTTP status",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"code"},
	)

	// ProxyLivezTotal counts /livez responses by HTTP status code ("200", "503").
	ProxyLivezTotal = metrics.NewCounterVec(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "proxy_livez_total",
			Help:           "Cumulative proxy livez HTTP status",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"code"},
	)

	// ReconcileConntrackFlowsLatency is the duration of one stale-conntrack-flow
	// reconciliation. Labels: ip_family.
	ReconcileConntrackFlowsLatency = metrics.NewHistogramVec(
		&metrics.HistogramOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "conntrack_reconciler_sync_duration_seconds",
			Help:           "ReconcileConntrackFlowsLatency latency in seconds",
			Buckets:        syncDurationBuckets,
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)

	// ReconcileConntrackFlowsDeletedEntriesTotal counts conntrack flows the
	// reconciler deleted. Labels: ip_family.
	ReconcileConntrackFlowsDeletedEntriesTotal = metrics.NewCounterVec(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           "conntrack_reconciler_deleted_entries_total",
			Help:           "Cumulative conntrack flows deleted by conntrack reconciler",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{LabelIPFamily},
	)
)

// registrables lists every metric RegisterMetrics registers, upstream ones first.
func registrables() []metrics.Registerable {
	return []metrics.Registerable{
		// Registered by upstream in every mode.
		SyncProxyRulesLatency,
		SyncProxyRulesLastQueuedTimestamp,
		SyncProxyRulesLastTimestamp,
		EndpointChangesPending,
		EndpointChangesTotal,
		ServiceChangesPending,
		ServiceChangesTotal,
		ProxyHealthzTotal,
		ProxyLivezTotal,
		NetworkProgrammingLatency,
		SyncProxyRulesNoLocalEndpointsTotal,
		// Registered by upstream in ipvs mode.
		IPTablesRestoreFailuresTotal,
		ReconcileConntrackFlowsLatency,
		ReconcileConntrackFlowsDeletedEntriesTotal,
		// Registered by upstream only in iptables/nftables mode; ours does partial
		// syncs too.
		SyncFullProxyRulesLatency,
		SyncPartialProxyRulesLatency,
		// Ours.
		KernelOperationsTotal,
		SyncsTotal,
		SyncFailuresTotal,
		DriftRepairsTotal,
		GracefulTerminationPending,
		HeldBackObjects,
		ResyncReadDuration,
	}
}

var registerMetricsOnce sync.Once

// RegisterMetrics registers every metric in legacyregistry. It is safe to call
// more than once and from several goroutines.
func RegisterMetrics() {
	registerMetricsOnce.Do(func() {
		legacyregistry.MustRegister(registrables()...)
	})
}

// ObserveConntrackReconcile records one stale-conntrack-flow reconciliation of
// family ("IPv4" or "IPv6"): its duration and the flows it deleted. As upstream's
// conntrack.CleanStaleEntries, it is called once per reconciliation that listed
// the flows, and adds to the deleted counter even when nothing was deleted, so
// both series exist from the first reconciliation on.
func ObserveConntrackReconcile(family string, elapsed time.Duration, deleted int) {
	ReconcileConntrackFlowsLatency.WithLabelValues(family).Observe(elapsed.Seconds())
	ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues(family).Add(float64(deleted))
}

// SinceInSeconds is the time since start in seconds, the unit of every duration
// metric here.
func SinceInSeconds(start time.Time) float64 {
	return time.Since(start).Seconds()
}
