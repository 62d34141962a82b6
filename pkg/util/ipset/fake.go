package ipset

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory ipset that behaves like `ipset restore -exist` on Linux 6.18
// with ipset 7.x, as observed on the real kernel:
//
//   - Apply validates the batch exactly like the real Apply (nothing runs if that
//     fails), then processes lines in order and stops at the first failure.
//   - libipset buffers consecutive add/del lines of one set and sends them when a
//     line of another kind or set arrives (or at the end). A line that fails in
//     userspace (unknown set, entry that does not fit the set's type) discards that
//     unsent buffer; a kernel failure (full, out of range) stops inside the buffer
//     with the elements before it applied. The Fake models this buffer, without
//     libipset's size limit (~2800 entries), so it can lose more lines than the
//     real one: callers must treat any error as "state unknown".
//   - create of an existing set succeeds when type and maxelem (hash) or range
//     (bitmap) match; family and hashsize are NOT compared by the kernel, so an
//     inet6 create over an inet set of the same type succeeds and changes nothing
//     (since Linux 6.3: 6.1 refuses it for hash:ip, whose default netmask differs
//     between the families).
//   - destroy of a missing set is a no-op; destroy of a referenced set fails with
//     ErrSetInUse (tell the Fake about references with SetReferences).
//   - swap needs both sets and the same type and family (the kernel compares type
//     features and family: none of the supported types can be swapped with another;
//     bitmap ranges and hash sizes may differ). References stay with the names.
//   - the kernel refuses the zero address (0.0.0.0, ::) in hash:ip ("Null-valued
//     element") and, since Linux 6.3 (hash:ip,port revision 7, bitmask support),
//     in hash:ip,port (EINVAL), on add and on del, -exist or not: a kernel failure
//     (ErrInvalid) with the buffered elements before it applied. Linux 6.1 stores
//     the zero address in hash:ip,port; the Fake refuses it, as current kernels
//     do. hash:ip,port,ip and hash:ip,port,net take it in either address component.
//   - a /0 net in hash:ip,port,net (the kernel: "The value of the CIDR parameter
//     of the IP address is invalid") and an address of the other family (libipset:
//     "Syntax error: cannot parse ...") are refused by the validation Apply shares
//     with the real runner, before anything runs, when the set's type is known from
//     the batch or no supported type takes the entry; otherwise (an IPv4 address
//     for an inet6 set created earlier) by the userspace parse, which discards the
//     unsent buffer. Both are ErrInvalid.
//
// TestFakeConformance and TestIntegrationConformance (the host's ipset in a
// private namespace) run the same scenarios, each refusal included.
type Fake struct {
	mu      sync.Mutex
	sets    map[string]*fakeSet
	refs    map[string]int
	ops     OpCounts
	applies int

	// InjectError, when set, is called before each operation executes (index in the
	// transaction and its restore line); a non-nil error fails that line as if the
	// kernel had returned it.
	InjectError func(index int, line string) error
}

type fakeSet struct {
	spec    Set
	entries map[string]struct{}
}

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{sets: map[string]*fakeSet{}, refs: map[string]int{}}
}

var _ Interface = &Fake{}

// SetReferences records how many kernel objects (iptables rules) use a set; a set
// with references cannot be destroyed.
func (f *Fake) SetReferences(set string, refs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if refs <= 0 {
		delete(f.refs, set)
	} else {
		f.refs[set] = refs
	}
}

// ReplaceReferences sets the references of every set at once (sets not in refs
// have none), e.g. from the iptables Fake's MatchSetRefs after each restore.
func (f *Fake) ReplaceReferences(refs map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refs = map[string]int{}
	for set, n := range refs {
		if n > 0 {
			f.refs[set] = n
		}
	}
}

// Ops returns the operations applied successfully since the last ResetCounters.
func (f *Fake) Ops() OpCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// Applies returns the number of Apply calls (restore processes) since the last
// ResetCounters.
func (f *Fake) Applies() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applies
}

// ResetCounters zeroes Ops and Applies.
func (f *Fake) ResetCounters() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops, f.applies = OpCounts{}, 0
}

