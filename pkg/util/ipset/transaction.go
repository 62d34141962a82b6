package ipset

// opKind is one line of an `ipset restore` script.
type opKind int

const (
	opCreate opKind = iota
	opAdd
	opDel
	opFlush
	opDestroy
	opSwap
)

type op struct {
	kind opKind
	set  string
	arg  string // entry for add/del, second set for swap
	spec *Set   // for create
}

// Transaction is an ordered batch of ipset operations applied by Interface.Apply as
// one `ipset restore -exist` run (or over netlink to the same effect, NewNetlink):
// adding an existing entry, deleting a missing one and creating an existing set of
// the same type are no-ops. Like the kernel, a failing line stops the batch and the
// lines before it stay applied; callers treat any error as "state unknown" and
// reconcile fully next time.
type Transaction struct {
	ops []op
}

// Create creates the set if it does not exist (an existing set of another type fails).
func (tx *Transaction) Create(set *Set) {
	tx.ops = append(tx.ops, op{kind: opCreate, set: set.Name, spec: set})
}

// Add adds an entry to a set.
func (tx *Transaction) Add(set, entry string) {
	tx.ops = append(tx.ops, op{kind: opAdd, set: set, arg: entry})
}

// Del removes an entry from a set.
func (tx *Transaction) Del(set, entry string) {
	tx.ops = append(tx.ops, op{kind: opDel, set: set, arg: entry})
}

// Flush removes every entry of a set.
func (tx *Transaction) Flush(set string) { tx.ops = append(tx.ops, op{kind: opFlush, set: set}) }

// Destroy removes a set (fails while an iptables rule references it).
func (tx *Transaction) Destroy(set string) { tx.ops = append(tx.ops, op{kind: opDestroy, set: set}) }

// Swap exchanges the contents (and types) of two existing sets atomically.
func (tx *Transaction) Swap(a, b string) { tx.ops = append(tx.ops, op{kind: opSwap, set: a, arg: b}) }

// Len is the number of operations in the batch.
func (tx *Transaction) Len() int { return len(tx.ops) }

// OpCounts counts operations by kind (what a sync reports as kernel operations).
type OpCounts struct {
	Create, Add, Del, Flush, Destroy, Swap int
}

// Total is the number of operations.
func (c OpCounts) Total() int { return c.Create + c.Add + c.Del + c.Flush + c.Destroy + c.Swap }

func (c *OpCounts) count(k opKind) {
	switch k {
	case opCreate:
		c.Create++
	case opAdd:
		c.Add++
	case opDel:
		c.Del++
	case opFlush:
		c.Flush++
	case opDestroy:
		c.Destroy++
	case opSwap:
		c.Swap++
	}
}

// Counts returns the number of operations of each kind in the batch.
func (tx *Transaction) Counts() OpCounts {
	var c OpCounts
	for _, o := range tx.ops {
		c.count(o.kind)
	}
	return c
}

// String renders the batch as the `ipset restore` script Apply would run (without
// validation; use it for logs and test failures).
func (tx *Transaction) String() string {
	var b []byte
	for _, o := range tx.ops {
		b = appendLine(b, o)
	}
	return string(b)
}
