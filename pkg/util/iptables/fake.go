package iptables

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// builtinChains are each table's built-in chains in iptables-save order.
var builtinChains = map[Table][]Chain{
	TableFilter: {ChainInput, ChainForward, ChainOutput},
	TableNAT:    {ChainPrerouting, ChainInput, ChainOutput, ChainPostrouting},
	TableMangle: {ChainPrerouting, ChainInput, ChainForward, ChainOutput, ChainPostrouting},
	"raw":       {ChainPrerouting, ChainOutput},
}

// builtinTargets are targets that are not chains (standard verdicts and the
// extensions kube-proxy and its neighbours use); any other -j/-g names a chain.
var builtinTargets = map[string]bool{
	"ACCEPT": true, "DROP": true, "RETURN": true, "QUEUE": true, "MASQUERADE": true,
	"MARK": true, "CONNMARK": true, "DNAT": true, "SNAT": true, "REDIRECT": true,
	"REJECT": true, "LOG": true, "NFLOG": true, "NOTRACK": true, "CT": true,
	"TPROXY": true, "TCPMSS": true, "CLASSIFY": true, "SET": true,
}

// FakeCounters counts what the Fake was asked to do.
type FakeCounters struct {
	Restores      int // RestoreAll calls
	Commands      int // single-command calls (EnsureChain, EnsureRule, ...)
	RulesAdded    int
	RulesDeleted  int
	ChainsCreated int
	ChainsFlushed int
	ChainsDeleted int
}

// Fake is an in-memory iptables for one family that checks restore input like
// iptables-restore (legacy backend semantics, observed with iptables 1.8.9):
//
//   - each table ("*nat" ... "COMMIT") is applied atomically: a bad line rejects the
//     whole table and stops the run; tables committed before it stay;
//   - a jump (-j/-g) to a chain that does not exist at that line fails (exit 2), as
//     do -A/-I/-D/-F/-X on missing chains, -D of a missing rule, -X of a chain that
//     is referenced or not empty (exit 1);
//   - with --noflush a declared user chain is created or flushed and a declared
//     built-in chain only gets its policy; undeclared chains are kept. Without it
//     the table is replaced by what the input declares.
//
// Rules are kept as written (re-quoted canonically), not normalised the way
// iptables-save prints them (it adds "-m tcp", "/32" and the like).
type Fake struct {
	mu       sync.Mutex
	protocol Protocol
	tables   map[Table]*fakeTable
	counters FakeCounters

	// InjectRestoreError, when set, is called with each RestoreAll input; a non-nil
	// error fails the call before anything is applied.
	InjectRestoreError func(data []byte) error
}

type fakeTable struct {
	chains map[Chain]*fakeChain
}

type fakeChain struct {
	policy string // "-" for user chains
	rules  []string
}

// NewFake returns a Fake with empty built-in tables.
func NewFake(protocol Protocol) *Fake {
	f := &Fake{protocol: protocol, tables: map[Table]*fakeTable{}}
	for t := range builtinChains {
		f.tables[t] = newTable(t)
	}
	return f
}

var _ Interface = &Fake{}

func newTable(t Table) *fakeTable {
	ft := &fakeTable{chains: map[Chain]*fakeChain{}}
	for _, c := range builtinChains[t] {
		ft.chains[c] = &fakeChain{policy: "ACCEPT"}
	}
	return ft
}

func (t *fakeTable) clone() *fakeTable {
	out := &fakeTable{chains: make(map[Chain]*fakeChain, len(t.chains))}
	for name, c := range t.chains {
		out.chains[name] = &fakeChain{policy: c.policy, rules: slices.Clone(c.rules)}
	}
	return out
}

func isBuiltin(t Table, c Chain) bool { return slices.Contains(builtinChains[t], c) }

func (f *Fake) Protocol() Protocol { return f.protocol }

// Counters returns what was done since the last ResetCounters.
func (f *Fake) Counters() FakeCounters {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counters
}

// ResetCounters zeroes the counters.
func (f *Fake) ResetCounters() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counters = FakeCounters{}
}

// fakeErr builds an error like the real one for a single command or restore line.
func fakeErr(command string, code int, kind error, msg string) *Error {
	return &Error{Command: command, ExitCode: code, Kind: kind, Stderr: msg}
}

// target returns the chain or target a rule jumps to, if any.
func target(words []string) string {
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "-j" || words[i] == "-g" || words[i] == "--jump" || words[i] == "--goto" {
			return words[i+1]
		}
	}
	return ""
}

