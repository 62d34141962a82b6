package iptables

import (
	"errors"
	"fmt"
	"strings"
)

// Error kinds, from the iptables exit status (xtables.h: 1 OTHER_PROBLEM,
// 2 PARAMETER_PROBLEM, 4 RESOURCE_PROBLEM) read in the context of the command that
// ran, never from message text.
var (
	// ErrNotFound: a chain or rule that does not exist (-C, -F, -X, -L exit 1).
	ErrNotFound = errors.New("chain or rule does not exist")
	// ErrInUse: a chain still referenced or not empty (-X: legacy exit 1 after the
	// chain was seen to exist, nft exit 4 EBUSY).
	ErrInUse = errors.New("chain is referenced or not empty")
	// ErrInvalid: iptables rejected its arguments (exit 2): unknown match or
	// target, a jump to a missing chain, a malformed rule; or our own validation.
	ErrInvalid = errors.New("invalid iptables arguments")
	// ErrResource: the xtables lock could not be taken, or the kernel refused
	// (exit 4).
	ErrResource = errors.New("iptables resource problem")
	// ErrFailed: any other failure (exit 1 where no finer meaning applies).
	ErrFailed = errors.New("iptables failed")
)

// Error is a failed iptables, iptables-save or iptables-restore run.
type Error struct {
	// Command is the binary that ran ("iptables-nft-restore").
	Command string
	// Args are its arguments.
	Args []string
	// ExitCode is its exit status, -1 if it did not exit.
	ExitCode int
	// Line is the 1-based failing line of restore input (0 if unknown or not a
	// restore); Table and Text describe that line.
	Line  int
	Table Table
	Text  string
	// Stderr is what the command printed, trimmed.
	Stderr string
	// Kind is one of the Err* sentinels.
	Kind error
	// Err is the underlying exec error.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Command, strings.Join(e.Args, " "))
	if e.Line > 0 {
		fmt.Fprintf(&b, ": line %d", e.Line)
		if e.Table != "" {
			fmt.Fprintf(&b, " (table %s)", e.Table)
		}
		if e.Text != "" {
			fmt.Fprintf(&b, " %q", e.Text)
		}
	}
	fmt.Fprintf(&b, ": %v", e.Kind)
	if e.ExitCode >= 0 {
		fmt.Fprintf(&b, " (exit status %d)", e.ExitCode)
	} else if e.Err != nil {
		// Killed (timeout) or never started: the exec error says which.
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	if e.Stderr != "" {
		fmt.Fprintf(&b, ": %s", e.Stderr)
	}
	return b.String()
}

// Unwrap exposes the kind and the exec error.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// IsNotFound reports a missing chain or rule.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInUse reports a chain that cannot be deleted because it is referenced or not empty.
func IsInUse(err error) bool { return errors.Is(err, ErrInUse) }

// IsInvalid reports rejected arguments or restore input.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// IsResource reports a lock timeout or a kernel resource problem.
func IsResource(err error) bool { return errors.Is(err, ErrResource) }

// kindForExit maps an exit status to the default kind; callers refine exit 1.
func kindForExit(code int) error {
	switch code {
	case 2:
		return ErrInvalid
	case 4:
		return ErrResource
	default:
		return ErrFailed
	}
}

// failingLine finds the restore input line iptables-restore names on stderr. Both
// backends print one of "Error occurred at line: N", "line N failed" or
// "line N: ..." (iptables 1.8).
func failingLine(stderr string) int {
	for _, marker := range []string{"Error occurred at line: ", "line "} {
		for off := 0; ; {
			i := strings.Index(stderr[off:], marker)
			if i < 0 {
				break
			}
			start := off + i
			off = start + len(marker)
			if start > 0 && stderr[start-1] != ' ' && stderr[start-1] != '\n' {
				continue // "headline 12"
			}
			n, j := 0, off
			for j < len(stderr) && stderr[j] >= '0' && stderr[j] <= '9' {
				n = n*10 + int(stderr[j]-'0')
				j++
			}
			if j > off && (j == len(stderr) || stderr[j] == ' ' || stderr[j] == ':' || stderr[j] == '\n') {
				return n
			}
		}
	}
	return 0
}
