package nftables

// The nftables backend's rules apply only while this daemon runs (issue 29, item 7:
// a rollback is always safe). Upstream kube-proxy, in any mode, removes only its own
// tables and chains: after a rollback our table stays, and with it rules that
// reject new connections to service addresses on ports its stale sets do not know
// (a recycled ClusterIP with another port), drop sources outside stale source
// ranges, and mark and masquerade by stale sets. So every base chain of a family
// starts with a gate, `meta nfproto != @ip-alive return`: the family's alive set
// holds one element (ipv4 or ipv6) with a timeout, which the daemon renews while it
// runs; when it stops for good the element lapses, every base chain returns at its
// first rule, and nothing of ours touches a packet. The table itself is left for
// whoever comes next (--cleanup, or our daemon again) to delete.
//
// The element is written
//   - with the programme, in the same transaction, on every full sync while it
//     lives: a restart within its lifetime never has a moment without rules (nor
//     an upgrade from a version without it: its rules are on without a gate);
//   - at the top of every run of the sync loop, initialized or not, and every
//     10 s beside the loop (a first full sync at 100,000 Services took 4 min, and
//     the rules lapsed 2 min into it), when less than half of its lifetime is
//     left, by deleting and adding it in one transaction: the delete fails
//     (ENOENT) on an element that has lapsed, so a stale table never comes back
//     on before its elements are right;
//   - after a full sync's elements and rules, when it had lapsed or was never there
//     (a first start, a start after a rollback, someone deleted the table or the
//     element): then the table comes on with elements that are right.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

const (
	// nftAliveSet holds the family's liveness element.
	nftAliveSet     = "alive"
	nftAliveComment = "its element lapses when kube-proxy-ipvs stops: the family's rules then apply to nothing"
	// nftGateComment is the comment of the first rule of every base chain.
	nftGateComment = "nothing below applies unless kube-proxy-ipvs is running"

	// minNFTLiveness is the shortest default lifetime of the liveness element.
	minNFTLiveness = 2 * time.Minute
	// EnvNFTLivenessTimeout replaces the lifetime of the liveness element (a Go
	// duration, at least nftLivenessFloor), for tests that roll back and must not
	// wait minutes for our rules to lapse.
	EnvNFTLivenessTimeout = "KUBE_PROXY_IPVS_NFT_LIVENESS_TIMEOUT"
	nftLivenessFloor      = time.Second
)

// nftLiveness is how long the liveness element lives once written: three sync
// periods, at least minNFTLiveness. The sync loop runs at least once a sync
// period, and every full sync renews the element, so it never lapses while the
// daemon runs; when the daemon stops for good, the rules are off within that time.
func nftLiveness(syncPeriod time.Duration) (d time.Duration, fromEnv bool, err error) {
	if v := os.Getenv(EnvNFTLivenessTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < nftLivenessFloor {
			return 0, false, fmt.Errorf("%s=%q: want a duration of at least %v", EnvNFTLivenessTimeout, v, nftLivenessFloor)
		}
		return d, true, nil
	}
	return max(3*syncPeriod, minNFTLiveness), false, nil
}

// aliveElement is the family's liveness element: its network protocol, the value
// of `meta nfproto` for every packet of the family.
func (f nftFamily) aliveElement() []string {
	if f.ipv6 {
		return []string{"ipv6"}
	}
	return []string{"ipv4"}
}

// nftGate is the first rule of each base chain: it leaves the chain unless the
// family's liveness element lives.
func (f nftFamily) nftGate() nft.Rule {
	return nft.Rule{Stmts: []nft.Stmt{nft.InSet{Fields: []nft.Field{nft.MetaNFProto}, Set: f.name(nftAliveSet), Negate: true}, nft.ReturnVerdict},
		Comment: nftGateComment}
}

// writeAlive adds to tx what gives the liveness element a lifetime of d, whether it
// lives or not.
func (f nftFamily) writeAlive(tx *nft.Transaction, d time.Duration) {
	tx.FlushSet(f.name(nftAliveSet))
	tx.AddElementsWithTimeout(f.name(nftAliveSet), d, f.aliveElement())
}

// extendAlive adds to tx what gives the liveness element a new lifetime of d if it
// still lives: the transaction fails with ENOENT if it does not. (Adding it again
// would not do: kernels before 6.10 keep an element's expiry.)
func (f nftFamily) extendAlive(tx *nft.Transaction, d time.Duration) {
	tx.DeleteElements(f.name(nftAliveSet), f.aliveElement())
	tx.AddElementsWithTimeout(f.name(nftAliveSet), d, f.aliveElement())
}

