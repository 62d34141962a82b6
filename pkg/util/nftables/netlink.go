package nftables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	gnft "github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	utilexec "k8s.io/utils/exec"
)

// elementsPerMessage bounds one netlink message of set elements; a transaction is
// still one batch, and so atomic, however many messages it takes.
const elementsPerMessage = 2048

// socketBuffer is what the netlink socket may queue each way: a transaction is one
// send, and the kernel acknowledges each of its messages before we read any.
const socketBuffer = 64 << 20

// netlinkRuleset writes one table over an nfnetlink socket (github.com/google/nftables):
// one batch per transaction, no process per write.
type netlinkRuleset struct {
	table Table
	exec  utilexec.Interface // only for Dump, which runs `nft list table`

	mu   sync.Mutex
	conn *gnft.Conn
	sets map[string]Set // the definitions of sets seen, to encode elements
}

// NewNetlink returns the real Ruleset of t, which must be an inet, ip or ip6 table.
// exec runs `nft` for Dump only (diagnostics and tests).
func NewNetlink(t Table, exec utilexec.Interface) (Ruleset, error) {
	if _, err := gnftFamily(t.Family); err != nil {
		return nil, err
	}
	r := &netlinkRuleset{table: t, exec: exec, sets: map[string]Set{}}
	if err := r.dial(); err != nil {
		return nil, err
	}
	return r, nil
}

func gnftFamily(f Family) (gnft.TableFamily, error) {
	switch f {
	case FamilyInet:
		return gnft.TableFamilyINet, nil
	case FamilyIPv4:
		return gnft.TableFamilyIPv4, nil
	case FamilyIPv6:
		return gnft.TableFamilyIPv6, nil
	}
	return 0, fmt.Errorf("nftables family %q is not supported", f)
}

func (r *netlinkRuleset) dial() error {
	if r.conn != nil {
		_ = r.conn.CloseLasting()
		r.conn = nil
	}
	c, err := gnft.New(gnft.AsLasting(), gnft.WithSockOptions(forceBuffers))
	if err != nil {
		return fmt.Errorf("opening an nftables netlink socket: %w", err)
	}
	r.conn = c
	return nil
}

// forceBuffers raises both socket buffers past the sysctl limits (root may), so a
// large transaction and its acknowledgements fit.
func forceBuffers(c *netlink.Conn) error {
	sc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = sc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer); serr != nil {
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer)
	})
	if err != nil {
		return err
	}
	return serr
}

func (r *netlinkRuleset) Table() Table { return r.table }

func (r *netlinkRuleset) gtable() *gnft.Table {
	fam, _ := gnftFamily(r.table.Family)
	return &gnft.Table{Family: fam, Name: r.table.Name}
}

func (r *netlinkRuleset) gset(s Set) *gnft.Set {
	types := make([]gnft.SetDatatype, len(s.Key))
	for i, k := range s.Key {
		types[i] = gnftKeyType(k)
	}
	kt := types[0]
	if len(types) > 1 {
		kt = gnft.MustConcatSetType(types...)
	}
	return &gnft.Set{Table: r.gtable(), Name: s.Name, KeyType: kt, Concatenation: len(types) > 1,
		Interval: s.Interval, HasTimeout: s.Timeout, Comment: s.Comment, KeyByteOrder: binaryutil.BigEndian}
}

func gnftKeyType(k KeyType) gnft.SetDatatype {
	switch k {
	case KeyIPv4Addr:
		return gnft.TypeIPAddr
	case KeyIPv6Addr:
		return gnft.TypeIP6Addr
	case KeyInetProto:
		return gnft.TypeInetProto
	case KeyNFProto:
		return gnft.TypeNFProto
	default:
		return gnft.TypeInetService
	}
}

func keyTypeOf(t gnft.SetDatatype) (KeyType, error) {
	for _, k := range []KeyType{KeyIPv4Addr, KeyIPv6Addr, KeyInetProto, KeyInetService, KeyNFProto} {
		if gnftKeyType(k).Name == t.Name {
			return k, nil
		}
	}
	return "", fmt.Errorf("set key type %q is not one this package writes", t.Name)
}

// setDef returns a set's definition: from this transaction, from the cache, or
// read from the kernel.
func (r *netlinkRuleset) setDef(name string, pending map[string]Set) (Set, error) {
	if s, ok := pending[name]; ok {
		return s, nil
	}
	if s, ok := r.sets[name]; ok {
		return s, nil
	}
	gs, err := r.conn.GetSetByName(r.gtable(), name)
	if err != nil {
		return Set{}, fmt.Errorf("reading set %s: %w", name, err)
	}
	s := Set{Name: name, Interval: gs.Interval, Timeout: gs.HasTimeout, Comment: gs.Comment}
	fields := []gnft.SetDatatype{gs.KeyType}
	if gs.Concatenation {
		fields = gnft.ConcatSetTypeElements(gs.KeyType)
	}
	for _, f := range fields {
		k, err := keyTypeOf(f)
		if err != nil {
			return Set{}, fmt.Errorf("set %s: %w", name, err)
		}
		s.Key = append(s.Key, k)
	}
	r.sets[name] = s
	return s, nil
}