// checkTarget verifies that a rule's jump target exists.
func (t *fakeTable) checkTarget(words []string) *Error {
	tgt := target(words)
	if tgt == "" || builtinTargets[tgt] {
		return nil
	}
	if _, ok := t.chains[Chain(tgt)]; !ok {
		return fakeErr("iptables", 2, ErrInvalid, fmt.Sprintf("Couldn't load target `%s':No such file or directory", tgt))
	}
	return nil
}

// references counts rules (in any chain) that jump to c.
func (t *fakeTable) references(c Chain) int {
	n := 0
	for _, ch := range t.chains {
		for _, r := range ch.rules {
			words, _ := splitWords(r)
			if target(words) == string(c) {
				n++
			}
		}
	}
	return n
}

// command applies one -A/-I/-D/-F/-X/-N/-P command (words without the table) to t.
func (f *Fake) command(tname Table, t *fakeTable, words []string) *Error {
	if len(words) == 0 {
		return fakeErr("iptables", 2, ErrInvalid, "empty command")
	}
	cmd := words[0]
	var chain Chain
	if len(words) > 1 {
		chain = Chain(words[1])
	}
	ch := t.chains[chain]
	switch cmd {
	case "-N", "--new-chain":
		return f.newChain(t, chain, ch)
	case "-A", "--append", "-I", "--insert":
		if ch == nil {
			return noSuchChain()
		}
		return f.addRule(t, ch, cmd == "-I" || cmd == "--insert", words[2:])
	case "-D", "--delete":
		if ch == nil {
			return noSuchChain()
		}
		return f.deleteRule(ch, words[2:])
	case "-F", "--flush":
		return f.flushChains(t, chain, ch)
	case "-X", "--delete-chain":
		return f.deleteChains(tname, t, chain, ch)
	case "-P", "--policy":
		if ch == nil || !isBuiltin(tname, chain) || len(words) != 3 {
			return noSuchChain()
		}
		ch.policy = words[2]
		return nil
	}
	return fakeErr("iptables", 2, ErrInvalid, fmt.Sprintf("unknown command %q", cmd))
}

// noSuchChain is iptables' error for a chain (or target, or match) that does not exist.
func noSuchChain() *Error {
	return fakeErr("iptables", 1, ErrNotFound, "No chain/target/match by that name.")
}

// newChain runs -N: ch is the chain already named so, if any.
func (f *Fake) newChain(t *fakeTable, chain Chain, ch *fakeChain) *Error {
	if chain == "" {
		return fakeErr("iptables", 2, ErrInvalid, "-N needs a chain")
	}
	if ch != nil {
		return fakeErr("iptables", 1, ErrFailed, "Chain already exists.")
	}
	t.chains[chain] = &fakeChain{policy: "-"}
	f.counters.ChainsCreated++
	return nil
}

// addRule runs -A (insert false: the rule goes last) or -I (the rule goes first,
// or at the 1-based position spec starts with).
func (f *Fake) addRule(t *fakeTable, ch *fakeChain, insert bool, spec []string) *Error {
	pos := len(ch.rules)
	if insert {
		pos = 0
		if len(spec) > 0 {
			if n, err := strconv.Atoi(spec[0]); err == nil {
				if n < 1 || n > len(ch.rules)+1 {
					return fakeErr("iptables", 1, ErrFailed, "Index of insertion too big.")
				}
				pos, spec = n-1, spec[1:]
			}
		}
	}
	if len(spec) == 0 {
		return fakeErr("iptables", 2, ErrInvalid, "empty rule")
	}
	if err := t.checkTarget(spec); err != nil {
		return err
	}
	ch.rules = slices.Insert(ch.rules, pos, JoinWords(spec...))
	f.counters.RulesAdded++
	return nil
}

// deleteRule runs -D: spec is a 1-based position or the rule as written.
func (f *Fake) deleteRule(ch *fakeChain, spec []string) *Error {
	idx := -1
	if len(spec) == 1 {
		if n, err := strconv.Atoi(spec[0]); err == nil {
			if n < 1 || n > len(ch.rules) {
				return fakeErr("iptables", 1, ErrNotFound, "Index of deletion too big.")
			}
			idx = n - 1
		}
	}
	if idx < 0 {
		idx = slices.Index(ch.rules, JoinWords(spec...))
	}
	if idx < 0 {
		return fakeErr("iptables", 1, ErrNotFound, "Bad rule (does a matching rule exist in that chain?).")
	}
	ch.rules = slices.Delete(ch.rules, idx, idx+1)
	f.counters.RulesDeleted++
	return nil
}

