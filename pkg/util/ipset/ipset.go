package ipset

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/boundedexec"
)

const cmdIPSet = "ipset"

// Deadlines of one ipset process; past its deadline the process is killed and the
// call fails with a *boundedexec.TimeoutError (errors.Is context.DeadlineExceeded).
// They are ~10x what the work takes on a 2-vCPU machine (docs/PERFORMANCE.md:
// 11 us per restored entry, 20 us per saved one), so only a hung ipset hits them.
const (
	// ReadTimeout bounds one `ipset list` or `ipset save` (~600k entries in 12 s).
	ReadTimeout = 2 * time.Minute
	// RestoreTimeout plus RestoreTimeoutPerLine for every line of input bounds one
	// `ipset restore`: 30 s for a small batch, 140 s for 550k entries.
	RestoreTimeout        = 30 * time.Second
	RestoreTimeoutPerLine = 200 * time.Microsecond
)

// runner is the real Interface over the ipset(8) binary.
type runner struct {
	exec utilexec.Interface
	// Deadlines (the constants above; tests shorten them).
	readTimeout, restoreTimeout, restorePerLine time.Duration
	// nl, when set, writes batches of member changes (netlink.go).
	nl *netlinkWriter
}

// New returns the real implementation. Every Apply is one `ipset restore -exist`
// process fed on stdin; reads are one `ipset list`/`ipset save` each. Each process
// runs under the deadlines above.
func New(exec utilexec.Interface) Interface {
	return &runner{exec: exec, readTimeout: ReadTimeout, restoreTimeout: RestoreTimeout, restorePerLine: RestoreTimeoutPerLine}
}

// NewNetlink is New whose Apply writes batches of member changes (adds and deletes
// only, of any size) over netlink (netlink.go) instead of starting a process. It
// talks to the kernel of the calling thread's network namespace, so tests that fake
// the exec use New.
func NewNetlink(exec utilexec.Interface) (Interface, error) {
	w, err := newNetlinkWriter()
	if err != nil {
		return nil, fmt.Errorf("opening a netfilter netlink socket for ipset: %w", err)
	}
	r := New(exec).(*runner)
	r.nl = w
	return r, nil
}

var _ Interface = &runner{}

// run executes ipset with args and stdin, bounded by timeout; a failure becomes an
// *Error of the kind ipset's message names (a timeout wraps a
// *boundedexec.TimeoutError).
func (r *runner) run(ctx context.Context, timeout time.Duration, command string, stdin []byte, args ...string) ([]byte, *Error) {
	stdout, stderr, err := boundedexec.Run(ctx, r.exec, timeout, cmdIPSet, stdin, args...)
	if err == nil {
		return stdout, nil
	}
	line, reason := parseStderr(string(stderr))
	kind := ErrUnknown
	if reason != "" {
		kind = classify(reason)
	}
	return nil, &Error{Command: command, Index: line - 1, Reason: reason, Kind: kind, Err: err}
}