// encoded is one operation ready to queue: everything that can fail on our side
// failed before anything was queued, so a refused transaction leaves nothing
// behind in the connection.
type encoded struct {
	o     op
	set   Set
	elems []gnft.SetElement
	rule  *gnft.Rule
}

func (r *netlinkRuleset) Run(ctx context.Context, tx *Transaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()

	pending := map[string]Set{} // the sets the transaction adds, by name
	deleted := map[string]bool{}
	var enc []encoded
	for _, o := range tx.ops {
		e, err := r.encode(o, pending, deleted)
		if err != nil {
			return &OpError{Table: r.table, Op: o.String(), Err: err}
		}
		enc = append(enc, e)
	}
	if err := r.send(enc); err != nil {
		return err
	}
	r.rememberSets(enc, pending, deleted)
	return nil
}

// encode checks one operation as far as we can before the kernel sees it and
// prepares its netlink form, noting in pending and deleted the sets it adds and
// deletes (later operations of the transaction read their definitions there).
func (r *netlinkRuleset) encode(o op, pending map[string]Set, deleted map[string]bool) (encoded, error) {
	e := encoded{o: o}
	switch o.kind {
	case opAddSet:
		if err := o.set.validate(); err != nil {
			return e, errors.Join(err, unix.EINVAL)
		}
		pending[o.name] = o.set
		e.set = o.set
	case opDeleteSet:
		deleted[o.name] = true
		delete(pending, o.name)
	case opAddElements, opDeleteElements:
		s, err := r.setDef(o.name, pending)
		if err != nil {
			return e, err
		}
		e.set = s
		if e.elems, err = encodeElements(s, o); err != nil {
			return e, err
		}
	case opAddRule:
		rule, err := r.encodeRule(o, pending, deleted)
		if err != nil {
			return e, err
		}
		e.rule = rule
	case opAddChain:
		if o.chain.base() {
			if _, err := hookNum(o.chain.Hook); err != nil {
				return e, errors.Join(err, unix.EINVAL)
			}
		}
	}
	return e, nil
}

// encodeElements turns the elements of an add or delete into set s's keys.
func encodeElements(s Set, o op) ([]gnft.SetElement, error) {
	// google/nftables leaves out the timeout of an element of a set
	// without the flag, which would make an element that never lapses:
	// refused here as the kernel refuses it.
	if o.kind == opAddElements {
		if err := checkTimeout(s, o.timeout); err != nil {
			return nil, err
		}
	}
	elems := make([]gnft.SetElement, 0, len(o.elems))
	for _, fields := range o.elems {
		el, err := parseElement(s, fields)
		if err != nil {
			return nil, errors.Join(err, unix.EINVAL)
		}
		ge := gnft.SetElement{Key: el.lo}
		if o.kind == opAddElements {
			ge.Timeout = o.timeout
		}
		if s.Interval {
			ge.KeyEnd = el.hi
		}
		elems = append(elems, ge)
	}
	return elems, nil
}

// encodeRule turns a rule into expressions, refusing a set lookup whose set has
// another type.
func (r *netlinkRuleset) encodeRule(o op, pending map[string]Set, deleted map[string]bool) (*gnft.Rule, error) {
	exprs, err := o.rule.exprs()
	if err != nil {
		return nil, errors.Join(err, unix.EINVAL)
	}
	for _, st := range o.rule.Stmts {
		l, ok := st.(InSet)
		if !ok || deleted[l.Set] && pending[l.Set].Name == "" {
			continue
		}
		// A set that cannot be read is left to the kernel (ENOENT).
		if s, err := r.setDef(l.Set, pending); err == nil {
			if err := l.checkSet(s); err != nil {
				return nil, err
			}
		}
	}
	rule := &gnft.Rule{Table: r.gtable(), Chain: &gnft.Chain{Name: o.name, Table: r.gtable()}, Exprs: exprs}
	if o.rule.Comment != "" {
		rule.UserData = userdataComment(o.rule.Comment)
	}
	return rule, nil
}

// send queues the encoded operations and sends them as one batch.
func (r *netlinkRuleset) send(enc []encoded) error {
	for _, e := range enc {
		if err := r.queue(e); err != nil {
			// Messages may be queued: drop them with the connection.
			_ = r.dial()
			return &OpError{Table: r.table, Op: e.o.String(), Err: err}
		}
	}
	if err := r.conn.Flush(); err != nil {
		// The kernel refused one message and with it the batch. Name the operation
		// when there is only one to blame.
		what := fmt.Sprintf("a transaction of %d operations", len(enc))
		if len(enc) == 1 {
			what = enc[0].o.String()
		}
		if errors.Is(err, unix.ENOBUFS) {
			_ = r.dial()
		}
		return &OpError{Table: r.table, Op: what, Err: err}
	}
	return nil
}

