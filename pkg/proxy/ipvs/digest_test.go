package ipvs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// TestSetDigest: a digest depends on the members only, not on their order; removing a
// member undoes adding it; sets of the same size with different members differ.
func TestSetDigest(t *testing.T) {
	members := make([]rules.Member, 200)
	for i := range members {
		members[i] = member(rules.LoopBack, fmt.Sprintf("10.244.%d.%d,tcp:8080,10.244.%d.%d", i/250, i%250, i/250, i%250))
	}
	var fwd, rev setDigest
	for i := range members {
		fwd.add(members[i])
		rev.add(members[len(members)-1-i])
	}
	if fwd != rev || fwd.n != len(members) {
		t.Fatalf("same members, other order: %+v and %+v", fwd, rev)
	}
	before := fwd
	fwd.add(member(rules.ClusterIP, "10.96.0.1,tcp:80"))
	fwd.remove(member(rules.ClusterIP, "10.96.0.1,tcp:80"))
	if fwd != before {
		t.Errorf("add then remove: %+v, want %+v", fwd, before)
	}
	// One member swapped for another: same count, another digest.
	swapped := before
	swapped.remove(members[7])
	swapped.add(member(rules.LoopBack, "10.244.9.9,tcp:8080,10.244.9.9"))
	if swapped.n != before.n || swapped == before {
		t.Errorf("a swapped member left the digest at %+v (was %+v)", swapped, before)
	}
}

// TestDigestsOfTheKernelAgreeWithTheIndex: the digests the index keeps claim by claim
// are those of what the kernel holds once it is programmed, for every set and
// kube-ipvs0, with both rules backends; and a journal's correction leaves a read's
// digests equal to the digests of the corrected read.
func TestDigestsOfTheKernelAgreeWithTheIndex(t *testing.T) {
	for _, backend := range []string{"iptables", "nftables"} {
		t.Run(backend, func(t *testing.T) {
			e := digestEnv(t, backend)
			ctx := context.Background()
			var st SyncStats
			read, err := e.p.observe(ctx, e.ipvs, e.nl, e.p.rules.Observe(nil), &st)
			if err != nil {
				t.Fatal(err)
			}
			k := digestsOf(read)
			if len(k.sets) < 4 {
				t.Fatalf("the kernel holds members of %d sets, want the test's (cluster IPs, loop-back, node ports, ...)", len(k.sets))
			}
			ag := e.p.index.agreement(k, read, newTouched())
			if !ag.known || !ag.setsAgree() || !ag.addrs {
				t.Errorf("programmed kernel and index disagree: %+v\nkernel %+v\nindex %+v / %+v", ag, k, e.p.index.setDigests, e.p.index.addrDigest)
			}

			// A journal: random keys, each either in the applied state or not, and in
			// the read or not; a rewritten set.
			rng := rand.New(rand.NewPCG(1, 2))
			applied := copyApplied(read)
			j := &journal{vs: sets.New[vsKey](), entries: sets.New[rules.Member](), addrs: sets.New[string](), rewritten: sets.New[rules.Set]()}
			var known []rules.Member
			for e := range read.entries {
				known = append(known, e)
			}
			for i := range 60 {
				en := known[rng.IntN(len(known))]
				if i%3 == 0 {
					en = member(rules.ClusterIP, fmt.Sprintf("10.96.7.%d,tcp:80", i))
				}
				j.entries.Insert(en)
				if rng.IntN(2) == 0 {
					applied.entries.Insert(en)
				} else {
					applied.entries.Delete(en)
				}
				a := fmt.Sprintf("10.96.7.%d", i)
				if i%2 == 0 {
					a = "10.96.0.1"
				}
				j.addrs.Insert(a)
				if rng.IntN(2) == 0 {
					applied.addrs.Insert(a)
				} else {
					applied.addrs.Delete(a)
				}
			}
			j.rewritten.Insert(rules.LoopBack)
			applied.entries.Insert(member(rules.LoopBack, "10.244.1.99,tcp:80,10.244.1.99"))
			read.digests = k
			j.correct(read, applied)
			want := digestsOf(read)
			if fmt.Sprint(read.digests.sets) != fmt.Sprint(want.sets) || read.digests.addrs != want.addrs {
				t.Errorf("corrected digests\n%+v\nthe corrected read's\n%+v", read.digests, want)
			}
		})
	}
}