// flushChains runs -F: the rules of chain, or of every chain when chain is empty.
func (f *Fake) flushChains(t *fakeTable, chain Chain, ch *fakeChain) *Error {
	if chain == "" {
		for _, c := range t.chains {
			c.rules = nil
		}
		f.counters.ChainsFlushed++
		return nil
	}
	if ch == nil {
		return noSuchChain()
	}
	ch.rules = nil
	f.counters.ChainsFlushed++
	return nil
}

// deleteChains runs -X: chain, or every user chain when chain is empty. Either
// all of them go or none does.
func (f *Fake) deleteChains(tname Table, t *fakeTable, chain Chain, ch *fakeChain) *Error {
	var victims []Chain
	if chain == "" {
		for name := range t.chains {
			if !isBuiltin(tname, name) {
				victims = append(victims, name)
			}
		}
	} else {
		if ch == nil || isBuiltin(tname, chain) {
			return noSuchChain()
		}
		victims = []Chain{chain}
	}
	if err := t.checkDeletable(victims, chain == ""); err != nil {
		return err
	}
	for _, v := range victims {
		delete(t.chains, v)
		f.counters.ChainsDeleted++
	}
	return nil
}

// checkDeletable refuses to delete victims when a named chain (all false) still
// has rules, or when a rule outside them jumps to one (with all, the rules inside
// the victims go with them).
func (t *fakeTable) checkDeletable(victims []Chain, all bool) *Error {
	for _, v := range victims {
		if len(t.chains[v].rules) > 0 && !all {
			return fakeErr("iptables", 1, ErrInUse, "Directory not empty.")
		}
	}
	for _, v := range victims {
		refs := t.references(v)
		if all {
			refs -= t.referencesFrom(victims, v)
		}
		if refs > 0 {
			return fakeErr("iptables", 1, ErrInUse, "Too many links.")
		}
	}
	return nil
}

// referencesFrom counts the rules of the chains from that jump to c.
func (t *fakeTable) referencesFrom(from []Chain, c Chain) int {
	n := 0
	for _, w := range from {
		for _, r := range t.chains[w].rules {
			words, _ := splitWords(r)
			if target(words) == string(c) {
				n++
			}
		}
	}
	return n
}

// single runs one command against a table as its own transaction.
func (f *Fake) single(ctx context.Context, table Table, words ...string) *Error {
	f.counters.Commands++
	t, ok := f.tables[table]
	if !ok {
		return fakeErr("iptables", 3, ErrInvalid, fmt.Sprintf("can't initialize iptables table `%s': Table does not exist", table))
	}
	work := t.clone()
	if err := f.command(table, work, words); err != nil {
		err.Args = append([]string{"-t", string(table)}, words...)
		return err
	}
	f.tables[table] = work
	return nil
}

func (f *Fake) EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.single(ctx, table, "-N", string(chain)); err != nil {
		if err.ExitCode == 1 {
			return true, nil
		}
		return false, err
	}
	return false, nil
}

func (f *Fake) FlushChain(ctx context.Context, table Table, chain Chain) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.single(ctx, table, "-F", string(chain)); err != nil {
		return err
	}
	return nil
}

func (f *Fake) DeleteChain(ctx context.Context, table Table, chain Chain) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.single(ctx, table, "-X", string(chain)); err != nil {
		return err
	}
	return nil
}

func (f *Fake) ChainExists(ctx context.Context, table Table, chain Chain) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counters.Commands++
	t, ok := f.tables[table]
	return ok && t.chains[chain] != nil, nil
}

func (f *Fake) EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error) {
	if err := validateArgs(args); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.tables[table]; ok {
		if ch := t.chains[chain]; ch != nil && slices.Contains(ch.rules, JoinWords(args...)) {
			f.counters.Commands++
			return true, nil
		}
	}
	if err := f.single(ctx, table, append([]string{string(position), string(chain)}, args...)...); err != nil {
		return false, err
	}
	return false, nil
}

func (f *Fake) DeleteRule(ctx context.Context, table Table, chain Chain, args ...string) error {
	if err := validateArgs(args); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.single(ctx, table, append([]string{"-D", string(chain)}, args...)...); err != nil && err.ExitCode != 1 {
		return err
	}
	return nil
}

// SaveInto writes the table like iptables-save (without the header comments).
func (f *Fake) SaveInto(ctx context.Context, table Table, buf *bytes.Buffer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[table]
	if !ok {
		return fakeErr("iptables-save", 1, ErrInvalid, fmt.Sprintf("table %s does not exist", table))
	}
	writeTable(buf, table, t)
	return nil
}

// Dump prints every table that holds anything besides empty ACCEPT built-ins,
// sorted by table name; within a table built-in chains come first in their usual
// order, then user chains sorted.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var buf bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(f.tables)) {
		t := f.tables[name]
		interesting := false
		for _, c := range t.chains {
			// A user chain, a rule or a non-default policy.
			if c.policy != "ACCEPT" || len(c.rules) > 0 {
				interesting = true
			}
		}
		if interesting {
			writeTable(&buf, name, t)
		}
	}
	return buf.String()
}