// rememberSets updates the cache of set definitions after a transaction the
// kernel accepted.
func (r *netlinkRuleset) rememberSets(enc []encoded, pending map[string]Set, deleted map[string]bool) {
	for name := range deleted {
		delete(r.sets, name)
	}
	for name, s := range pending {
		r.sets[name] = s
	}
	for _, e := range enc {
		if e.o.kind == opDeleteTable {
			r.sets = map[string]Set{}
		}
	}
}

func hookNum(h Hook) (*gnft.ChainHook, error) {
	switch h {
	case HookPrerouting:
		return gnft.ChainHookPrerouting, nil
	case HookInput:
		return gnft.ChainHookInput, nil
	case HookForward:
		return gnft.ChainHookForward, nil
	case HookOutput:
		return gnft.ChainHookOutput, nil
	case HookPostrouting:
		return gnft.ChainHookPostrouting, nil
	}
	return nil, fmt.Errorf("unknown hook %q", h)
}

func (r *netlinkRuleset) queue(e encoded) error {
	t := r.gtable()
	o := e.o
	switch o.kind {
	case opAddTable:
		r.conn.AddTable(t)
	case opDeleteTable:
		r.conn.DelTable(t)
	case opAddChain:
		c := &gnft.Chain{Name: o.name, Table: t}
		if o.chain.base() {
			c.Hooknum, _ = hookNum(o.chain.Hook)
			c.Priority = gnft.ChainPriorityRef(gnft.ChainPriority(o.chain.Priority))
			c.Type = gnft.ChainType(o.chain.Type)
			accept := gnft.ChainPolicyAccept
			c.Policy = &accept
		}
		r.conn.AddChain(c)
	case opFlushChain:
		r.conn.FlushChain(&gnft.Chain{Name: o.name, Table: t})
	case opDeleteChain:
		r.conn.DelChain(&gnft.Chain{Name: o.name, Table: t})
	case opAddRule:
		r.conn.AddRule(e.rule)
	case opAddSet:
		return r.conn.AddSet(r.gset(e.set), nil)
	case opFlushSet:
		r.conn.FlushSet(&gnft.Set{Table: t, Name: o.name})
	case opDeleteSet:
		r.conn.DelSet(&gnft.Set{Table: t, Name: o.name})
	case opAddElements, opDeleteElements:
		gs := r.gset(e.set)
		for start := 0; start < len(e.elems); start += elementsPerMessage {
			chunk := e.elems[start:min(start+elementsPerMessage, len(e.elems))]
			var err error
			if o.kind == opAddElements {
				err = r.conn.SetAddElements(gs, chunk)
			} else {
				err = r.conn.SetDeleteElements(gs, chunk)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *netlinkRuleset) ListElements(ctx context.Context, set string) ([][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The definition is read again: someone may have made the set anew with
	// another type, and its elements must be decoded as the kernel holds them.
	delete(r.sets, set)
	s, err := r.setDef(set, nil)
	if err != nil {
		return nil, err
	}
	got, err := r.conn.GetSetElements(r.gset(s))
	if err != nil {
		return nil, fmt.Errorf("listing set %s: %w", set, err)
	}
	out := make([][]string, 0, len(got))
	for _, e := range got {
		var hi []byte
		if s.Interval {
			hi = e.KeyEnd
		}
		f, err := elementFields(s, e.Key, hi)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], " . ") < strings.Join(out[j], " . ") })
	return out, nil
}

func (r *netlinkRuleset) List(ctx context.Context) (chains, sets []string, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fam, _ := gnftFamily(r.table.Family)
	// Asking for the sets of a missing table fails with an error that does not
	// unwrap to ENOENT: look for the table first.
	tables, err := r.conn.ListTablesOfFamily(fam)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s tables: %w", r.table.Family, err)
	}
	if !slices.ContainsFunc(tables, func(t *gnft.Table) bool { return t.Name == r.table.Name }) {
		return nil, nil, nil
	}
	gs, err := r.conn.GetSets(r.gtable())
	if err != nil {
		return nil, nil, fmt.Errorf("listing the sets of %s: %w", r.table, err)
	}
	for _, s := range gs {
		sets = append(sets, s.Name)
	}
	gc, err := r.conn.ListChainsOfTableFamily(fam)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the chains of %s: %w", r.table, err)
	}
	for _, c := range gc {
		if c.Table != nil && c.Table.Name == r.table.Name {
			chains = append(chains, c.Name)
		}
	}
	sort.Strings(chains)
	sort.Strings(sets)
	return chains, sets, nil
}

// Dump lists the table with the nft binary and returns it in ParseListing's form
// ("" when the table does not exist).
func (r *netlinkRuleset) Dump(ctx context.Context) (string, error) {
	if r.exec == nil {
		return "", fmt.Errorf("no exec to run nft")
	}
	fam, err := gnftFamily(r.table.Family)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	tables, err := r.conn.ListTablesOfFamily(fam)
	r.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("listing %s tables: %w", r.table.Family, err)
	}
	found := false
	for _, t := range tables {
		found = found || t.Name == r.table.Name
	}
	if !found {
		return "", nil
	}
	out, err := runNFT(ctx, r.exec, "list", "table", string(r.table.Family), r.table.Name)
	if err != nil {
		return "", err
	}
	return ParseListing(string(out))
}
