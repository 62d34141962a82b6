package ipvs

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// executeIPVSBeside is the IPVS step of a sync whose binds run beside it (b): it
// writes each Service's virtual servers as soon as the binds have reached every
// address of the Service, and holds them back, as executeIPVS does, when the
// kernel refused one. Virtual servers of Services with no address in b go first.
// It reads b's progress until b closes it, so b is done when it returns (join
// then merges b's counters and failures).
//
// At a start-up every Service has an address to bind, and binding N addresses
// costs the kernel O(N^2) (each insert walks the device's address list): 115 s of
// the 224 s start at 50,000 Services, after which the IPVS writes took another
// 38 s. Trailing the binds hides the IPVS writes behind them.
func (p *Proxier) executeIPVSBeside(ctx context.Context, vs []vsPlan, b *bindsBeside, stats *SyncStats, ct *[]conntrackTarget, out *outcome) {
	// after[o]: how many of b's addresses must be bound before o's virtual
	// servers may be written (its last address's place + 1; 0 without one).
	// One pass over the Services: ownersOfAddr per address would be O(N^2).
	pos := make(map[string]int, len(b.addrs))
	for i, a := range b.addrs {
		pos[a] = i + 1
	}
	after := map[types.NamespacedName]int{}
	for name, st := range p.index.services {
		for _, a := range st.bindAddrs {
			if i := pos[a]; i > after[name] {
				after[name] = i
			}
		}
	}
	plans := make([]*vsPlan, len(vs))
	for i := range vs {
		plans[i] = &vs[i]
	}
	slices.SortStableFunc(plans, func(x, y *vsPlan) int { return after[x.owner] - after[y.owner] })

	var refused []failure
	done := 0
	for next := 0; next < len(plans); {
		end := next
		for end < len(plans) && after[plans[end].owner] <= done {
			end++
		}
		if end > next {
			p.executeIPVSPlans(ctx, plans[next:end], refused, stats, ct, out)
			next = end
			continue
		}
		pr, ok := <-b.progress
		if !ok {
			done = len(b.addrs) // the binds ended (cancelled): what is left waits no longer
			continue
		}
		done = pr.done
		refused = append(refused, pr.refused...)
	}
	for range b.progress { // the binds of addresses no virtual server waits for
	}
}