// aliveState is what the backend knows of its liveness element.
type aliveState int

const (
	aliveUnknown aliveState = iota // at start: a previous process may have left it living
	aliveKnown                     // written by us, living until liveness.until
	aliveLapsed                    // gone: the next full sync writes it after its elements
)

// liveness is the backend's memory of its liveness element.
type liveness struct {
	timeout time.Duration
	state   aliveState
	// until is when the element written last lapses at the earliest (aliveKnown).
	until time.Time
	// inProgramme: the last programme transaction renewed it (prepare), so the
	// full sync has nothing left to do for it (ensureJumps).
	inProgramme bool
}

// written records that a transaction begun at began wrote the element.
func (l *liveness) written(began time.Time) {
	l.state, l.until = aliveKnown, began.Add(l.timeout)
}

// keepAlive renews the liveness element when less than half of its lifetime is
// left, and only if it still lives. It runs first in every run of the sync loop,
// before the proxier is initialized too: a restarted daemon renews what its
// predecessor left before anything else. Nothing is written otherwise.
func (b *nftBackend) keepAlive(ctx context.Context, c rules.Counter, out *rules.Outcome) {
	b.aliveMu.Lock()
	defer b.aliveMu.Unlock()
	l := &b.alive
	began := b.clock.Now()
	switch l.state {
	case aliveLapsed:
		return
	case aliveKnown:
		if l.until.Sub(began) >= l.timeout/2 {
			return
		}
	}
	tx := nft.NewTransaction()
	b.fam.extendAlive(tx, l.timeout)
	err := countedRuleset{b.rs, c}.Run(ctx, tx)
	switch {
	case err == nil:
		l.written(began)
	case nft.IsNotFound(err):
		if l.state == aliveKnown {
			// Someone deleted it, or the table; or this process was stopped for
			// longer than its lifetime. A full sync puts the table right first.
			b.log.Info("The nftables rules' liveness element is gone; the rules are off until a full sync has written them", "set", b.fam.name(nftAliveSet))
			out.NeedFull = true
		} else {
			b.log.V(2).Info("No living nftables rules at start; they come on once the first full sync has written them", "set", b.fam.name(nftAliveSet))
		}
		l.state = aliveLapsed
	default:
		// Tried again on the next run of the loop, at least once a sync period.
		b.log.Error(err, "Failed to renew the nftables rules' liveness element", "set", b.fam.name(nftAliveSet), "livesUntil", l.until)
	}
}

// aliveInProgramme adds the renewal of the liveness element to the programme's
// transaction tx when the rules are on before it, and reports whether it did: when
// the element lives, and when the table is one an older version of ours wrote
// (chains, but no alive set: its rules apply without a gate), so an upgrade has
// no moment without rules either. Otherwise, without its set (someone deleted it,
// or the table) the element is gone too; it comes back only after the elements.
func (b *nftBackend) aliveInProgramme(tx *nft.Transaction, chains, setNames []string) bool {
	setThere := slices.Contains(setNames, b.fam.name(nftAliveSet))
	ungated := !setThere && slices.Contains(chains, b.fam.name("filter-input"))
	if !setThere && !ungated {
		b.alive.state = aliveLapsed
	}
	b.alive.inProgramme = b.alive.state == aliveKnown || ungated
	if b.alive.inProgramme {
		b.fam.writeAlive(tx, b.alive.timeout)
	}
	return b.alive.inProgramme
}

// reviveAfterFullSync writes the liveness element after a full sync has written
// the elements and rules, unless the programme's transaction renewed it.
func (b *nftBackend) reviveAfterFullSync(ctx context.Context, c rules.Counter) error {
	b.aliveMu.Lock()
	defer b.aliveMu.Unlock()
	if b.alive.inProgramme {
		return nil
	}
	began := b.clock.Now()
	tx := nft.NewTransaction()
	b.fam.writeAlive(tx, b.alive.timeout)
	if err := (countedRuleset{b.rs, c}).Run(ctx, tx); err != nil {
		return fmt.Errorf("turning the nftables rules on (set %s): %w", b.fam.name(nftAliveSet), err)
	}
	if b.alive.state != aliveKnown {
		b.log.V(2).Info("The nftables rules are on", "set", b.fam.name(nftAliveSet), "lifetime", b.alive.timeout)
	}
	b.alive.written(began)
	return nil
}
