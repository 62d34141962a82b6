package ipvs

import (
	"context"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// syncHealthServers hands the eTP=Local health check ports and local endpoint counts
// to the health server.
func (p *Proxier) syncHealthServers() {
	if p.opts.ServiceHealth == nil {
		return
	}
	svcs := make(map[types.NamespacedName]uint16, len(p.index.hcPorts))
	for k, v := range p.index.hcPorts {
		svcs[k] = v
	}
	eps := make(map[types.NamespacedName]int, len(p.index.hcEndpoints))
	for k, v := range p.index.hcEndpoints {
		eps[k] = v
	}
	if err := p.opts.ServiceHealth.SyncServices(svcs); err != nil {
		p.logger.Error(err, "Error syncing healthcheck services")
	}
	if err := p.opts.ServiceHealth.SyncEndpoints(eps); err != nil {
		p.logger.Error(err, "Error syncing healthcheck endpoints")
	}
	p.hcSynced = true
}

// cleanConntrack deletes UDP/SCTP flows to changed virtual servers whose reply source
// is no longer one of their serving real servers (kubernetes#71514, #76664); on a full
// sync every UDP/SCTP virtual server is checked.
func (p *Proxier) cleanConntrack(ctx context.Context, targets []conntrackTarget, full bool) {
	if p.kernel.Conntrack == nil {
		return
	}
	want := map[vsKey]bool{}
	for _, t := range targets {
		want[makeVSKey(t.protocol, net.ParseIP(t.addr), t.port)] = true
	}
	if full {
		for k, a := range p.applied.vs {
			if a.vs.Protocol != ipvs.TCP {
				want[k] = true
			}
		}
	}
	if len(want) == 0 {
		return
	}
	start := time.Now()
	wantProto := map[uint8]bool{}
	for k := range want {
		wantProto[k.proto] = true
	}
	deleted := 0
	for _, proto := range []struct {
		name string
		num  uint8
	}{{ipvs.UDP, 17}, {ipvs.SCTP, 132}} {
		if !wantProto[proto.num] {
			continue // no flow of this protocol can be stale: skip the dump
		}
		flows, err := p.kernel.Conntrack.ListFlows(ctx, proto.num)
		if err != nil {
			p.logger.Error(err, "Failed to list conntrack flows", "protocol", proto.name)
			continue
		}
		var stale []conntrack.Flow
		for _, f := range flows {
			key := makeVSKey(proto.name, f.OrigDst, f.OrigDstPort)
			if !want[key] {
				continue
			}
			if a := p.applied.vs[key]; a != nil {
				if w, ok := a.weight(keyOfRS(f.ReplySrc, f.ReplySrcPort)); ok && w > 0 {
					continue
				}
			}
			stale = append(stale, f)
		}
		if len(stale) == 0 {
			continue
		}
		n, err := p.kernel.Conntrack.DeleteFlows(ctx, stale)
		if err != nil {
			p.logger.Error(err, "Failed to delete stale conntrack flows", "protocol", proto.name)
		}
		deleted += n
	}
	observeConntrackReconcile(p.opts.IPFamily, start, deleted)
}
