// Package boundedexec runs the external tools the kernel layers need (ipset,
// iptables-restore, iptables-save, iptables) with a deadline that holds even when
// the tool cannot be reaped.
//
// The deadline kills the tool (os/exec sends SIGKILL when the command's context
// ends). Killing is not always enough to return: a process stuck in the kernel
// (uninterruptible sleep) exits only when the kernel lets it, and a child the tool
// forked keeps the output pipes open, so waiting for the command would still
// block. Run therefore stops waiting KillGrace after the deadline and reports the
// tool as hung; the wait goes on in the background until the process is gone.
package boundedexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	utilexec "k8s.io/utils/exec"
)

// KillGrace is how long Run waits for a killed tool to be reaped before it gives
// up waiting and returns.
const KillGrace = 2 * time.Second

// ErrNotReaped is wrapped in Run's error when the tool had not exited KillGrace
// after it was killed.
var ErrNotReaped = errors.New("did not exit after being killed")

// TimeoutError says a tool was stopped because its deadline passed (or the
// caller's context ended). It unwraps to both the context's error
// (context.DeadlineExceeded or context.Canceled) and the tool's own error, so
// errors.Is(err, context.DeadlineExceeded) and errors.As(err, &exitErr) both
// work.
type TimeoutError struct {
	Command string
	Timeout time.Duration // the per-call deadline; 0 when only the caller's context bounded it
	Cause   error         // context.DeadlineExceeded or context.Canceled
	Err     error         // what running the tool returned, or ErrNotReaped
}

func (e *TimeoutError) Error() string {
	what := "stopped"
	if errors.Is(e.Cause, context.DeadlineExceeded) {
		what = "timed out"
		if e.Timeout > 0 {
			what = fmt.Sprintf("timed out after %s", e.Timeout)
		}
	}
	return fmt.Sprintf("%s %s: %v", e.Command, what, e.Err)
}

func (e *TimeoutError) Unwrap() []error { return []error{e.Cause, e.Err} }

// Run runs name with args, feeding stdin (nil: none), and returns its stdout and
// stderr. A timeout > 0 bounds the call on top of ctx. When the deadline passes
// or ctx ends, the error is a *TimeoutError; Run returns at most KillGrace after
// that, whatever the tool does. A non-zero exit is the command's
// utilexec.ExitError; a tool that could not be started (missing binary) is an
// error naming it.
func Run(ctx context.Context, exec utilexec.Interface, timeout time.Duration, name string, stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, name, args...)
	// The buffers belong to the goroutine until it reports: after an abandoned
	// wait the tool may still write to them.
	var outBuf, errBuf bytes.Buffer
	if stdin != nil {
		cmd.SetStdin(bytes.NewReader(stdin))
	}
	cmd.SetStdout(&outBuf)
	cmd.SetStderr(&errBuf)
	done := make(chan error, 1)
	go func() { done <- cmd.Run() }()

	select {
	case err = <-done:
	case <-ctx.Done():
		grace := time.NewTimer(KillGrace)
		defer grace.Stop()
		select {
		case err = <-done:
		case <-grace.C:
			return nil, nil, &TimeoutError{Command: name, Timeout: timeout, Cause: ctx.Err(), Err: fmt.Errorf("%w within %s", ErrNotReaped, KillGrace)}
		}
	}
	if err == nil {
		return outBuf.Bytes(), errBuf.Bytes(), nil
	}
	var exitErr utilexec.ExitError
	switch {
	case ctx.Err() != nil:
		err = &TimeoutError{Command: name, Timeout: timeout, Cause: ctx.Err(), Err: err}
	case !errors.As(err, &exitErr):
		// Not started (missing binary, ...): utilexec's message does not name it.
		err = fmt.Errorf("running %s: %w", name, err)
	}
	return nil, errBuf.Bytes(), err
}
