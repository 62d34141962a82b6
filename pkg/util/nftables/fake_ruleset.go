package nftables

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// FakeRuleset is an in-memory table that refuses what the kernel refuses, with the
// kernel's errno, and applies a transaction entirely or not at all (the shared
// conformance tests run the same transactions against it and against the kernel).
// Elements with a timeout lapse by its clock (SetClock; the real one by default):
// from then on they are gone, as the kernel's lookups, listings and deletions
// treat them before its garbage collector has removed them.
type FakeRuleset struct {
	mu     sync.Mutex
	table  Table
	exists bool
	chains map[string]*fakeChain
	sets   map[string]*fakeSet
	clock  clock.PassiveClock

	// Transactions counts the transactions Run applied (refused ones included).
	Transactions int
	// Ops counts the operations of the transactions applied.
	Ops int
}

type fakeChain struct {
	def   Chain
	rules []Rule
}

type fakeSet struct {
	def   Set
	elems map[string]element // canonical text -> key range
}

// NewFakeRuleset returns an empty fake of table t (the table does not exist yet).
func NewFakeRuleset(t Table) *FakeRuleset {
	return &FakeRuleset{table: t, chains: map[string]*fakeChain{}, sets: map[string]*fakeSet{}, clock: clock.RealClock{}}
}

// SetClock makes the elements' timeouts run by c (a fake clock a test steps).
func (f *FakeRuleset) SetClock(c clock.PassiveClock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = c
}

// expire removes the elements whose timeout has run out (f.mu held). The kernel
// counts an element lapsed from the moment its expiration is reached.
func (f *FakeRuleset) expire() {
	now := f.clock.Now()
	for _, s := range f.sets {
		for k, e := range s.elems {
			if !e.expires.IsZero() && !now.Before(e.expires) {
				delete(s.elems, k)
			}
		}
	}
}

func (f *FakeRuleset) Table() Table { return f.table }

func (f *FakeRuleset) Run(ctx context.Context, tx *Transaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire()
	f.Transactions++
	var undo []func()
	fail := func(o op, err error) error {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return &OpError{Table: f.table, Op: o.String(), Err: err}
	}
	for _, o := range tx.ops {
		u, err := f.apply(o)
		if err != nil {
			if len(tx.ops) > 1 {
				err = fmt.Errorf("in a transaction of %d operations: %w", len(tx.ops), err)
			}
			return fail(o, err)
		}
		if u != nil {
			undo = append(undo, u)
		}
	}
	// The kernel checks at the end of a batch that every rule may run where the
	// base chains reaching it hook in.
	if err := f.validateHooks(); err != nil {
		return fail(op{kind: opAddRule}, err)
	}
	f.Ops += len(tx.ops)
	return nil
}

// checkTimeout refuses elements with a timeout their set cannot hold: the
// kernel's EINVAL for a set without the timeout flag, and ours for a timeout the
// kernel would read as none (minTimeout).
func checkTimeout(s Set, timeout time.Duration) error {
	switch {
	case timeout == 0:
		return nil
	case !s.Timeout:
		return errnof(unix.EINVAL, "set %s has no timeout flag: its elements cannot lapse", s.Name)
	case timeout < minTimeout:
		return errnof(unix.EINVAL, "timeout %v: under %v the kernel would keep the element for ever", timeout, minTimeout)
	}
	return nil
}

func errnof(errno unix.Errno, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errno)
}

// apply performs one operation and returns how to take it back.
func (f *FakeRuleset) apply(o op) (func(), error) {
	if o.kind == opAddTable {
		return f.addTable(), nil
	}
	if !f.exists {
		return nil, errnof(unix.ENOENT, "table %s does not exist", f.table)
	}
	switch o.kind {
	case opDeleteTable:
		return f.deleteTable(), nil
	case opAddChain:
		return f.addChain(o.name, o.chain)
	case opFlushChain:
		return f.flushChain(o.name)
	case opDeleteChain:
		return f.deleteChain(o.name)
	case opAddRule:
		return f.addRule(o.name, o.rule)
	case opAddSet:
		return f.addSet(o.name, o.set)
	case opFlushSet:
		return f.flushSet(o.name)
	case opDeleteSet:
		return f.deleteSet(o.name)
	case opAddElements:
		return f.addElements(o.name, o.elems, o.timeout)
	case opDeleteElements:
		return f.deleteElements(o.name, o.elems)
	}
	return nil, fmt.Errorf("unknown operation %d", o.kind)
}