// Dump prints the state like `ipset save`, sorted by set name and entry, without
// the kernel-chosen bucketsize and initval.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(f.sets)) {
		s := f.sets[name]
		b.Write(appendLine(nil, op{kind: opCreate, set: name, spec: &s.spec}))
		for _, e := range slices.Sorted(maps.Keys(s.entries)) {
			b.WriteString("add " + name + " " + e + "\n")
		}
	}
	return b.String()
}

// ListSets returns the set headers sorted by name.
func (f *Fake) ListSets(ctx context.Context) ([]*Set, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*Set
	for _, name := range slices.Sorted(maps.Keys(f.sets)) {
		s := f.sets[name].spec
		out = append(out, &s)
	}
	return out, nil
}

// ListEntries returns a set's entries sorted.
func (f *Fake) ListEntries(ctx context.Context, set string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ValidateName(set); err != nil {
		return nil, &Error{Command: "list", Index: -1, Kind: ErrInvalid, Reason: err.Error()}
	}
	s, ok := f.sets[set]
	if !ok {
		return nil, &Error{Command: "list", Index: -1, Kind: ErrSetNotFound, Reason: "set " + set + ": The set with the given name does not exist"}
	}
	return slices.Sorted(maps.Keys(s.entries)), nil
}

// SaveAll returns every set with its sorted entries.
func (f *Fake) SaveAll(ctx context.Context) (map[string]*SetWithEntries, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*SetWithEntries, len(f.sets))
	for name, s := range f.sets {
		out[name] = &SetWithEntries{Set: s.spec, Entries: slices.Sorted(maps.Keys(s.entries))}
	}
	return out, nil
}

