package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// VirtualServerStats is the kernel's cumulative counters for one IPVS virtual
// server, with the Service port it implements.
type VirtualServerStats struct {
	Namespace string
	Service   string
	PortName  string // the ServicePort name, "" for an unnamed port
	// Scheduler is the scheduler the kernel runs for it (per-Service annotations,
	// or the configured one).
	Scheduler string
	Protocol  string // "TCP", "UDP" or "SCTP"
	Address   string // virtual address, canonical text form
	Port      int    // virtual port

	Connections     uint64
	IncomingPackets uint64
	OutgoingPackets uint64
	IncomingBytes   uint64
	OutgoingBytes   uint64
}

// VirtualServerStatsFunc returns the current counters of every virtual server
// kube-proxy owns. It runs on every scrape of /metrics, on the scraper's
// goroutine, so it must be quick and safe to call concurrently with syncs (read a
// snapshot, or do one dump).
type VirtualServerStatsFunc func() []VirtualServerStats

var vsStatsLabels = []string{"namespace", "service", "port_name", "protocol", "address", "port", "scheduler"}

func newVSStatsDesc(name, help string) *metrics.Desc {
	return metrics.NewDesc(kubeProxySubsystem+"_"+ipvsMetricPrefix+"virtual_server_"+name,
		help, vsStatsLabels, nil, metrics.ALPHA, "")
}

var (
	vsConnectionsDesc     = newVSStatsDesc("connections_total", "Cumulative connections scheduled by an IPVS virtual server")
	vsIncomingPacketsDesc = newVSStatsDesc("incoming_packets_total", "Cumulative incoming packets of an IPVS virtual server")
	vsOutgoingPacketsDesc = newVSStatsDesc("outgoing_packets_total", "Cumulative outgoing packets of an IPVS virtual server")
	vsIncomingBytesDesc   = newVSStatsDesc("incoming_bytes_total", "Cumulative incoming bytes of an IPVS virtual server")
	vsOutgoingBytesDesc   = newVSStatsDesc("outgoing_bytes_total", "Cumulative outgoing bytes of an IPVS virtual server")
)

// vsStatsCollector turns VirtualServerStatsFunc output into const counters.
type vsStatsCollector struct {
	metrics.BaseStableCollector
	stats VirtualServerStatsFunc
}

var _ metrics.StableCollector = &vsStatsCollector{}

func (c *vsStatsCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- vsConnectionsDesc
	ch <- vsIncomingPacketsDesc
	ch <- vsOutgoingPacketsDesc
	ch <- vsIncomingBytesDesc
	ch <- vsOutgoingBytesDesc
}

func (c *vsStatsCollector) CollectWithStability(ch chan<- metrics.Metric) {
	for _, s := range c.stats() {
		labels := []string{s.Namespace, s.Service, s.PortName, s.Protocol, s.Address, strconv.Itoa(s.Port), s.Scheduler}
		ch <- metrics.NewLazyConstMetric(vsConnectionsDesc, metrics.CounterValue, float64(s.Connections), labels...)
		ch <- metrics.NewLazyConstMetric(vsIncomingPacketsDesc, metrics.CounterValue, float64(s.IncomingPackets), labels...)
		ch <- metrics.NewLazyConstMetric(vsOutgoingPacketsDesc, metrics.CounterValue, float64(s.OutgoingPackets), labels...)
		ch <- metrics.NewLazyConstMetric(vsIncomingBytesDesc, metrics.CounterValue, float64(s.IncomingBytes), labels...)
		ch <- metrics.NewLazyConstMetric(vsOutgoingBytesDesc, metrics.CounterValue, float64(s.OutgoingBytes), labels...)
	}
}

var (
	vsStatsMu         sync.Mutex
	vsStatsRegistered bool
)

// ErrVirtualServerStatsRegistered is returned when RegisterVirtualServerStats is
// called a second time.
var ErrVirtualServerStatsRegistered = errors.New("virtual server stats collector already registered")

// RegisterVirtualServerStats exports kubeproxy_ipvs_virtual_server_* counters fed
// by stats. Call it once, only when the operator enabled per-Service IPVS
// counters: one series per virtual server and counter can be many.
func RegisterVirtualServerStats(stats VirtualServerStatsFunc) error {
	if stats == nil {
		return errors.New("registering virtual server stats collector: nil stats function")
	}
	vsStatsMu.Lock()
	defer vsStatsMu.Unlock()
	if vsStatsRegistered {
		return ErrVirtualServerStatsRegistered
	}
	if err := legacyregistry.CustomRegister(&vsStatsCollector{stats: stats}); err != nil {
		return fmt.Errorf("registering virtual server stats collector: %w", err)
	}
	vsStatsRegistered = true
	return nil
}
