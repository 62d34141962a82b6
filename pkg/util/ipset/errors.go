package ipset

import (
	"errors"
	"fmt"
	"strings"
)

// Error kinds. ipset(8) exits 1 for every failure and names the reason with the
// fixed libipset text for the kernel's errno; reasonTable maps those texts back to
// these sentinels, so callers test errors.Is(err, ErrSetNotFound) (or IsNotFound)
// and never look at the message.
var (
	ErrInvalid       = errors.New("invalid ipset request")                // rejected before running ipset, ipset's "Syntax error", or an element the kernel refuses (IPSET_ERR_HASH_ELEM, EINVAL)
	ErrSetNotFound   = errors.New("set does not exist")                   // ENOENT, IPSET_ERR_EXIST_SETNAME2
	ErrSetExists     = errors.New("set exists with a different type")     // IPSET_ERR_EXIST on create with -exist
	ErrSetInUse      = errors.New("set is in use by a kernel component")  // IPSET_ERR_BUSY
	ErrTypeMismatch  = errors.New("sets cannot be swapped: type differs") // IPSET_ERR_TYPE_MISMATCH
	ErrSetFull       = errors.New("set is full")                          // IPSET_ERR_HASH_FULL
	ErrOutOfRange    = errors.New("element out of the set's range")       // IPSET_ERR_BITMAP_RANGE
	ErrEntryExists   = errors.New("element already added")                // IPSET_ERR_EXIST on add (without -exist)
	ErrEntryNotFound = errors.New("element not added")                    // IPSET_ERR_EXIST on del (without -exist)
	ErrUnknown       = errors.New("ipset failed")                         // anything else
)

// reasonTable maps the start of libipset's message (after "ipset vX: " and
// "Error in line N: ") to the error kind. Row texts are copied from ipset 7.x output
// observed on Linux 6.18.
var reasonTable = []struct {
	prefix string
	kind   error
}{
	{"The set with the given name does not exist", ErrSetNotFound},
	{"Sets cannot be swapped: the second set does not exist", ErrSetNotFound},
	{"Set cannot be created: set with the same name already exists", ErrSetExists},
	{"Set cannot be destroyed: it is in use by a kernel component", ErrSetInUse},
	{"The sets cannot be swapped: their type does not match", ErrTypeMismatch},
	{"Hash is full, cannot add more elements", ErrSetFull},
	{"Element is out of the range of the set", ErrOutOfRange},
	{"Element cannot be added to the set: it's already added", ErrEntryExists},
	{"Element cannot be deleted from the set: it's not added", ErrEntryNotFound},
	{"Syntax error", ErrInvalid},
	{"The value of the CIDR parameter of the IP address is invalid", ErrInvalid},
	// The kernel refuses the zero address in hash:ip (IPSET_ERR_HASH_ELEM, seen on
	// 6.1 and 6.18) and in hash:ip,port (plain EINVAL, since 6.3; seen on 6.18),
	// on add and on del.
	{"Null-valued element, cannot be stored in a hash type of set", ErrInvalid},
	{"Kernel error received: Invalid argument", ErrInvalid},
}

// Error is a failed ipset operation.
type Error struct {
	// Command is what ran: "restore", "save", "list".
	Command string
	// Index is the 0-based position in the Transaction of the operation that failed,
	// or -1 when the failure is not tied to one operation.
	Index int
	// Line is that operation's restore line ("add KUBE-CLUSTER-IP 10.0.0.1,tcp:80").
	Line string
	// Reason is ipset's own explanation.
	Reason string
	// Kind is one of the Err* sentinels above.
	Kind error
	// Err is the underlying failure (exit status, I/O), if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("ipset ")
	b.WriteString(e.Command)
	if e.Index >= 0 {
		fmt.Fprintf(&b, ": operation %d %q", e.Index, e.Line)
	}
	b.WriteString(": ")
	if e.Reason != "" {
		b.WriteString(e.Reason)
	} else {
		b.WriteString(e.Kind.Error())
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

// Unwrap exposes both the kind and the underlying error to errors.Is/As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// IsNotFound reports a missing set.
func IsNotFound(err error) bool { return errors.Is(err, ErrSetNotFound) }

// IsExists reports a create that met a set of the same name and another type.
func IsExists(err error) bool { return errors.Is(err, ErrSetExists) }

// IsInUse reports a destroy of a set still referenced (by an iptables rule).
func IsInUse(err error) bool { return errors.Is(err, ErrSetInUse) }

// IsTypeMismatch reports a swap of sets of different types or families.
func IsTypeMismatch(err error) bool { return errors.Is(err, ErrTypeMismatch) }

// IsInvalid reports a malformed name, set definition or entry.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// IsSetFull reports an add beyond maxelem.
func IsSetFull(err error) bool { return errors.Is(err, ErrSetFull) }

// classify maps ipset's message to a kind.
func classify(reason string) error {
	for _, row := range reasonTable {
		if strings.HasPrefix(reason, row.prefix) {
			return row.kind
		}
	}
	return ErrUnknown
}

// parseStderr splits ipset's first error line "ipset v7.17: Error in line 3: why"
// into the 1-based line number (0 when absent) and the reason.
func parseStderr(stderr string) (line int, reason string) {
	msg := strings.TrimSpace(stderr)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if strings.HasPrefix(msg, "ipset v") {
		if i := strings.Index(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
	}
	if rest, ok := strings.CutPrefix(msg, "Error in line "); ok {
		num, why, ok := strings.Cut(rest, ": ")
		n := 0
		for _, r := range num {
			if r < '0' || r > '9' {
				ok = false
				break
			}
			n = n*10 + int(r-'0')
		}
		if ok {
			return n, why
		}
	}
	return 0, msg
}
