package metrics

import (
	"k8s.io/component-base/metrics"
)

// Our metrics, not in upstream. All are ALPHA and named kubeproxy_ipvs_*:
//
//	kubeproxy_ipvs_kernel_operations_total{subsystem,operation}  counter
//	kubeproxy_ipvs_syncs_total{type}                             counter  type: full|partial
//	kubeproxy_ipvs_sync_failures_total                           counter
//	kubeproxy_ipvs_drift_repairs_total{subsystem}                counter
//	kubeproxy_ipvs_graceful_termination_pending{ip_family}       gauge
//	kubeproxy_ipvs_held_back_objects{ip_family,reason}           gauge
//
// and, only when enabled (RegisterVirtualServerStats), the per-virtual-server
// counters described in vsstats.go.

const ipvsMetricPrefix = "ipvs_"

// Values of the subsystem label: the kernel boundary the operation went through.
const (
	SubsystemIPVS      = "ipvs"
	SubsystemIPSet     = "ipset"
	SubsystemIPTables  = "iptables"
	SubsystemNetlink   = "netlink"  // addresses on kube-ipvs0, the dummy link
	SubsystemNFTables  = "nftables" // the nftables rules backend; upstream nftables-mode tables, removed once
	SubsystemConntrack = "conntrack"
	SubsystemSysctl    = "sysctl"
)

// Values of the type label of SyncsTotal.
const (
	SyncTypeFull    = "full"
	SyncTypePartial = "partial"
)

var (
	// KernelOperationsTotal counts the requests we sent across the kernel boundary:
	// one per netlink request, per ipset restore, per iptables-restore run. Work
	// proportional to change shows here: an idle partial sync adds nothing.
	// Labels: subsystem (Subsystem*), operation (what was asked of it, e.g.
	// "add_virtual_server", "restore", "bind_address": a small fixed set owned by the
	// proxier).
	KernelOperationsTotal = metrics.NewCounterVec(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           ipvsMetricPrefix + "kernel_operations_total",
			Help:           "Cumulative operations sent to the kernel, by subsystem and operation",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"subsystem", "operation"},
	)

	// SyncsTotal counts completed sync attempts (successful or not) by type.
	// Labels: type (SyncTypeFull, SyncTypePartial).
	SyncsTotal = metrics.NewCounterVec(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           ipvsMetricPrefix + "syncs_total",
			Help:           "Cumulative proxy rule syncs, by type (full or partial)",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"type"},
	)

	// SyncFailuresTotal counts syncs that returned an error (and so forced the next
	// sync to be a full one).
	SyncFailuresTotal = metrics.NewCounter(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           ipvsMetricPrefix + "sync_failures_total",
			Help:           "Cumulative proxy rule syncs that failed",
			StabilityLevel: metrics.ALPHA,
		},
	)

	// DriftRepairsTotal counts the writes a periodic resync made to repair what it
	// found different in the kernel from what we had last written (changed by
	// someone else, or lost): IPVS requests, ipset members, kube-ipvs0 address binds
	// and nftables elements. Labels: subsystem (Subsystem*).
	DriftRepairsTotal = metrics.NewCounterVec(
		&metrics.CounterOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           ipvsMetricPrefix + "drift_repairs_total",
			Help:           "Cumulative writes a periodic resync made to repair kernel state that drifted from the last written state (IPVS requests, ipset members, address binds, nftables elements), by subsystem",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"subsystem"},
	)

	// GracefulTerminationPending is the number of real servers currently draining
	// (weight 0, waiting for their connections to end or their deadline).
	GracefulTerminationPending = metrics.NewGaugeVec(
		&metrics.GaugeOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           ipvsMetricPrefix + "graceful_termination_pending",
			Help:           "Real servers currently draining before removal, by IP family",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"ip_family"},
	)

	// HeldBackObjects counts the kernel objects the proxier is not programming: values
	// refused before they reach the kernel (reason invalid_value) and writes the kernel
	// refused, retried with backoff (ipvs_error, ipset_error, address_error,
	// iptables_error, nftables_error). Syncs keep completing meanwhile; the objects are listed on the
	// metrics server's /debug/kube-proxy-ipvs/held-back.
	HeldBackObjects = metrics.NewGaugeVec(
		&metrics.GaugeOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           ipvsMetricPrefix + "held_back_objects",
			Help:           "Objects not programmed because they are invalid or the kernel refused them, by IP family and reason",
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"ip_family", "reason"},
	)

	// ResyncReadDuration is how long a periodic resync's read of the kernel took: it
	// runs beside the sync loop, so changes do not wait for it, and the full sync that
	// follows it (kubeproxy_sync_full_proxy_rules_duration_seconds) no longer includes it.
	ResyncReadDuration = metrics.NewHistogramVec(
		&metrics.HistogramOpts{
			Subsystem:      kubeProxySubsystem,
			Name:           ipvsMetricPrefix + "resync_read_duration_seconds",
			Help:           "Duration of a periodic resync's kernel read, made beside the sync loop, by IP family",
			Buckets:        metrics.ExponentialBuckets(0.001, 2, 17),
			StabilityLevel: metrics.ALPHA,
		},
		[]string{"ip_family"},
	)
)
