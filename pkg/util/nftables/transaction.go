package nftables

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Ruleset is one nftables table that this process owns, written in atomic
// transactions: the kernel applies a transaction's operations in order and either
// all of them or none (a refusal of any one leaves the table as it was). Errors
// wrap the kernel's errno (unix.ENOENT, EEXIST, EBUSY, EINVAL, EOPNOTSUPP), so
// errors.Is tells them apart, in the real implementation and in the Fake alike.
type Ruleset interface {
	// Table is the table this Ruleset writes.
	Table() Table
	// Run applies tx atomically.
	Run(ctx context.Context, tx *Transaction) error
	// ListElements returns the elements of a set, each as its fields in nft's
	// notation ("10.96.0.1", "tcp", "443"; a prefix as "10.0.0.0/8").
	ListElements(ctx context.Context, set string) ([][]string, error)
	// List returns the names of the table's chains and sets, each sorted (none
	// when the table does not exist).
	List(ctx context.Context) (chains, sets []string, err error)
	// Dump prints the whole table in the canonical form of ParseListing.
	Dump(ctx context.Context) (string, error)
}

type opKind int

const (
	opAddTable opKind = iota
	opDeleteTable
	opAddChain
	opFlushChain
	opDeleteChain
	opAddRule
	opAddSet
	opFlushSet
	opDeleteSet
	opAddElements
	opDeleteElements
)

type op struct {
	kind  opKind
	chain Chain  // opAddChain
	set   Set    // opAddSet
	name  string // the chain or set the op is about
	rule  Rule
	elems [][]string
	// timeout of the elements added (opAddElements; 0: none).
	timeout time.Duration
}

// Transaction is a list of operations on one table, applied by Ruleset.Run.
type Transaction struct {
	ops []op
}

// NewTransaction returns an empty transaction.
func NewTransaction() *Transaction { return &Transaction{} }

// Len is the number of operations.
func (t *Transaction) Len() int { return len(t.ops) }

// AddTable creates the table; nothing happens if it exists.
func (t *Transaction) AddTable() { t.ops = append(t.ops, op{kind: opAddTable}) }

// DeleteTable deletes the table and everything in it (ENOENT if it is missing).
func (t *Transaction) DeleteTable() { t.ops = append(t.ops, op{kind: opDeleteTable}) }

// AddChain creates a chain; nothing happens if the same chain exists.
func (t *Transaction) AddChain(c Chain) {
	t.ops = append(t.ops, op{kind: opAddChain, chain: c, name: c.Name})
}

// FlushChain deletes every rule of a chain.
func (t *Transaction) FlushChain(name string) {
	t.ops = append(t.ops, op{kind: opFlushChain, name: name})
}

// DeleteChain deletes a chain and its rules; a chain another chain jumps to is
// EBUSY.
func (t *Transaction) DeleteChain(name string) {
	t.ops = append(t.ops, op{kind: opDeleteChain, name: name})
}

// AddRule appends a rule to a chain.
func (t *Transaction) AddRule(chain string, r Rule) {
	t.ops = append(t.ops, op{kind: opAddRule, name: chain, rule: r})
}

// AddSet creates a set; nothing happens if a set of that name and type exists
// (its comment is not changed).
func (t *Transaction) AddSet(s Set) {
	t.ops = append(t.ops, op{kind: opAddSet, set: s, name: s.Name})
}

// FlushSet deletes every element of a set.
func (t *Transaction) FlushSet(name string) {
	t.ops = append(t.ops, op{kind: opFlushSet, name: name})
}

// DeleteSet deletes a set no rule references.
func (t *Transaction) DeleteSet(name string) {
	t.ops = append(t.ops, op{kind: opDeleteSet, name: name})
}

// AddElements adds elements to a set; an element already there is not an error,
// one that overlaps another interval is (EEXIST).
func (t *Transaction) AddElements(set string, elems ...[]string) {
	if len(elems) > 0 {
		t.ops = append(t.ops, op{kind: opAddElements, name: set, elems: elems})
	}
}

// minTimeout is the shortest element timeout: the kernel counts in milliseconds
// and takes a timeout of 0 for none, so a shorter one would make an element that
// never lapses (both implementations refuse it with EINVAL).
const minTimeout = time.Millisecond

// AddElementsWithTimeout adds elements that lapse timeout after the transaction:
// lookups stop matching them, listings leave them out, and deleting one is ENOENT.
// The set must have been made with Timeout (EINVAL otherwise). Adding an element
// that is there does not reliably change when it lapses (kernels before 6.10
// 6.1 keeps its expiry, 6.18 takes the new timeout): delete it first, in the same
// transaction, to give it a new lifetime.
func (t *Transaction) AddElementsWithTimeout(set string, timeout time.Duration, elems ...[]string) {
	if len(elems) > 0 {
		t.ops = append(t.ops, op{kind: opAddElements, name: set, elems: elems, timeout: timeout})
	}
}

// DeleteElements removes elements from a set; a missing one is ENOENT.
func (t *Transaction) DeleteElements(set string, elems ...[]string) {
	if len(elems) > 0 {
		t.ops = append(t.ops, op{kind: opDeleteElements, name: set, elems: elems})
	}
}

// String lists the operations in nft's command syntax, for logs and errors.
func (t *Transaction) String() string {
	var b strings.Builder
	for _, o := range t.ops {
		b.WriteString(o.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func (o op) String() string {
	elems := func() string {
		parts := make([]string, len(o.elems))
		for i, e := range o.elems {
			parts[i] = strings.Join(e, " . ")
			if o.timeout != 0 {
				parts[i] += " timeout " + DurationString(o.timeout)
			}
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	}
	switch o.kind {
	case opAddTable:
		return "add table"
	case opDeleteTable:
		return "delete table"
	case opAddChain:
		if o.chain.base() {
			return fmt.Sprintf("add chain %s { type %s hook %s priority %d; }", o.name, o.chain.Type, o.chain.Hook, o.chain.Priority)
		}
		return "add chain " + o.name
	case opFlushChain:
		return "flush chain " + o.name
	case opDeleteChain:
		return "delete chain " + o.name
	case opAddRule:
		return "add rule " + o.name + " " + o.rule.String()
	case opAddSet:
		s := fmt.Sprintf("add set %s { type %s;", o.name, o.set.typeString())
		if f := o.set.flags(); f != "" {
			s += " flags " + f + ";"
		}
		return s + " }"
	case opFlushSet:
		return "flush set " + o.name
	case opDeleteSet:
		return "delete set " + o.name
	case opAddElements:
		return "add element " + o.name + " " + elems()
	case opDeleteElements:
		return "delete element " + o.name + " " + elems()
	}
	return "?"
}

// OpError is a refused operation of a transaction: the whole transaction was
// rolled back.
type OpError struct {
	Table Table
	Op    string
	Err   error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("nftables %s: %s: %v", e.Table, e.Op, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// IsNotFound reports whether err is the kernel's ENOENT.
func IsNotFound(err error) bool { return errors.Is(err, unix.ENOENT) }
