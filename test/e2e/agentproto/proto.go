// Package agentproto is the wire format between the end-to-end harness on the
// host and e2e-agent in the VM. The agent dials the host (through a qemu
// guestfwd address, the only way out of a restrict=on guest); each connection
// carries exactly one JSON Request from the host, then two JSON Responses back:
// an acknowledgement (Accepted set) as soon as the agent has read the request,
// before it acts on it, and the result.
//
// The acknowledgement lets the host tell a lost request from a slow one: with
// none in AckTimeout the request was never read, so the host may send it on
// another connection without it running twice. An agent that waits IdleRedial
// on a connection without a request closes it and dials a fresh one, so a
// connection that died silently on the way (qemu's slirp keeps the guest's
// end open when the host side goes) cannot leave the agent waiting forever.
package agentproto

import "time"

const (
	// AckTimeout is how long the host waits for the acknowledgement.
	AckTimeout = 20 * time.Second
	// IdleRedial is how long the agent keeps a connection with no request.
	IdleRedial = 45 * time.Second
)

// Op names what the agent must do.
type Op string

const (
	// OpExec runs Argv to completion and returns its exit code and output.
	OpExec Op = "exec"
	// OpStart starts Argv in the background, output to Log, and returns its PID.
	OpStart Op = "start"
	// OpWrite writes Data to Path with Mode, creating parent folders.
	OpWrite Op = "write"
	// OpSignal sends Signal to PID (a process the agent started).
	OpSignal Op = "signal"
	// OpPing answers at once; the harness uses it to wait for the agent.
	OpPing Op = "ping"
)

// Request is one command from the host.
type Request struct {
	Op      Op            `json:"op"`
	Argv    []string      `json:"argv,omitempty"`
	Env     []string      `json:"env,omitempty"`
	Stdin   []byte        `json:"stdin,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	Path    string        `json:"path,omitempty"`
	Data    []byte        `json:"data,omitempty"`
	Mode    uint32        `json:"mode,omitempty"`
	Log     string        `json:"log,omitempty"`
	PID     int           `json:"pid,omitempty"`
	Signal  int           `json:"signal,omitempty"`
}

// Response is the agent's answer. Error is set when the request itself could
// not be carried out (bad op, command not found, timeout); a command that ran
// and failed reports its ExitCode instead.
type Response struct {
	Accepted bool   `json:"accepted,omitempty"`
	ExitCode int    `json:"exitCode"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Error    string `json:"error,omitempty"`
}