// chain is the chain named name, or the kernel's ENOENT.
func (f *FakeRuleset) chain(name string) (*fakeChain, error) {
	c, ok := f.chains[name]
	if !ok {
		return nil, errnof(unix.ENOENT, "chain %s does not exist", name)
	}
	return c, nil
}

// set is the set named name, or the kernel's ENOENT.
func (f *FakeRuleset) set(name string) (*fakeSet, error) {
	s, ok := f.sets[name]
	if !ok {
		return nil, errnof(unix.ENOENT, "set %s does not exist", name)
	}
	return s, nil
}

// addTable creates the table; adding a table that exists changes nothing.
func (f *FakeRuleset) addTable() func() {
	if f.exists {
		return nil
	}
	f.exists = true
	return func() { f.exists = false }
}

// deleteTable removes the table with its chains and sets.
func (f *FakeRuleset) deleteTable() func() {
	chains, sets := f.chains, f.sets
	f.exists, f.chains, f.sets = false, map[string]*fakeChain{}, map[string]*fakeSet{}
	return func() { f.exists, f.chains, f.sets = true, chains, sets }
}

// addChain creates chain c under name, or accepts it again unchanged.
func (f *FakeRuleset) addChain(name string, c Chain) (func(), error) {
	if c.base() {
		if err := checkBaseChain(c); err != nil {
			return nil, err
		}
	}
	old, ok := f.chains[name]
	if !ok {
		f.chains[name] = &fakeChain{def: c}
		return func() { delete(f.chains, name) }, nil
	}
	switch {
	case !c.base():
		return nil, nil // adding a chain by name alone leaves it as it is
	case !old.def.base():
		return nil, errnof(unix.EOPNOTSUPP, "chain %s exists without a hook", name)
	case old.def != c:
		return nil, errnof(unix.EOPNOTSUPP, "chain %s exists with another type, hook or priority", name)
	}
	return nil, nil
}

// checkBaseChain refuses a base chain's hook and type as the kernel does.
func checkBaseChain(c Chain) error {
	if _, err := hookNum(c.Hook); err != nil {
		return errors.Join(err, unix.EINVAL)
	}
	if c.Type != ChainTypeFilter && c.Type != ChainTypeNAT {
		return errnof(unix.ENOENT, "chain type %q", c.Type)
	}
	if c.Type == ChainTypeNAT && c.Hook == HookForward {
		return errnof(unix.EOPNOTSUPP, "a nat chain on the forward hook")
	}
	return nil
}

// flushChain removes the chain's rules.
func (f *FakeRuleset) flushChain(name string) (func(), error) {
	c, err := f.chain(name)
	if err != nil {
		return nil, err
	}
	rules := c.rules
	c.rules = nil
	return func() { c.rules = rules }, nil
}

// deleteChain removes the chain and its rules.
func (f *FakeRuleset) deleteChain(name string) (func(), error) {
	c, err := f.chain(name)
	if err != nil {
		return nil, err
	}
	// The kernel deletes the chain's rules with it; only jumps from other
	// chains keep it.
	if f.chainReferencedFromOthers(name) {
		return nil, errnof(unix.EBUSY, "chain %s is the target of a jump", name)
	}
	delete(f.chains, name)
	return func() { f.chains[name] = c }, nil
}

// addRule appends r to the chain once everything it refers to exists.
func (f *FakeRuleset) addRule(name string, r Rule) (func(), error) {
	c, err := f.chain(name)
	if err != nil {
		return nil, err
	}
	if _, err := r.exprs(); err != nil {
		return nil, errors.Join(err, unix.EINVAL)
	}
	if err := f.checkRuleReferences(r); err != nil {
		return nil, err
	}
	n := len(c.rules)
	c.rules = append(c.rules, r)
	return func() { c.rules = c.rules[:n] }, nil
}

// checkRuleReferences refuses a rule that looks up a missing or mismatched set,
// or jumps to a missing chain or to a base chain.
func (f *FakeRuleset) checkRuleReferences(r Rule) error {
	for _, s := range r.Stmts {
		switch s := s.(type) {
		case InSet:
			set, err := f.set(s.Set)
			if err != nil {
				return err
			}
			if err := s.checkSet(set.def); err != nil {
				return err
			}
		case Verdict:
			if s.Kind == Jump || s.Kind == Goto {
				to, err := f.chain(s.Chain)
				if err != nil {
					return err
				}
				if to.def.base() {
					return errnof(unix.EOPNOTSUPP, "a jump to base chain %s", s.Chain)
				}
			}
		}
	}
	return nil
}

