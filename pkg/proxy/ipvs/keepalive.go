package ipvs

import (
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// keepAliveEvery is how often the rules backend's keep-alive runs beside the
// sync loop. The nftables backend's rules apply only while their liveness
// element lives (max(3 sync periods, 2 min)); the loop renews it at the top of
// every run, but one run can take longer than that: the first full sync at
// 100,000 Services x 4 took 4 min 18 s in the test VM, the element lapsed 2 min
// into it, and the rules were off until the next full sync, 6 min later. The
// renewal writes only when less than half of the lifetime is left.
const keepAliveEvery = 10 * time.Second

// keepAliveBeside renews the rules' liveness beside the sync loop until the
// proxier's context ends (SyncLoop starts it for the nftables backend).
func (p *Proxier) keepAliveBeside() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.clock.After(keepAliveEvery):
			p.renewBeside()
		}
	}
}

// renewBeside runs the backend's keep-alive once, outside the loop's lock (the
// backend orders it with the loop's own writes of the element). When the
// liveness is gone (someone deleted it or the table) the next sync is a full
// one, as when the loop's own keep-alive finds it gone.
func (p *Proxier) renewBeside() {
	var o rules.Outcome
	var stats SyncStats // not a sync's: its counters are not reported
	if err := p.rules.Apply(p.ctx, nil, rules.KeepAlive{}, &stats, &o); err != nil {
		p.logger.Error(err, "Failed to renew the rules' liveness beside the sync loop")
	}
	if o.NeedFull {
		p.rulesLapsed.Store(true)
		p.Sync()
	}
}
