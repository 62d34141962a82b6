package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/agentproto"
)

// runAgent keeps one idle connection open to the host at all times: as soon
// as a connection receives its request the next one is dialled, so the host
// can issue requests concurrently. A connection idle for --idle is closed and
// replaced, and every request is acknowledged before it is acted on (see
// agentproto).
func runAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	connect := fs.String("connect", "10.0.2.101:7000", "host control address (a qemu guestfwd)")
	idle := fs.Duration("idle", agentproto.IdleRedial, "close a connection that carried no request for this long and dial a fresh one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	a := &agent{procs: map[int]*exec.Cmd{}}
	for {
		conn, err := net.DialTimeout("tcp", *connect, 5*time.Second)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		_ = conn.SetReadDeadline(time.Now().Add(*idle))
		var req agentproto.Request
		if err := json.NewDecoder(conn).Decode(&req); err != nil {
			// The host closes idle connections when it is done or restarts;
			// past --idle this one may be dead on the way: replace it.
			conn.Close()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		_ = conn.SetReadDeadline(time.Time{})
		go func() {
			defer conn.Close()
			enc := json.NewEncoder(conn)
			if err := enc.Encode(agentproto.Response{Accepted: true}); err != nil {
				return // the host is gone and will send the request again
			}
			_ = enc.Encode(a.handle(req))
		}()
	}
}

type agent struct {
	mu    sync.Mutex
	procs map[int]*exec.Cmd
}

func (a *agent) handle(req agentproto.Request) agentproto.Response {
	switch req.Op {
	case agentproto.OpPing:
		return agentproto.Response{}
	case agentproto.OpExec:
		return a.exec(req)
	case agentproto.OpStart:
		return a.start(req)
	case agentproto.OpWrite:
		mode := os.FileMode(req.Mode)
		if mode == 0 {
			mode = 0o644
		}
		if err := os.MkdirAll(filepath.Dir(req.Path), 0o755); err != nil {
			return agentproto.Response{Error: err.Error()}
		}
		if err := os.WriteFile(req.Path, req.Data, mode); err != nil {
			return agentproto.Response{Error: err.Error()}
		}
		if err := os.Chmod(req.Path, mode); err != nil {
			return agentproto.Response{Error: err.Error()}
		}
		return agentproto.Response{}
	case agentproto.OpSignal:
		a.mu.Lock()
		cmd := a.procs[req.PID]
		a.mu.Unlock()
		if cmd == nil {
			return agentproto.Response{Error: fmt.Sprintf("no process %d started by the agent", req.PID)}
		}
		if err := cmd.Process.Signal(syscall.Signal(req.Signal)); err != nil {
			return agentproto.Response{Error: err.Error()}
		}
		return agentproto.Response{}
	default:
		return agentproto.Response{Error: fmt.Sprintf("unknown op %q", req.Op)}
	}
}

func (a *agent) exec(req agentproto.Request) agentproto.Response {
	if len(req.Argv) == 0 {
		return agentproto.Response{Error: "exec: empty argv"}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	cmd.Env = append(os.Environ(), req.Env...)
	cmd.Stdin = bytes.NewReader(req.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Kill the whole group on timeout: children such as ip netns exec ... keep
	// the output pipes open otherwise.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	resp := agentproto.Response{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		resp.Error = fmt.Sprintf("%q timed out after %s", req.Argv, timeout)
		resp.ExitCode = -1
	case errors.As(err, &exitErr):
		resp.ExitCode = exitErr.ExitCode()
	case err != nil:
		resp.Error = err.Error()
		resp.ExitCode = -1
	}
	return resp
}

func (a *agent) start(req agentproto.Request) agentproto.Response {
	if len(req.Argv) == 0 {
		return agentproto.Response{Error: "start: empty argv"}
	}
	logPath := req.Log
	if logPath == "" {
		logPath = os.DevNull
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return agentproto.Response{Error: err.Error()}
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env = append(os.Environ(), req.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return agentproto.Response{Error: err.Error()}
	}
	logFile.Close()
	pid := cmd.Process.Pid
	a.mu.Lock()
	a.procs[pid] = cmd
	a.mu.Unlock()
	go func() {
		_ = cmd.Wait()
	}()
	return agentproto.Response{PID: pid}
}
