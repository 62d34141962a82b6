package ipset

import "math/bits"

// Sets without a 65,536-entry ceiling.
//
// A hash set refuses its maxelem+1st member ("Hash is full"), and maxelem is
// fixed at create: `create -exist` with another maxelem fails, so a set cannot
// be enlarged in place. Upstream kube-proxy creates every set with ipset's
// default 65536 and stops working past 65,536 Service ports
// (kubernetes#129389). The hashsize is only the initial number of buckets: the
// kernel doubles the table as members arrive (ip_set_hash_gen.h) and ignores
// the hashsize when it compares sets on `create -exist`.
//
// So each hash set is sized from what it must hold (Size, Sized), and a set
// that must hold more than its maxelem is resized without a window (Resize,
// when NeedsResize says so): a temporary set
// of the same type with the new size is filled and swapped with it. A swap
// exchanges the two sets in the kernel's table in one step, so a rule matching
// the set by name sees the old members up to the swap and the new ones after
// it; the kernel allows it because the type and family are the same (maxelem
// and hashsize may differ).

// maxHashSize bounds the initial bucket count (8 MiB of bucket pointers).
const maxHashSize = 1 << 20

// Size returns the maxelem and hashsize for a hash set that must hold count
// members and has maxelem current now (0: it does not exist yet).
//
// maxelem is never lowered (a limit costs nothing: the kernel allocates per
// member) and is at least ipset's default, so the sets upstream kube-proxy made
// are adopted as they are. When count no longer fits it becomes the power of
// two at or above 2*count: a growing cluster grows each set a logarithmic
// number of times, each time with room for as many members again. hashsize is
// the power of two at or above count/4 (at least ipset's default 1024): about
// four members per bucket from the start, so filling a new set does not make
// the kernel rehash it again and again.
func Size(count, current int) (maxElem, hashSize int) {
	maxElem = max(current, DefaultMaxElem)
	if count > maxElem {
		maxElem = ceilPow2(2 * count)
	}
	hashSize = min(max(ceilPow2(count/4), DefaultHashSize), maxHashSize)
	return maxElem, hashSize
}

// ceilPow2 is the smallest power of two >= n (1 for n <= 1).
func ceilPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// Sized returns want with MaxElem and HashSize from Size for count members,
// given have, the set's current header (nil: it does not exist yet). Bitmap
// sets are returned as they are.
func Sized(want, have *Set, count int) *Set {
	out := *want
	if want.Type == BitmapPort {
		return &out
	}
	current := 0
	if have != nil && have.Type == want.Type {
		current = have.MaxElem
	}
	out.MaxElem, out.HashSize = Size(count, current)
	return &out
}

// NeedsResize reports whether the existing hash set have must be resized
// (Resize) to become want: same type and family, another maxelem. It is
// checked before NeedsReplace, which also reports a maxelem difference but
// replaces through the rules (the recipe for a type change).
func NeedsResize(have, want *Set) bool {
	w, err := ValidateSet(want)
	if err != nil || w.Type == BitmapPort {
		return false
	}
	return have.Type == w.Type && have.Family == w.Family && have.MaxElem != w.MaxElem
}

// Resize returns the batch that gives the existing hash set want.Name the
// header of want (normally from Sized) and the members entries, without a
// window: destroy any leftover temporary set (TempName), create it with want's
// header, fill it, swap it with want.Name, destroy it (it then holds the old
// set, which no rule references: the kernel keeps references with the name).
// Apply it as one transaction. The set must exist with want's type and family,
// else the swap fails (ErrTypeMismatch: NeedsReplace's case).
func Resize(want *Set, entries []string) *Transaction {
	temp := TempName(want.Name)
	tx := &Transaction{}
	tx.Destroy(temp)
	s := *want
	s.Name = temp
	tx.Create(&s)
	for _, e := range entries {
		tx.Add(temp, e)
	}
	tx.Swap(temp, want.Name)
	tx.Destroy(temp)
	return tx
}
