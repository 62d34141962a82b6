package ipvs

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// The proxier's metric updates, kept in one place.

func observeQueued(family v1.IPFamily) {
	metrics.SyncProxyRulesLastQueuedTimestamp.WithLabelValues(string(family)).SetToCurrentTime()
}

func observeSync(family v1.IPFamily, full bool, elapsed time.Duration, stats SyncStats, err error) {
	fam := string(family)
	metrics.SyncProxyRulesLatency.WithLabelValues(fam).Observe(elapsed.Seconds())
	syncType := metrics.SyncTypePartial
	if full {
		syncType = metrics.SyncTypeFull
		metrics.SyncFullProxyRulesLatency.WithLabelValues(fam).Observe(elapsed.Seconds())
	} else {
		metrics.SyncPartialProxyRulesLatency.WithLabelValues(fam).Observe(elapsed.Seconds())
	}
	metrics.SyncsTotal.WithLabelValues(syncType).Inc()
	if stats.IPVSOps > 0 {
		metrics.KernelOperationsTotal.WithLabelValues(metrics.SubsystemIPVS, syncType).Add(float64(stats.IPVSOps))
	}
	if stats.IPSetOps > 0 {
		metrics.KernelOperationsTotal.WithLabelValues(metrics.SubsystemIPSet, syncType).Add(float64(stats.IPSetOps))
	}
	if stats.AddressOps > 0 {
		metrics.KernelOperationsTotal.WithLabelValues(metrics.SubsystemNetlink, syncType).Add(float64(stats.AddressOps))
	}
	if stats.IPTablesWrite {
		metrics.KernelOperationsTotal.WithLabelValues(metrics.SubsystemIPTables, syncType).Inc()
	}
	if err != nil {
		metrics.SyncFailuresTotal.Inc()
		return
	}
	if stats.DriftCheck {
		for subsystem, n := range map[string]int{metrics.SubsystemIPVS: stats.IPVSOps, metrics.SubsystemIPSet: stats.IPSetOps, metrics.SubsystemNetlink: stats.AddressOps} {
			if n > 0 {
				metrics.DriftRepairsTotal.WithLabelValues(subsystem).Add(float64(n))
			}
		}
	}
	metrics.SyncProxyRulesLastTimestamp.WithLabelValues(fam).SetToCurrentTime()
}

func observeIPTablesFailure(family v1.IPFamily) {
	metrics.IPTablesRestoreFailuresTotal.WithLabelValues(string(family)).Inc()
}

func observeEndpointLatency(family v1.IPFamily, times map[types.NamespacedName][]time.Time) {
	for _, ts := range times {
		for _, t := range ts {
			metrics.NetworkProgrammingLatency.WithLabelValues(string(family)).Observe(metrics.SinceInSeconds(t))
		}
	}
}

func observeNoLocal(family v1.IPFamily, internal, external int) {
	metrics.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(metrics.TrafficPolicyInternal, string(family)).Set(float64(internal))
	metrics.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(metrics.TrafficPolicyExternal, string(family)).Set(float64(external))
}

func observeDraining(_ v1.IPFamily, n int) {
	metrics.GracefulTerminationPending.Set(float64(n))
}

func observeConntrackDeleted(family v1.IPFamily, n int) {
	if n > 0 {
		metrics.ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues(string(family)).Add(float64(n))
	}
}

func observeServiceChange(pending int) {
	metrics.ServiceChangesTotal.Inc()
	metrics.ServiceChangesPending.Set(float64(pending))
}

func observeEndpointChange(pending int) {
	metrics.EndpointChangesTotal.Inc()
	metrics.EndpointChangesPending.Set(float64(pending))
}

// observeChangesApplied clears the pending gauges once a sync took the changes.
func observeChangesApplied() {
	metrics.ServiceChangesPending.Set(0)
	metrics.EndpointChangesPending.Set(0)
}

// VirtualServerStats reports the kernel counters of every virtual server this proxier
// owns, labelled with the Service port it serves: one IPVS dump per call, for the
// optional per-Service metrics (--ipvs-virtual-server-metrics).
func (p *Proxier) VirtualServerStats() []metrics.VirtualServerStats {
	vss, err := p.kernel.IPVS.GetVirtualServers(p.ctx)
	if err != nil {
		p.logger.Error(err, "Failed to read IPVS counters")
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]metrics.VirtualServerStats, 0, len(vss))
	for _, vs := range vss {
		if !p.ourFamily(vs.Address) {
			continue
		}
		d := p.index.virtualServer(keyOfVS(vs))
		if d == nil {
			continue
		}
		out = append(out, metrics.VirtualServerStats{
			Namespace: d.port.Namespace, Service: d.port.Name, PortName: d.port.Port,
			Protocol: vs.Protocol, Address: vs.Address.String(), Port: int(vs.Port),
			Connections: vs.Stats.Connections, IncomingPackets: vs.Stats.PacketsIn, OutgoingPackets: vs.Stats.PacketsOut,
			IncomingBytes: vs.Stats.BytesIn, OutgoingBytes: vs.Stats.BytesOut,
		})
	}
	return out
}
