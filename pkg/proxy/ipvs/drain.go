package ipvs

import (
	"context"
	"slices"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// processDraining deletes draining real servers whose connections have ended or whose
// deadline has passed: one destination dump per virtual server with draining entries.
// A failure is logged and the real server is looked at again at the next check.
func (p *Proxier) processDraining(ctx context.Context, stats *SyncStats) {
	if len(p.draining) == 0 {
		return
	}
	byVS := map[vsKey][]rsKey{}
	for k := range p.draining {
		byVS[k.vs] = append(byVS[k.vs], k.rs)
	}
	now := p.clock.Now().UnixNano()
	vsKeys := make([]vsKey, 0, len(byVS))
	for k := range byVS {
		vsKeys = append(vsKeys, k)
	}
	slices.SortFunc(vsKeys, compareVSKeys)
	for _, vk := range vsKeys {
		rks := byVS[vk]
		slices.SortFunc(rks, compareRSKeys)
		a := p.applied.vs[vk]
		if a == nil {
			for _, rk := range rks {
				delete(p.draining, drainKey{vk, rk})
			}
			continue
		}
		stats.count(opDumpIPVS)
		live, err := p.kernel.IPVS.GetRealServers(ctx, a.vs)
		if err != nil {
			p.logger.Error(err, "Failed to read draining real servers", "virtualServer", vk)
			continue
		}
		conns := make(map[rsKey]int, len(live))
		for _, rs := range live {
			conns[keyOfRS(rs.Address, rs.Port)] = rs.ActiveConn + rs.InactiveConn
		}
		for _, rk := range rks {
			dk := drainKey{vk, rk}
			n, present := conns[rk]
			if present && n > 0 && now < p.draining[dk] {
				continue
			}
			if weight, ok := a.weight(rk); ok && present {
				stats.IPVSOps++
				stats.count(opDeleteRealServer)
				if err := p.kernel.IPVS.DeleteRealServer(ctx, a.vs, rk.realServer(weight)); err != nil && !ipvs.IsNotFound(err) {
					p.logger.Error(err, "Failed to remove drained real server", "virtualServer", vk, "realServer", rk)
					continue
				}
			}
			// A copy: the list may be shared with the desired state.
			a.rs = slices.DeleteFunc(slices.Clone(a.rs), func(e desiredRS) bool { return e.key == rk })
			p.journal.noteVS(vk)
			delete(p.draining, dk)
		}
	}
}