// addSet creates set s under name, or accepts it again with the same type and flags.
func (f *FakeRuleset) addSet(name string, s Set) (func(), error) {
	if err := s.validate(); err != nil {
		return nil, errors.Join(err, unix.EINVAL)
	}
	old, ok := f.sets[name]
	if !ok {
		def := s
		def.Key = append([]KeyType(nil), s.Key...)
		f.sets[name] = &fakeSet{def: def, elems: map[string]element{}}
		return func() { delete(f.sets, name) }, nil
	}
	if old.def.typeString() != s.typeString() || old.def.flags() != s.flags() {
		return nil, errnof(unix.EEXIST, "set %s exists with type %s and flags %q", name, old.def.typeString(), old.def.flags())
	}
	return nil, nil
}

// flushSet removes the set's elements.
func (f *FakeRuleset) flushSet(name string) (func(), error) {
	s, err := f.set(name)
	if err != nil {
		return nil, err
	}
	elems := s.elems
	s.elems = map[string]element{}
	return func() { s.elems = elems }, nil
}

// deleteSet removes a set no rule uses.
func (f *FakeRuleset) deleteSet(name string) (func(), error) {
	s, err := f.set(name)
	if err != nil {
		return nil, err
	}
	if f.setReferenced(name) {
		return nil, errnof(unix.EBUSY, "set %s is used by a rule", name)
	}
	delete(f.sets, name)
	return func() { f.sets[name] = s }, nil
}

// addElements adds every element or none; an element the set holds already is
// kept as it is.
func (f *FakeRuleset) addElements(name string, elems [][]string, timeout time.Duration) (func(), error) {
	s, err := f.set(name)
	if err != nil {
		return nil, err
	}
	if err := checkTimeout(s.def, timeout); err != nil {
		return nil, err
	}
	var added []string
	undo := func() {
		for _, k := range added {
			delete(s.elems, k)
		}
	}
	for _, fields := range elems {
		text, e, err := canonicalElement(s.def, fields)
		if err != nil {
			undo()
			return nil, errors.Join(err, unix.EINVAL)
		}
		if _, ok := s.elems[text]; ok {
			// Kept as it is, its lifetime too (kernels before 6.10).
			continue
		}
		if timeout != 0 {
			e.timeout, e.expires = timeout, f.clock.Now().Add(timeout)
		}
		if other, ok := s.overlapping(e); ok {
			undo()
			return nil, errnof(unix.EEXIST, "set %s: %s overlaps %s", name, text, other)
		}
		s.elems[text] = e
		added = append(added, text)
	}
	return undo, nil
}

// overlapping names an element of an interval set that shares a key with e; a set
// without intervals has none.
func (s *fakeSet) overlapping(e element) (string, bool) {
	if !s.def.Interval {
		return "", false
	}
	for other, oe := range s.elems {
		if overlaps(s.def, e, oe) {
			return other, true
		}
	}
	return "", false
}

// deleteElements removes every element or none; each must be in the set.
func (f *FakeRuleset) deleteElements(name string, elems [][]string) (func(), error) {
	s, err := f.set(name)
	if err != nil {
		return nil, err
	}
	removed := map[string]element{}
	undo := func() {
		for k, e := range removed {
			s.elems[k] = e
		}
	}
	for _, fields := range elems {
		text, de, err := canonicalElement(s.def, fields)
		if err != nil {
			undo()
			return nil, errors.Join(err, unix.EINVAL)
		}
		e, ok := s.elems[text]
		if !ok && s.def.Interval {
			// The kernel's concatenated-range backend finds the element to
			// delete by the first key alone: the element holding it goes.
			if other, found := s.overlapping(element{lo: de.lo, hi: de.lo}); found {
				text, e, ok = other, s.elems[other], true
			}
		}
		if !ok {
			undo()
			return nil, errnof(unix.ENOENT, "set %s has no element %s", name, text)
		}
		delete(s.elems, text)
		removed[text] = e
	}
	return undo, nil
}

// overlaps reports whether two elements of an interval set share a key: every
// field's ranges intersect.
func overlaps(s Set, a, b element) bool {
	off := 0
	for _, k := range s.Key {
		n := k.padded()
		alo, ahi := a.lo[off:off+n], a.hi[off:off+n]
		blo, bhi := b.lo[off:off+n], b.hi[off:off+n]
		if string(ahi) < string(blo) || string(bhi) < string(alo) {
			return false
		}
		off += n
	}
	return true
}