// Apply validates the whole transaction, then runs it as one `ipset restore -exist`.
func (r *runner) Apply(ctx context.Context, tx *Transaction) error {
	if tx == nil || len(tx.ops) == 0 {
		return nil
	}
	ops, err := tx.prepare()
	if err != nil {
		return err
	}
	if r.nl != nil {
		// A refusal over netlink leaves the batch to restore, which names it.
		if done, err := r.nl.apply(ctx, ops); done && err == nil {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	timeout := r.restoreTimeout + time.Duration(len(ops))*r.restorePerLine
	_, ierr := r.run(ctx, timeout, "restore", encode(ops), "restore", "-exist")
	if ierr == nil {
		return nil
	}
	if ierr.Index >= 0 && ierr.Index < len(ops) {
		ierr.Line = opLine(ops[ierr.Index])
	} else {
		ierr.Index = -1
	}
	return ierr
}

// ListSets returns every set's header, from `ipset list -t` (the human format: it is
// the only listing that prints names containing blanks unambiguously).
func (r *runner) ListSets(ctx context.Context) ([]*Set, error) {
	out, ierr := r.run(ctx, r.readTimeout, "list", nil, "list", "-t")
	if ierr != nil {
		return nil, ierr
	}
	return parseListTerse(out)
}

// ListEntries returns one set's entries from `ipset list -o save NAME`.
func (r *runner) ListEntries(ctx context.Context, set string) ([]string, error) {
	if err := ValidateName(set); err != nil {
		return nil, &Error{Command: "list", Index: -1, Kind: ErrInvalid, Reason: err.Error()}
	}
	out, ierr := r.run(ctx, r.readTimeout, "list", nil, "list", "-o", "save", set)
	if ierr != nil {
		ierr.Reason = fmt.Sprintf("set %s: %s", set, ierr.Reason)
		return nil, ierr
	}
	sets, err := parseSave(out)
	if err != nil {
		return nil, err
	}
	s, ok := sets[set]
	if !ok {
		return nil, &Error{Command: "list", Index: -1, Kind: ErrSetNotFound, Reason: "set " + set + " missing from ipset's listing"}
	}
	return s.Entries, nil
}

// SaveAll returns every set with its entries from one `ipset save`.
func (r *runner) SaveAll(ctx context.Context) (map[string]*SetWithEntries, error) {
	out, ierr := r.run(ctx, r.readTimeout, "save", nil, "save")
	if ierr != nil {
		return nil, ierr
	}
	return parseSave(out)
}

// SaveSets returns those of the named sets that exist, with their entries, without
// reading any other set: `ipset list -n` for the names, then one `ipset restore` of
// `save NAME` lines (restore mode runs any command, and prints what save prints). A
// node where other software keeps large sets, or where the other IP family's sets
// hold every Service, pays only for the sets asked for. A set destroyed between the
// two reads fails the restore; the names are read again then, once.
func (r *runner) SaveSets(ctx context.Context, names []string) (map[string]*SetWithEntries, error) {
	for _, name := range names {
		if err := ValidateName(name); err != nil {
			return nil, &Error{Command: "save", Index: -1, Kind: ErrInvalid, Reason: err.Error()}
		}
	}
	var last *Error
	for attempt := 0; attempt < 2; attempt++ {
		out, ierr := r.run(ctx, r.readTimeout, "list", nil, "list", "-n")
		if ierr != nil {
			return nil, ierr
		}
		exist := map[string]bool{}
		for _, n := range strings.Split(string(out), "\n") {
			exist[n] = true
		}
		var script bytes.Buffer
		for _, name := range names {
			if exist[name] {
				script.WriteString("save " + name + "\n")
			}
		}
		if script.Len() == 0 {
			return map[string]*SetWithEntries{}, nil
		}
		out, last = r.run(ctx, r.readTimeout, "save", script.Bytes(), "restore")
		if last == nil {
			return parseSave(out)
		}
		if !errors.Is(last, ErrSetNotFound) {
			return nil, last
		}
	}
	return nil, last
}

// knownTypePrefixes start every ipset type name; `ipset save` prints names
// unquoted, so the type token is what ends a name that contains blanks.
var knownTypePrefixes = []string{"hash:", "bitmap:", "list:"}

func isTypeToken(tok string) bool {
	for _, p := range knownTypePrefixes {
		if strings.HasPrefix(tok, p) && len(tok) > len(p) {
			return true
		}
	}
	return false
}

// parseSave parses `ipset save` output. Entries keep only the element (options such
// as timeout, counters or comments are dropped).
func parseSave(out []byte) (map[string]*SetWithEntries, error) {
	sets := map[string]*SetWithEntries{}
	var cur *SetWithEntries
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "create "):
			s, err := parseCreate(strings.Fields(line))
			if err != nil {
				return nil, fmt.Errorf("parsing ipset save line %d %q: %w", n, line, err)
			}
			cur = &SetWithEntries{Set: *s}
			sets[s.Name] = cur
		case strings.HasPrefix(line, "add "):
			rest, ok := strings.CutPrefix(line, "add ")
			if ok && cur != nil {
				rest, ok = strings.CutPrefix(rest, cur.Name+" ")
			}
			if !ok || cur == nil {
				return nil, fmt.Errorf("parsing ipset save line %d %q: add outside its set", n, line)
			}
			elem, _, _ := strings.Cut(rest, " ")
			cur.Entries = append(cur.Entries, elem)
		default:
			return nil, fmt.Errorf("parsing ipset save line %d %q: unknown command", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading ipset save output: %w", err)
	}
	return sets, nil
}

// parseCreate parses the fields of "create NAME TYPE options..." (NAME may span
// several fields).
func parseCreate(f []string) (*Set, error) {
	ti := -1
	for i := 2; i < len(f); i++ {
		if isTypeToken(f[i]) {
			ti = i
			break
		}
	}
	if ti < 0 {
		return nil, errors.New("no set type")
	}
	s := &Set{Name: strings.Join(f[1:ti], " "), Type: Type(f[ti])}
	return s, parseHeader(s, f[ti+1:])
}

// parseHeader fills s from header options ("family inet hashsize 1024 ...").
func parseHeader(s *Set, f []string) error {
	for i := 0; i < len(f); i++ {
		key := f[i]
		val := ""
		switch key {
		case "family", "hashsize", "maxelem", "range", "bucketsize", "initval", "timeout", "netmask", "size", "markmask":
			if i+1 >= len(f) {
				return fmt.Errorf("option %s without a value", key)
			}
			val = f[i+1]
			i++
		default:
			continue // flags such as counters, comment, skbinfo, forceadd
		}
		var err error
		switch key {
		case "family":
			s.Family = val
		case "hashsize":
			s.HashSize, err = strconv.Atoi(val)
		case "maxelem":
			s.MaxElem, err = strconv.Atoi(val)
		case "range":
			if s.Type == BitmapPort {
				lo, hi, ok := strings.Cut(val, "-")
				if !ok {
					return fmt.Errorf("range %q is not MIN-MAX", val)
				}
				if s.PortMin, err = strconv.Atoi(lo); err == nil {
					s.PortMax, err = strconv.Atoi(hi)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("option %s %q: %w", key, val, err)
		}
	}
	return nil
}

// parseListTerse parses `ipset list -t`: blocks of "Name:", "Type:", "Header:".
func parseListTerse(out []byte) ([]*Set, error) {
	var sets []*Set
	var cur *Set
	sc := bufio.NewScanner(bytes.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		key, val, ok := strings.Cut(line, ": ")
		if !ok {
			key, val = strings.TrimSuffix(line, ":"), ""
		}
		switch key {
		case "Name":
			cur = &Set{Name: val}
			sets = append(sets, cur)
		case "Type":
			if cur == nil {
				return nil, fmt.Errorf("parsing ipset list line %d %q: Type before Name", n, line)
			}
			cur.Type = Type(val)
		case "Header":
			if cur == nil {
				return nil, fmt.Errorf("parsing ipset list line %d %q: Header before Name", n, line)
			}
			if err := parseHeader(cur, strings.Fields(val)); err != nil {
				return nil, fmt.Errorf("parsing ipset list line %d %q: %w", n, line, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading ipset list output: %w", err)
	}
	return sets, nil
}