func chainOrder(name Table, t *fakeTable) []Chain {
	var user []Chain
	for c := range t.chains {
		if !isBuiltin(name, c) {
			user = append(user, c)
		}
	}
	slices.Sort(user)
	return append(slices.Clone(builtinChains[name]), user...)
}

func writeTable(buf *bytes.Buffer, name Table, t *fakeTable) {
	buf.WriteString("*" + string(name) + "\n")
	order := chainOrder(name, t)
	for _, c := range order {
		buf.WriteString(":" + string(c) + " " + t.chains[c].policy + " [0:0]\n")
	}
	for _, c := range order {
		for _, r := range t.chains[c].rules {
			buf.WriteString("-A " + string(c) + " " + r + "\n")
		}
	}
	buf.WriteString("COMMIT\n")
}

// MatchSetRefs counts rules that match each ipset (--match-set NAME), to tell an
// ipset Fake which sets are referenced.
func (f *Fake) MatchSetRefs() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	refs := map[string]int{}
	for _, t := range f.tables {
		for _, c := range t.chains {
			for _, r := range c.rules {
				words, _ := splitWords(r)
				for i := 0; i+1 < len(words); i++ {
					if words[i] == "--match-set" {
						refs[words[i+1]]++
					}
				}
			}
		}
	}
	return refs
}

// RestoreAll parses and applies data table by table.
func (f *Fake) RestoreAll(ctx context.Context, data []byte, flush FlushFlag, counters CounterFlag) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counters.Restores++
	if f.InjectRestoreError != nil {
		if err := f.InjectRestoreError(data); err != nil {
			return &Error{Command: "iptables-restore", ExitCode: 1, Kind: ErrFailed, Err: err}
		}
	}
	before := f.counters
	var (
		curName Table
		cur     *fakeTable
	)
	fail := func(n int, line string, err *Error) error {
		f.counters = before // the rejected table did nothing
		err.Command, err.Line, err.Table, err.Text = "iptables-restore", n, curName, line
		return err
	}
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		n := i + 1
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		case strings.HasPrefix(trimmed, "*"):
			if cur != nil {
				return fail(n, line, fakeErr("", 1, ErrInvalid, "COMMIT expected"))
			}
			curName, before = Table(trimmed[1:]), f.counters
			t, ok := f.tables[curName]
			if !ok {
				return fail(n, line, fakeErr("", 1, ErrInvalid, fmt.Sprintf("table '%s' does not exist", curName)))
			}
			if flush == FlushTables {
				cur = newTable(curName)
			} else {
				cur = t.clone()
			}
		case trimmed == "COMMIT":
			if cur == nil {
				return fail(n, line, fakeErr("", 1, ErrInvalid, "COMMIT outside a table"))
			}
			f.tables[curName] = cur
			cur = nil
		case cur == nil:
			return fail(n, line, fakeErr("", 1, ErrInvalid, "line outside a table"))
		case strings.HasPrefix(trimmed, ":"):
			words, ok := splitWords(trimmed[1:])
			if !ok || len(words) < 2 {
				return fail(n, line, fakeErr("", 2, ErrInvalid, "bad chain declaration"))
			}
			c, policy := Chain(words[0]), words[1]
			if isBuiltin(curName, c) {
				if policy == "-" {
					return fail(n, line, fakeErr("", 2, ErrInvalid, "built-in chain needs a policy"))
				}
				cur.chains[c].policy = policy
				break
			}
			if policy != "-" {
				return fail(n, line, fakeErr("", 2, ErrInvalid, "user chain with a policy"))
			}
			if ch, ok := cur.chains[c]; ok {
				ch.rules = nil
				f.counters.ChainsFlushed++
			} else {
				cur.chains[c] = &fakeChain{policy: "-"}
				f.counters.ChainsCreated++
			}
		default:
			words, ok := splitWords(trimmed)
			if !ok {
				return fail(n, line, fakeErr("", 2, ErrInvalid, "unterminated quote"))
			}
			if len(words) > 0 && strings.HasPrefix(words[0], "[") && strings.HasSuffix(words[0], "]") {
				words = words[1:] // packet and byte counters
			}
			if err := f.command(curName, cur, words); err != nil {
				return fail(n, line, err)
			}
		}
	}
	if cur != nil {
		return fail(len(lines), "", fakeErr("", 1, ErrInvalid, "COMMIT expected"))
	}
	return nil
}