// TestResyncComparesOnlyDisagreeingSets: a periodic resync compares no set member one by
// one while every set's digests agree, and only the members of a set that someone
// changed (and its kube-ipvs0 addresses when an address went) otherwise; the drift is
// repaired either way.
func TestResyncComparesOnlyDisagreeingSets(t *testing.T) {
	for _, backend := range []string{"iptables", "nftables"} {
		t.Run(backend, func(t *testing.T) {
			e := digestEnv(t, backend)
			e.p.resyncSliceKeys = 4
			vsKeys := len(e.p.index.vs)
			clusterIPs := e.p.index.setDigests[rules.ClusterIP].n
			bound := len(e.p.index.bindRefs)

			// Nothing changed: the virtual servers are compared (from both sides), no
			// member and no address.
			e.clock.Step(e.opts.SyncPeriod)
			st := e.mustSync()
			if !st.Full || st.Compared != 2*vsKeys {
				t.Errorf("untouched kernel: full %v, %d keys compared, want %d (the virtual servers, from both sides)", st.Full, st.Compared, 2*vsKeys)
			}

			// One cluster IP member swapped for another, one address unbound: only
			// those sets' members and kube-ipvs0's addresses are compared.
			ctx := context.Background()
			swapClusterIPMember(t, e, "10.96.0.4", "10.96.8.8")
			if err := e.nl.UnbindAddress(ctx, net.ParseIP("10.96.0.6"), netlink.DefaultDummyDevice); err != nil {
				t.Fatal(err)
			}
			e.clock.Step(e.opts.SyncPeriod)
			st = e.mustSync()
			// The index's side first: every wanted cluster IP member, and every wanted
			// address (the one missing counts twice: as an address and as its
			// KUBE-IPVS-IPS member). Then the applied side, which by then holds the
			// repairs of the slices before: the cluster IP members, the wanted ones and
			// the stranger, and every wanted address.
			want := 2*vsKeys + clusterIPs + bound + 1 + clusterIPs + 1 + bound
			if st.Compared != want {
				t.Errorf("after drift in KUBE-CLUSTER-IP and kube-ipvs0: %d keys compared, want %d", st.Compared, want)
			}
			got := kernelMembers(t, e) + e.nl.Dump()
			if !strings.Contains(got, "10.96.0.4") || !strings.Contains(got, "10.96.0.6") || strings.Contains(got, "10.96.8.8") {
				t.Errorf("drift not repaired:\n%s", got)
			}
			e.clock.Step(e.opts.SyncPeriod)
			if st := e.mustSync(); st.Compared != 2*vsKeys || st.IPSetOps+st.NFTablesOps+st.AddressOps != 0 {
				t.Errorf("the resync after the repair: %d keys compared (want %d), %+v", st.Compared, 2*vsKeys, st)
			}
		})
	}
}

// digestEnv is a programmed proxier with members in several sets: cluster IPs, local
// endpoints (loop-back), node ports.
func digestEnv(t *testing.T, backend string) *testEnv {
	var e *testEnv
	if backend == "nftables" {
		e = newNFTEnv(t, v1.IPv4Protocol, nft.NewFakeRuleset(nftrules.Table()))
	} else {
		e = newTestEnv(t, v1.IPv4Protocol)
	}
	var objs []any
	for i := range 8 {
		name := fmt.Sprintf("svc-%d", i)
		nodePort := int32(0)
		if i%3 == 0 {
			nodePort = int32(30000 + i)
		}
		objs = append(objs, makeService("ns", name, clusterIP(fmt.Sprintf("10.96.0.%d", i+1)), port("p", v1.ProtocolTCP, 80, nodePort)),
			makeSlice("ns", name, name+"-1", tcp("p", 80), endpoint(fmt.Sprintf("10.244.1.%d", i+1)), endpoint(fmt.Sprintf("10.244.2.%d", i+1))))
	}
	e.start(objs...)
	return e
}

// kernelMembers is what the kernel's sets hold, for either rules backend.
func kernelMembers(t *testing.T, e *testEnv) string {
	t.Helper()
	if b := nftRuleset(e); b != nil {
		return nftLines(t, b, "element ")
	}
	return e.setMembers()
}

// copyApplied copies the key sets of a (the values are shared).
func copyApplied(a *appliedState) *appliedState {
	c := &appliedState{vs: map[vsKey]*appliedVS{}, entries: a.entries.Clone(), addrs: a.addrs.Clone()}
	for k, v := range a.vs {
		c.vs[k] = v
	}
	return c
}