// SaveSets returns those of the named sets that exist, with their sorted entries.
func (f *Fake) SaveSets(ctx context.Context, names []string) (map[string]*SetWithEntries, error) {
	for _, name := range names {
		if err := ValidateName(name); err != nil {
			return nil, &Error{Command: "save", Index: -1, Kind: ErrInvalid, Reason: err.Error()}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*SetWithEntries, len(names))
	for _, name := range names {
		if s, ok := f.sets[name]; ok {
			out[name] = &SetWithEntries{Set: s.spec, Entries: slices.Sorted(maps.Keys(s.entries))}
		}
	}
	return out, nil
}

// pendingADT is a parsed add/del waiting in the libipset-like buffer.
type pendingADT struct {
	index int
	o     op
}

// Apply runs the transaction with the semantics described on Fake.
func (f *Fake) Apply(ctx context.Context, tx *Transaction) error {
	if tx == nil || len(tx.ops) == 0 {
		return nil
	}
	ops, err := tx.prepare()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &Error{Command: "restore", Index: -1, Kind: ErrUnknown, Err: err}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies++

	var pending []pendingADT
	commit := func() error {
		defer func() { pending = pending[:0] }()
		for _, p := range pending {
			if err := f.exec(p.index, p.o); err != nil {
				return err
			}
		}
		return nil
	}
	for i, o := range ops {
		// Userspace parse: add/del need the set (for its type) and a fitting entry.
		if o.kind == opAdd || o.kind == opDel {
			s, ok := f.sets[o.set]
			if !ok {
				return f.lineErr(i, o, ErrSetNotFound, "The set with the given name does not exist")
			}
			canon, err := CanonicalEntry(s.spec.Type, s.spec.Family, o.arg)
			if err != nil {
				return f.lineErr(i, o, ErrInvalid, "Syntax error: "+err.Error())
			}
			o.arg = canon
			if len(pending) > 0 && pending[0].o.set == o.set {
				pending = append(pending, pendingADT{i, o})
				continue
			}
		}
		if err := commit(); err != nil {
			return err
		}
		if o.kind == opAdd || o.kind == opDel {
			pending = append(pending, pendingADT{i, o})
			continue
		}
		if err := f.exec(i, o); err != nil {
			return err
		}
	}
	return commit()
}

func (f *Fake) lineErr(i int, o op, kind error, reason string) error {
	return &Error{Command: "restore", Index: i, Line: opLine(o), Kind: kind, Reason: reason}
}

// exec applies one operation as the kernel would (with -exist).
func (f *Fake) exec(i int, o op) error {
	if f.InjectError != nil {
		if err := f.InjectError(i, opLine(o)); err != nil {
			return &Error{Command: "restore", Index: i, Line: opLine(o), Kind: ErrUnknown, Reason: "injected failure", Err: err}
		}
	}
	notFound := func() error {
		return f.lineErr(i, o, ErrSetNotFound, "The set with the given name does not exist")
	}
	switch o.kind {
	case opCreate:
		if cur, ok := f.sets[o.set]; ok {
			if !sameForCreate(&cur.spec, o.spec) {
				return f.lineErr(i, o, ErrSetExists, "Set cannot be created: set with the same name already exists")
			}
			break
		}
		f.sets[o.set] = &fakeSet{spec: *o.spec, entries: map[string]struct{}{}}
		f.sets[o.set].spec.Name = o.set
	case opAdd:
		s := f.sets[o.set]
		if s == nil {
			return notFound()
		}
		if err := f.checkZero(i, o, s); err != nil {
			return err
		}
		if _, ok := s.entries[o.arg]; ok {
			break
		}
		if err := f.checkRange(i, o, s); err != nil {
			return err
		}
		if s.spec.Type != BitmapPort && len(s.entries) >= s.spec.MaxElem {
			return f.lineErr(i, o, ErrSetFull, "Hash is full, cannot add more elements")
		}
		s.entries[o.arg] = struct{}{}
	case opDel:
		s := f.sets[o.set]
		if s == nil {
			return notFound()
		}
		if err := f.checkZero(i, o, s); err != nil {
			return err
		}
		if err := f.checkRange(i, o, s); err != nil {
			return err
		}
		delete(s.entries, o.arg)
	case opFlush:
		s := f.sets[o.set]
		if s == nil {
			return notFound()
		}
		clear(s.entries)
	case opDestroy:
		if _, ok := f.sets[o.set]; !ok {
			break // -exist
		}
		if f.refs[o.set] > 0 {
			return f.lineErr(i, o, ErrSetInUse, "Set cannot be destroyed: it is in use by a kernel component")
		}
		delete(f.sets, o.set)
	case opSwap:
		a, b := f.sets[o.set], f.sets[o.arg]
		if a == nil {
			return notFound()
		}
		if b == nil {
			return f.lineErr(i, o, ErrSetNotFound, "Sets cannot be swapped: the second set does not exist")
		}
		if !swappable(&a.spec, &b.spec) {
			return f.lineErr(i, o, ErrTypeMismatch, "The sets cannot be swapped: their type does not match")
		}
		f.sets[o.set], f.sets[o.arg] = b, a
		a.spec.Name, b.spec.Name = o.arg, o.set
	default:
		return fmt.Errorf("ipset fake: unknown operation kind %d", o.kind)
	}
	f.ops.count(o.kind)
	return nil
}

// checkZero refuses the zero address where the kernel does (see Fake). The
// entry is canonical: its first component is the address.
func (f *Fake) checkZero(i int, o op, s *fakeSet) error {
	addr, _, _ := strings.Cut(o.arg, ",")
	if addr != "0.0.0.0" && addr != "::" {
		return nil
	}
	switch s.spec.Type {
	case HashIP:
		return f.lineErr(i, o, ErrInvalid, "Null-valued element, cannot be stored in a hash type of set")
	case HashIPPort:
		return f.lineErr(i, o, ErrInvalid, "Kernel error received: Invalid argument")
	}
	return nil
}

func (f *Fake) checkRange(i int, o op, s *fakeSet) error {
	if s.spec.Type != BitmapPort {
		return nil
	}
	p, _ := parsePort(o.arg) // canonical already
	if p < s.spec.PortMin || p > s.spec.PortMax {
		return f.lineErr(i, o, ErrOutOfRange, "Element is out of the range of the set")
	}
	return nil
}

// sameForCreate is the kernel's -exist test for create: same type and the
// type-specific parameters it compares (maxelem for hash types, the range for
// bitmap:port). Family and hashsize are not compared (seen on Linux 6.18).
func sameForCreate(cur, want *Set) bool {
	if cur.Type != want.Type {
		return false
	}
	if cur.Type == BitmapPort {
		return cur.PortMin == want.PortMin && cur.PortMax == want.PortMax
	}
	return cur.MaxElem == want.MaxElem
}

// swappable is the kernel's swap test: same type features and family. Among the
// supported types the features differ for every pair, so the type must be equal.
func swappable(a, b *Set) bool {
	return a.Type == b.Type && a.Family == b.Family
}
