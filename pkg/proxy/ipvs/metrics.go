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
	for op, n := range stats.ops {
		if n > 0 {
			metrics.KernelOperationsTotal.WithLabelValues(kernelOps[op].subsystem, kernelOps[op].operation).Add(float64(n))
		}
	}
	if err != nil {
		metrics.SyncFailuresTotal.Inc()
		return
	}
	for subsystem, n := range stats.driftRepairs() {
		metrics.DriftRepairsTotal.WithLabelValues(subsystem).Add(float64(n))
	}
	metrics.SyncProxyRulesLastTimestamp.WithLabelValues(fam).SetToCurrentTime()
}

// driftRepairs counts, by subsystem, the writes of a drift-checking full sync that
// repaired what someone else changed (those it made for changes are not drift); nil
// for any other sync.
func (s *SyncStats) driftRepairs() map[string]int {
	if !s.DriftCheck {
		return nil
	}
	nd := s.notDrift
	out := map[string]int{}
	for subsystem, n := range map[string]int{metrics.SubsystemIPVS: s.IPVSOps - nd.ipvs, metrics.SubsystemIPSet: s.IPSetOps - nd.ipset,
		metrics.SubsystemNetlink: s.AddressOps - nd.addr, metrics.SubsystemNFTables: s.NFTablesOps - nd.nft} {
		if n > 0 {
			out[subsystem] = n
		}
	}
	return out
}

func observeResyncRead(family v1.IPFamily, elapsed time.Duration) {
	metrics.ResyncReadDuration.WithLabelValues(string(family)).Observe(elapsed.Seconds())
}

// kernelOp is one kind of request sent across the kernel boundary, counted in
// kubeproxy_ipvs_kernel_operations_total.
type kernelOp int

const (
	opAddVirtualServer kernelOp = iota
	opUpdateVirtualServer
	opDeleteVirtualServer
	opAddRealServer
	opUpdateRealServer
	opDeleteRealServer
	opDumpIPVS
	opIPSetRestore
	opIPSetSave
	opIPTablesRestore
	opIPTablesSave
	opIPTablesEnsureRule
	opBindAddress
	opUnbindAddress
	opDumpAddresses
	opNFTablesDeleteTable
	opNFTablesTransaction
	opNFTablesList
	numKernelOps
)

var kernelOps = [numKernelOps]struct{ subsystem, operation string }{
	opAddVirtualServer:    {metrics.SubsystemIPVS, "add_virtual_server"},
	opUpdateVirtualServer: {metrics.SubsystemIPVS, "update_virtual_server"},
	opDeleteVirtualServer: {metrics.SubsystemIPVS, "delete_virtual_server"},
	opAddRealServer:       {metrics.SubsystemIPVS, "add_real_server"},
	opUpdateRealServer:    {metrics.SubsystemIPVS, "update_real_server"},
	opDeleteRealServer:    {metrics.SubsystemIPVS, "delete_real_server"},
	opDumpIPVS:            {metrics.SubsystemIPVS, "dump"},
	opIPSetRestore:        {metrics.SubsystemIPSet, "restore"},
	opIPSetSave:           {metrics.SubsystemIPSet, "save"},
	opIPTablesRestore:     {metrics.SubsystemIPTables, "restore"},
	opIPTablesSave:        {metrics.SubsystemIPTables, "save"},
	opIPTablesEnsureRule:  {metrics.SubsystemIPTables, "ensure_rule"},
	opBindAddress:         {metrics.SubsystemNetlink, "bind_address"},
	opUnbindAddress:       {metrics.SubsystemNetlink, "unbind_address"},
	opDumpAddresses:       {metrics.SubsystemNetlink, "dump"},
	opNFTablesDeleteTable: {metrics.SubsystemNFTables, "delete_table"},
	opNFTablesTransaction: {metrics.SubsystemNFTables, "transaction"},
	opNFTablesList:        {metrics.SubsystemNFTables, "list"},
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

func observeDraining(family v1.IPFamily, n int) {
	metrics.GracefulTerminationPending.WithLabelValues(string(family)).Set(float64(n))
}

// observeHeldBack sets the held-back gauge of every reason (0 for the absent ones, so a
// cleared reason does not keep its last value).
func observeHeldBack(family v1.IPFamily, counts map[string]int) {
	for _, reason := range heldBackReasons {
		metrics.HeldBackObjects.WithLabelValues(string(family), reason).Set(float64(counts[reason]))
	}
}

// observeConntrackReconcile records one conntrack cleanup (upstream's
// conntrack_reconciler metrics): its duration and the flows it deleted, 0 included.
func observeConntrackReconcile(family v1.IPFamily, start time.Time, n int) {
	metrics.ObserveConntrackReconcile(string(family), time.Since(start), n)
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
			Protocol: vs.Protocol, Address: vs.Address.String(), Port: int(vs.Port), Scheduler: vs.Scheduler,
			Connections: vs.Stats.Connections, IncomingPackets: vs.Stats.PacketsIn, OutgoingPackets: vs.Stats.PacketsOut,
			IncomingBytes: vs.Stats.BytesIn, OutgoingBytes: vs.Stats.BytesOut,
		})
	}
	return out
}
