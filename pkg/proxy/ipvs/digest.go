package ipvs

import (
	"hash/maphash"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// A periodic resync has to find what differs between the kernel as read and the
// desired index. Most of its keys are set members (at 10k Services x 10 local
// endpoints, 120,000 of 170,000), and almost always none differs; yet finding that
// out one member at a time costs two map lookups of two strings each, which under TCG
// is most of a resync's time in the sync loop. So every set carries a digest: its
// member count and the sum of its members' hashes, which does not depend on order and
// is kept up to date member by member, by the index as claims come and go and, for
// the kernel, computed once by the resync's read beside the loop. A set whose digests
// agree is not walked member by member. The hash is seeded per process (maphash), so
// nobody who can write to the kernel's sets can make a different set sum to ours; two
// different sets of the same size agree by chance with a probability of 2^-64.

// setDigest is a multiset fingerprint of one set's members.
type setDigest struct {
	n   int
	sum uint64
}

var digestSeed = maphash.MakeSeed()

func (d *setDigest) add(m rules.Member) {
	d.n++
	d.sum += maphash.Comparable(digestSeed, m)
}

func (d *setDigest) remove(m rules.Member) {
	d.n--
	d.sum -= maphash.Comparable(digestSeed, m)
}

// addAddr and removeAddr are add and remove for kube-ipvs0's addresses.
func (d *setDigest) addAddr(a string) {
	d.n++
	d.sum += maphash.String(digestSeed, a)
}

func (d *setDigest) removeAddr(a string) {
	d.n--
	d.sum -= maphash.String(digestSeed, a)
}

// kernelDigests are the digests of what a resync read: each set's (by base name) and
// kube-ipvs0's addresses. They describe the read as it was taken, corrected by the
// journal (resync.go), and say nothing once later syncs have written.
type kernelDigests struct {
	sets  map[rules.Set]setDigest
	addrs setDigest
}

// digestsOf computes the digests of st (beside the loop: it reads only st).
func digestsOf(st *appliedState) *kernelDigests {
	k := &kernelDigests{sets: map[rules.Set]setDigest{}}
	for e := range st.entries {
		d := k.sets[e.Set]
		d.add(e)
		k.sets[e.Set] = d
	}
	for a := range st.addrs {
		k.addrs.addAddr(a)
	}
	return k
}

// correctEntry moves the digest of e's set from had to has (the journal's correction).
func (k *kernelDigests) correctEntry(e rules.Member, had, has bool) {
	if k == nil || had == has {
		return
	}
	d := k.sets[e.Set]
	if has {
		d.add(e)
	} else {
		d.remove(e)
	}
	k.sets[e.Set] = d
}

func (k *kernelDigests) correctAddr(a string, had, has bool) {
	switch {
	case k == nil || had == has:
	case has:
		k.addrs.addAddr(a)
	default:
		k.addrs.removeAddr(a)
	}
}

// recountSet recomputes one set's digest from st (a set the journal says was rewritten).
func (k *kernelDigests) recountSet(st *appliedState, set rules.Set) {
	if k == nil {
		return
	}
	var d setDigest
	for e := range st.entries {
		if e.Set == set {
			d.add(e)
		}
	}
	k.sets[set] = d
}

// agreement says which of the resync's key kinds need no member-by-member comparison:
// the sets (by base name) whose members ix wants are exactly those applied holds, and
// whether kube-ipvs0's addresses agree too. applied is the read (its digests k) with
// nothing written yet; the keys in t are this sync's own changes, planned anyway, so
// the comparison counts them as already written.
type agreement struct {
	// known: the digests were compared (the zero agreement walks every key).
	known bool
	sets  map[rules.Set]bool
	addrs bool
}

func (ix *desiredIndex) agreement(k *kernelDigests, applied *appliedState, t *touched) agreement {
	read := make(map[rules.Set]setDigest, len(k.sets))
	for name, d := range k.sets {
		read[name] = d
	}
	addrs := k.addrs
	for e := range t.entries {
		want, have := ix.hasEntry(e), applied.entries.Has(e)
		if want == have {
			continue
		}
		d := read[e.Set]
		if want {
			d.add(e)
		} else {
			d.remove(e)
		}
		read[e.Set] = d
	}
	for a := range t.addrs {
		switch want, have := ix.hasAddr(a), applied.addrs.Has(a); {
		case want && !have:
			addrs.addAddr(a)
		case !want && have:
			addrs.removeAddr(a)
		}
	}
	ag := agreement{known: true, sets: map[rules.Set]bool{}, addrs: addrs == ix.addrDigest}
	for name, d := range read {
		ag.sets[name] = d == ix.setDigests[name]
	}
	for name := range ix.setDigests {
		if _, ok := read[name]; !ok {
			ag.sets[name] = false
		}
	}
	return ag
}

// setsAgree reports whether no set needs comparing member by member.
func (ag agreement) setsAgree() bool {
	if !ag.known {
		return false
	}
	for _, ok := range ag.sets {
		if !ok {
			return false
		}
	}
	return true
}
