package ipset

import (
	"fmt"
	"hash/fnv"
)

// Changing a set's type (or family) in place is impossible: the kernel refuses to
// swap sets of different types ("their type does not match", checked on Linux 6.18)
// and refuses to destroy a set an iptables rule references. Upstream kube-proxy
// therefore fails forever after an upgrade that changed a set type
// (kubernetes#77265). The window-free recipe, driven by the caller because it
// interleaves with iptables:
//
//	r := ipset.NewReplacement(want, entries)
//	Apply(r.Stage1())   // create TEMP with the new type and fill it
//	iptables-restore    // the same rules, but matching TEMP instead of NAME
//	Apply(r.Stage2())   // destroy NAME (now unreferenced), recreate it, fill it
//	iptables-restore    // the rules match NAME again
//	Apply(r.Stage3())   // destroy TEMP
//
// At every instant the rules reference a complete set of the right type. When no
// rule references NAME (first start, --cleanup), Direct() does it in one batch.
// TestIntegrationReplaceWrongType runs the recipe against the real kernel.

// Replacement replaces a set of the wrong type or family.
type Replacement struct {
	Want    *Set     // the set as it should be (Name is the real name)
	Entries []string // its members
	Temp    string   // the name the rules use in between
}

// NewReplacement prepares the replacement of want.Name.
func NewReplacement(want *Set, entries []string) *Replacement {
	return &Replacement{Want: want, Entries: entries, Temp: TempName(want.Name)}
}

// TempName is a deterministic name of at most 31 characters for the temporary set
// of name, so that a replacement interrupted by a crash leaves a set the next run
// recognises and destroys (Stage1 starts by destroying it).
func TempName(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	prefix := name
	if len(prefix) > 21 {
		prefix = prefix[:21]
	}
	return fmt.Sprintf("%s-T%08x", prefix, h.Sum32())
}

func (r *Replacement) fill(tx *Transaction, name string) {
	s := *r.Want
	s.Name = name
	tx.Create(&s)
	for _, e := range r.Entries {
		tx.Add(name, e)
	}
}

// Stage1 destroys any leftover temporary set, then creates and fills it.
func (r *Replacement) Stage1() *Transaction {
	tx := &Transaction{}
	tx.Destroy(r.Temp)
	r.fill(tx, r.Temp)
	return tx
}

// Stage2 destroys the wrong set and creates it again with the right type, filled.
// Run it only after no rule references Want.Name any more.
func (r *Replacement) Stage2() *Transaction {
	tx := &Transaction{}
	tx.Destroy(r.Want.Name)
	r.fill(tx, r.Want.Name)
	return tx
}

// Stage3 destroys the temporary set, once the rules reference Want.Name again.
func (r *Replacement) Stage3() *Transaction {
	tx := &Transaction{}
	tx.Destroy(r.Temp)
	return tx
}

// Direct replaces an unreferenced set in one batch.
func (r *Replacement) Direct() *Transaction { return r.Stage2() }

// NeedsReplace reports whether an existing set cannot be reused for want: its type
// or family differ (the kernel's create -exist would fail on the type, and silently
// keep the old family), or its maxelem or bitmap range differ.
func NeedsReplace(have, want *Set) bool {
	w, err := ValidateSet(want)
	if err != nil {
		return false
	}
	if have.Type != w.Type {
		return true
	}
	if w.Type == BitmapPort {
		return have.PortMin != w.PortMin || have.PortMax != w.PortMax
	}
	return have.Family != w.Family || have.MaxElem != w.MaxElem
}