func (f *FakeRuleset) chainReferencedFromOthers(name string) bool {
	for n, c := range f.chains {
		if n == name {
			continue
		}
		for _, r := range c.rules {
			for _, s := range r.Stmts {
				if v, ok := s.(Verdict); ok && (v.Kind == Jump || v.Kind == Goto) && v.Chain == name {
					return true
				}
			}
		}
	}
	return false
}

func (f *FakeRuleset) setReferenced(name string) bool {
	for _, c := range f.chains {
		for _, r := range c.rules {
			for _, s := range r.Stmts {
				if l, ok := s.(InSet); ok && l.Set == name {
					return true
				}
			}
		}
	}
	return false
}

// validateHooks walks every base chain's jumps and refuses a masquerade outside a
// nat chain on postrouting and a reject outside prerouting, input, forward and
// output, with the kernel's EOPNOTSUPP.
func (f *FakeRuleset) validateHooks() error {
	for _, base := range f.chains {
		if !base.def.base() {
			continue
		}
		seen := map[string]bool{}
		var walk func(c *fakeChain) error
		walk = func(c *fakeChain) error {
			if seen[c.def.Name] {
				return nil
			}
			seen[c.def.Name] = true
			for _, r := range c.rules {
				for _, s := range r.Stmts {
					switch s := s.(type) {
					case Masquerade:
						if base.def.Type != ChainTypeNAT || base.def.Hook != HookPostrouting {
							return errnof(unix.EOPNOTSUPP, "masquerade reached from %s chain %s on %s", base.def.Type, base.def.Name, base.def.Hook)
						}
					case Reject:
						if base.def.Hook == HookPostrouting {
							return errnof(unix.EOPNOTSUPP, "reject reached from chain %s on %s", base.def.Name, base.def.Hook)
						}
					case Verdict:
						if to, ok := f.chains[s.Chain]; ok && (s.Kind == Jump || s.Kind == Goto) {
							if err := walk(to); err != nil {
								return err
							}
						}
					}
				}
			}
			return nil
		}
		if err := walk(base); err != nil {
			return err
		}
	}
	return nil
}

func (f *FakeRuleset) ListElements(ctx context.Context, set string) ([][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire()
	s, ok := f.sets[set]
	if !ok || !f.exists {
		return nil, errnof(unix.ENOENT, "set %s does not exist", set)
	}
	keys := make([]string, 0, len(s.elems))
	for k := range s.elems {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]string, len(keys))
	for i, k := range keys {
		out[i] = strings.Split(k, " . ")
	}
	return out, nil
}

func (f *FakeRuleset) List(ctx context.Context) (chains, sets []string, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire()
	if !f.exists {
		return nil, nil, nil
	}
	for n := range f.chains {
		chains = append(chains, n)
	}
	for n := range f.sets {
		sets = append(sets, n)
	}
	sort.Strings(chains)
	sort.Strings(sets)
	return chains, sets, nil
}

// Dump prints the table in ParseListing's canonical form ("" when it does not exist).
func (f *FakeRuleset) Dump(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire()
	if !f.exists {
		return "", nil
	}
	chains := map[string]*canonChain{}
	for n, c := range f.chains {
		cc := &canonChain{header: chainHeader(c.def)}
		for _, r := range c.rules {
			cc.rules = append(cc.rules, r.String())
		}
		chains[n] = cc
	}
	sets := map[string]*canonSet{}
	for n, s := range f.sets {
		cs := &canonSet{header: setHeader(s.def)}
		for k, e := range s.elems {
			if e.timeout != 0 {
				k += " timeout " + DurationString(e.timeout)
			}
			cs.elems = append(cs.elems, k)
		}
		sets[n] = cs
	}
	return canonical(string(f.table.Family)+" "+f.table.Name, chains, sets), nil
}

// FakeState is a copy of what a FakeRuleset holds, for tests that interpret the
// rules (a packet tracer).
type FakeState struct {
	Chains   map[string]Chain
	Rules    map[string][]Rule
	Sets     map[string]Set
	Elements map[string][][]string // set -> elements, each as its fields
}

// State copies the table's chains, rules, sets and elements.
func (f *FakeRuleset) State() FakeState {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire()
	st := FakeState{Chains: map[string]Chain{}, Rules: map[string][]Rule{}, Sets: map[string]Set{}, Elements: map[string][][]string{}}
	for n, c := range f.chains {
		st.Chains[n] = c.def
		st.Rules[n] = append([]Rule(nil), c.rules...)
	}
	for n, s := range f.sets {
		st.Sets[n] = s.def
		for k := range s.elems {
			st.Elements[n] = append(st.Elements[n], strings.Split(k, " . "))
		}
	}
	return st
}
