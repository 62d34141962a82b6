package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/boundedexec"
)

// Mode is the iptables backend.
type Mode string

const (
	ModeLegacy Mode = "legacy"
	ModeNFT    Mode = "nft"
)

// EnvMode overrides backend detection: KUBE_PROXY_IPTABLES_MODE=legacy|nft.
const EnvMode = "KUBE_PROXY_IPTABLES_MODE"

// lockWait is the -w argument: seconds to wait for the xtables lock (legacy only;
// the nft backend ignores it).
const lockWait = "5"

// Deadlines of one iptables process; past its deadline the process is killed and
// the call fails with a *boundedexec.TimeoutError (errors.Is
// context.DeadlineExceeded). Both include the 5 s xtables lock wait.
const (
	// CommandTimeout bounds one iptables command (-N, -C, -I, -D, -X, -F, -S).
	CommandTimeout = 30 * time.Second
	// RestoreTimeout bounds one iptables-restore or iptables-save: 10k rules
	// restore in 0.5 s (nft backend, docs/PERFORMANCE.md).
	RestoreTimeout = time.Minute
)

// runner is the real Interface for one family and backend.
type runner struct {
	exec     utilexec.Interface
	protocol Protocol
	mode     Mode
	bin      string // iptables-nft
	save     string // iptables-nft-save
	restore  string // iptables-nft-restore
	// Deadlines (the constants above; tests shorten them).
	commandTimeout, restoreTimeout time.Duration
}

// New returns the real implementation for protocol over the mode backend's
// binaries (iptables-legacy, iptables-nft-restore, ip6tables-legacy-save, ...).
func New(exec utilexec.Interface, protocol Protocol, mode Mode) Interface {
	base := "iptables"
	if protocol == ProtocolIPv6 {
		base = "ip6tables"
	}
	if mode != ModeLegacy {
		mode = ModeNFT
	}
	bin := base + "-" + string(mode)
	return &runner{exec: exec, protocol: protocol, mode: mode, bin: bin, save: bin + "-save", restore: bin + "-restore",
		commandTimeout: CommandTimeout, restoreTimeout: RestoreTimeout}
}

var _ Interface = &runner{}

func (r *runner) Protocol() Protocol { return r.protocol }

// Mode returns the backend this runner uses.
func (r *runner) Mode() Mode { return r.mode }

// run executes one command bounded by timeout; a non-zero exit becomes an *Error
// whose Kind comes from the exit status (callers refine it for their command). A
// killed command (timeout) has ExitCode -1 and wraps a *boundedexec.TimeoutError.
func (r *runner) run(ctx context.Context, timeout time.Duration, bin string, stdin []byte, args ...string) ([]byte, *Error) {
	stdout, stderr, err := boundedexec.Run(ctx, r.exec, timeout, bin, stdin, args...)
	if err == nil {
		return stdout, nil
	}
	code := -1
	var exitErr utilexec.ExitError
	var timeoutErr *boundedexec.TimeoutError
	if errors.As(err, &exitErr) && !errors.As(err, &timeoutErr) {
		code = exitErr.ExitStatus()
	}
	return nil, &Error{Command: bin, Args: args, ExitCode: code, Stderr: trimStderr(string(stderr)), Kind: kindForExit(code), Err: err}
}

// trimStderr drops the nft backend's "# Warning: iptables-legacy tables present"
// lines and usage hints.
func trimStderr(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "Try `") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "; ")
}

func (r *runner) cli(ctx context.Context, table Table, args ...string) ([]byte, *Error) {
	return r.run(ctx, r.commandTimeout, r.bin, nil, append([]string{"-w", lockWait, "-t", string(table)}, args...)...)
}

// EnsureChain creates chain; exit 1 from -N means it already exists.
func (r *runner) EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error) {
	_, err := r.cli(ctx, table, "-N", string(chain))
	if err == nil {
		return false, nil
	}
	if err.ExitCode == 1 {
		return true, nil
	}
	return false, err
}

func (r *runner) FlushChain(ctx context.Context, table Table, chain Chain) error {
	if _, err := r.cli(ctx, table, "-F", string(chain)); err != nil {
		if err.ExitCode == 1 {
			err.Kind = ErrNotFound
		}
		return err
	}
	return nil
}

