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
		if f.exists {
			return nil, nil
		}
		f.exists = true
		return func() { f.exists = false }, nil
	}
	if !f.exists {
		return nil, errnof(unix.ENOENT, "table %s does not exist", f.table)
	}
	switch o.kind {
	case opDeleteTable:
		chains, sets := f.chains, f.sets
		f.exists, f.chains, f.sets = false, map[string]*fakeChain{}, map[string]*fakeSet{}
		return func() { f.exists, f.chains, f.sets = true, chains, sets }, nil

	case opAddChain:
		c := o.chain
		if c.base() {
			if _, err := hookNum(c.Hook); err != nil {
				return nil, errors.Join(err, unix.EINVAL)
			}
			if c.Type != ChainTypeFilter && c.Type != ChainTypeNAT {
				return nil, errnof(unix.ENOENT, "chain type %q", c.Type)
			}
			if c.Type == ChainTypeNAT && c.Hook == HookForward {
				return nil, errnof(unix.EOPNOTSUPP, "a nat chain on the forward hook")
			}
		}
		old, ok := f.chains[o.name]
		if !ok {
			f.chains[o.name] = &fakeChain{def: c}
			return func() { delete(f.chains, o.name) }, nil
		}
		switch {
		case !c.base():
			return nil, nil // adding a chain by name alone leaves it as it is
		case !old.def.base():
			return nil, errnof(unix.EOPNOTSUPP, "chain %s exists without a hook", o.name)
		case old.def != c:
			return nil, errnof(unix.EOPNOTSUPP, "chain %s exists with another type, hook or priority", o.name)
		}
		return nil, nil

	case opFlushChain:
		c, ok := f.chains[o.name]
		if !ok {
			return nil, errnof(unix.ENOENT, "chain %s does not exist", o.name)
		}
		rules := c.rules
		c.rules = nil
		return func() { c.rules = rules }, nil

	case opDeleteChain:
		c, ok := f.chains[o.name]
		if !ok {
			return nil, errnof(unix.ENOENT, "chain %s does not exist", o.name)
		}
		// The kernel deletes the chain's rules with it; only jumps from other
		// chains keep it.
		if f.chainReferencedFromOthers(o.name) {
			return nil, errnof(unix.EBUSY, "chain %s is the target of a jump", o.name)
		}
		delete(f.chains, o.name)
		return func() { f.chains[o.name] = c }, nil

	case opAddRule:
		c, ok := f.chains[o.name]
		if !ok {
			return nil, errnof(unix.ENOENT, "chain %s does not exist", o.name)
		}
		if _, err := o.rule.exprs(); err != nil {
			return nil, errors.Join(err, unix.EINVAL)
		}
		for _, s := range o.rule.Stmts {
			switch s := s.(type) {
			case InSet:
				set, ok := f.sets[s.Set]
				if !ok {
					return nil, errnof(unix.ENOENT, "set %s does not exist", s.Set)
				}
				if err := s.checkSet(set.def); err != nil {
					return nil, err
				}
			case Verdict:
				if s.Kind == Jump || s.Kind == Goto {
					to, ok := f.chains[s.Chain]
					if !ok {
						return nil, errnof(unix.ENOENT, "chain %s does not exist", s.Chain)
					}
					if to.def.base() {
						return nil, errnof(unix.EOPNOTSUPP, "a jump to base chain %s", s.Chain)
					}
				}
			}
		}
		n := len(c.rules)
		c.rules = append(c.rules, o.rule)
		return func() { c.rules = c.rules[:n] }, nil

	case opAddSet:
		if err := o.set.validate(); err != nil {
			return nil, errors.Join(err, unix.EINVAL)
		}
		old, ok := f.sets[o.name]
		if !ok {
			s := o.set
			s.Key = append([]KeyType(nil), o.set.Key...)
			f.sets[o.name] = &fakeSet{def: s, elems: map[string]element{}}
			return func() { delete(f.sets, o.name) }, nil
		}
		if old.def.typeString() != o.set.typeString() || old.def.flags() != o.set.flags() {
			return nil, errnof(unix.EEXIST, "set %s exists with type %s and flags %q", o.name, old.def.typeString(), old.def.flags())
		}
		return nil, nil

	case opFlushSet:
		s, ok := f.sets[o.name]
		if !ok {
			return nil, errnof(unix.ENOENT, "set %s does not exist", o.name)
		}
		elems := s.elems
		s.elems = map[string]element{}
		return func() { s.elems = elems }, nil

	case opDeleteSet:
		s, ok := f.sets[o.name]
		if !ok {
			return nil, errnof(unix.ENOENT, "set %s does not exist", o.name)
		}
		if f.setReferenced(o.name) {
			return nil, errnof(unix.EBUSY, "set %s is used by a rule", o.name)
		}
		delete(f.sets, o.name)
		return func() { f.sets[o.name] = s }, nil

	case opAddElements:
		s, ok := f.sets[o.name]
		if !ok {
			return nil, errnof(unix.ENOENT, "set %s does not exist", o.name)
		}
		if err := checkTimeout(s.def, o.timeout); err != nil {
			return nil, err
		}
		var added []string
		undo := func() {
			for _, k := range added {
				delete(s.elems, k)
			}
		}
		for _, fields := range o.elems {
			text, e, err := canonicalElement(s.def, fields)
			if err != nil {
				undo()
				return nil, errors.Join(err, unix.EINVAL)
			}
			if _, ok := s.elems[text]; ok {
				// Kept as it is, its lifetime too (kernels before 6.10).
				continue
			}
			if o.timeout != 0 {
				e.timeout, e.expires = o.timeout, f.clock.Now().Add(o.timeout)
			}
			if s.def.Interval {
				for other, oe := range s.elems {
					if overlaps(s.def, e, oe) {
						undo()
						return nil, errnof(unix.EEXIST, "set %s: %s overlaps %s", o.name, text, other)
					}
				}
			}
			s.elems[text] = e
			added = append(added, text)
		}
		return undo, nil

	case opDeleteElements:
		s, ok := f.sets[o.name]
		if !ok {
			return nil, errnof(unix.ENOENT, "set %s does not exist", o.name)
		}
		removed := map[string]element{}
		undo := func() {
			for k, e := range removed {
				s.elems[k] = e
			}
		}
		for _, fields := range o.elems {
			text, de, err := canonicalElement(s.def, fields)
			if err != nil {
				undo()
				return nil, errors.Join(err, unix.EINVAL)
			}
			e, ok := s.elems[text]
			if !ok && s.def.Interval {
				// The kernel's concatenated-range backend finds the element to
				// delete by the first key alone: the element holding it goes.
				for other, oe := range s.elems {
					if overlaps(s.def, element{lo: de.lo, hi: de.lo}, oe) {
						text, e, ok = other, oe, true
						break
					}
				}
			}
			if !ok {
				undo()
				return nil, errnof(unix.ENOENT, "set %s has no element %s", o.name, text)
			}
			delete(s.elems, text)
			removed[text] = e
		}
		return undo, nil
	}
	return nil, fmt.Errorf("unknown operation %d", o.kind)
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