// DeleteChain deletes an empty, unreferenced chain. A missing chain is ErrNotFound;
// a referenced or non-empty one ErrInUse (legacy says so with exit 1 only after the
// chain was found to exist; nft with exit 4).
func (r *runner) DeleteChain(ctx context.Context, table Table, chain Chain) error {
	_, err := r.cli(ctx, table, "-X", string(chain))
	if err == nil {
		return nil
	}
	switch err.ExitCode {
	case 1:
		exists, cerr := r.ChainExists(ctx, table, chain)
		if cerr != nil {
			return errors.Join(err, cerr)
		}
		if exists {
			err.Kind = ErrInUse
		} else {
			err.Kind = ErrNotFound
		}
	case 4:
		if r.mode == ModeNFT {
			err.Kind = ErrInUse
		}
	}
	return err
}

// ChainExists lists at most the first rule of chain (-S CHAIN 1): exit 1 means the
// chain does not exist, on both backends.
func (r *runner) ChainExists(ctx context.Context, table Table, chain Chain) (bool, error) {
	_, err := r.cli(ctx, table, "-S", string(chain), "1")
	if err == nil {
		return true, nil
	}
	if err.ExitCode == 1 {
		return false, nil
	}
	return false, err
}

// EnsureRule checks with -C (exit 1: missing rule or chain) and then inserts.
func (r *runner) EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error) {
	if err := validateArgs(args); err != nil {
		return false, err
	}
	_, err := r.cli(ctx, table, append([]string{"-C", string(chain)}, args...)...)
	if err == nil {
		return true, nil
	}
	if err.ExitCode != 1 {
		return false, err
	}
	if _, err := r.cli(ctx, table, append([]string{string(position), string(chain)}, args...)...); err != nil {
		if err.ExitCode == 1 {
			err.Kind = ErrNotFound // the chain itself is missing
		}
		return false, err
	}
	return false, nil
}

// DeleteRule deletes the rule; a missing rule or chain is not an error.
func (r *runner) DeleteRule(ctx context.Context, table Table, chain Chain, args ...string) error {
	if err := validateArgs(args); err != nil {
		return err
	}
	_, err := r.cli(ctx, table, append([]string{"-D", string(chain)}, args...)...)
	if err != nil && err.ExitCode != 1 {
		return err
	}
	return nil
}

// validateArgs refuses arguments that iptables would misread or that carry control
// characters; comments must go through SanitizeComment.
func validateArgs(args []string) error {
	for i, a := range args {
		if strings.ContainsFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return &Error{Command: "iptables", Args: args, ExitCode: -1, Kind: ErrInvalid,
				Stderr: fmt.Sprintf("argument %d %q contains a control character", i, a)}
		}
	}
	return nil
}

func (r *runner) SaveInto(ctx context.Context, table Table, buf *bytes.Buffer) error {
	out, err := r.run(ctx, r.restoreTimeout, r.save, nil, "-t", string(table))
	if err != nil {
		return err
	}
	buf.Write(out)
	return nil
}

// RestoreAll feeds data to one iptables-restore. On failure the error names the
// input line and its table; tables committed before it stay applied.
func (r *runner) RestoreAll(ctx context.Context, data []byte, flush FlushFlag, counters CounterFlag) error {
	args := []string{"-w", lockWait}
	if flush == NoFlushTables {
		args = append(args, "--noflush")
	}
	if counters == RestoreCount {
		args = append(args, "--counters")
	}
	_, err := r.run(ctx, r.restoreTimeout, r.restore, data, args...)
	if err == nil {
		return nil
	}
	if n := failingLine(err.Stderr); n > 0 {
		err.Line = n
		err.Table, err.Text = lineContext(data, n)
	}
	return err
}

// lineContext returns the table and text of 1-based line n of restore input.
func lineContext(data []byte, n int) (Table, string) {
	var table Table
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "*") {
			table = Table(strings.TrimSpace(l[1:]))
		}
		if i+1 == n {
			return table, l
		}
	}
	return table, ""
}
