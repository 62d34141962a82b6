package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/agentproto"
)

// Everything here runs on 127.0.0.1 in the host's root namespace: the agent
// dials a listener of the test, as it dials the qemu guestfwd in the VM.

func startAgent(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { _ = runAgent([]string{"--connect", ln.Addr().String()}) }()
	return ln
}

func call(t *testing.T, ln net.Listener, req agentproto.Request) agentproto.Response {
	t.Helper()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(c)
	var ack, resp agentproto.Response
	if err := dec.Decode(&ack); err != nil {
		t.Fatal(err)
	}
	if !ack.Accepted {
		t.Fatalf("first answer = %+v, want the acknowledgement", ack)
	}
	if err := dec.Decode(&resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestAgentExecReportsExitCodeAndOutput(t *testing.T) {
	ln := startAgent(t)
	resp := call(t, ln, agentproto.Request{Op: agentproto.OpExec, Argv: []string{"sh", "-c", "echo out; echo err >&2; cat; exit 3"}, Stdin: []byte("in\n")})
	if resp.Error != "" || resp.ExitCode != 3 || string(resp.Stdout) != "out\nin\n" || string(resp.Stderr) != "err\n" {
		t.Fatalf("exec response = %+v", resp)
	}
	resp = call(t, ln, agentproto.Request{Op: agentproto.OpExec, Argv: []string{"/nonexistent/binary"}})
	if resp.Error == "" || resp.ExitCode != -1 {
		t.Fatalf("exec of a missing binary = %+v, want an error", resp)
	}
	resp = call(t, ln, agentproto.Request{Op: agentproto.OpExec, Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if !strings.Contains(resp.Error, "timed out") {
		t.Fatalf("exec past its timeout = %+v, want a timeout error", resp)
	}
}

// TestAgentReplacesAnIdleConnection: a connection that carries no request
// for --idle is closed by the agent, which dials a fresh one that works.
func TestAgentReplacesAnIdleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { _ = runAgent([]string{"--connect", ln.Addr().String(), "--idle", "300ms"}) }()
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	start := time.Now()
	_ = first.SetReadDeadline(start.Add(10 * time.Second))
	if n, err := first.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d bytes, %v; want the agent to close it", n, err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("the agent closed its idle connection after %s, before --idle", waited)
	}
	if resp := call(t, ln, agentproto.Request{Op: agentproto.OpPing}); resp.Error != "" {
		t.Fatalf("ping on the fresh connection = %+v", resp)
	}
}

func TestAgentWriteStartSignal(t *testing.T) {
	ln := startAgent(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f")
	if resp := call(t, ln, agentproto.Request{Op: agentproto.OpWrite, Path: path, Data: []byte("data"), Mode: 0o600}); resp.Error != "" {
		t.Fatal(resp.Error)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("written file: %v %v", st, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Fatalf("written file holds %q", b)
	}

	logPath := filepath.Join(dir, "log")
	resp := call(t, ln, agentproto.Request{Op: agentproto.OpStart, Argv: []string{"sh", "-c", "echo started; exec sleep 60"}, Log: logPath})
	if resp.Error != "" || resp.PID == 0 {
		t.Fatalf("start = %+v", resp)
	}
	// The process writes its log line in its own time: wait for it before stopping it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(logPath); string(b) == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("background log = %q, want %q", b, "started\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := call(t, ln, agentproto.Request{Op: agentproto.OpSignal, PID: resp.PID, Signal: int(syscall.SIGTERM)}); r.Error != "" {
		t.Fatal(r.Error)
	}
	deadline = time.Now().Add(10 * time.Second)
	for syscall.Kill(resp.PID, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after SIGTERM", resp.PID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := call(t, ln, agentproto.Request{Op: agentproto.OpSignal, PID: 1, Signal: 0}); r.Error == "" {
		t.Fatal("signalling a process the agent did not start must fail")
	}
	if r := call(t, ln, agentproto.Request{Op: "bogus"}); r.Error == "" {
		t.Fatal("an unknown op must fail")
	}
}

func TestServeAndClientTCPAndUDP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	go func() { _ = runServe([]string{"--name", "pod-x", "--host", "127.0.0.1", "--port", itoa(port)}) }()
	addr := net.JoinHostPort("127.0.0.1", itoa(port))
	for _, proto := range []string{"tcp", "udp"} {
		var line string
		var err error
		for i := 0; i < 50; i++ {
			if line, err = attempt(proto, addr, time.Second); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		if !strings.HasPrefix(line, "pod-x from=127.0.0.1:") {
			t.Fatalf("%s answer = %q", proto, line)
		}
	}
	if err := runClient([]string{"--addr", addr, "--count", "2"}); err != nil {
		t.Fatalf("client against a live server: %v", err)
	}
	// A closed port: every attempt fails and the client says so.
	if err := runClient([]string{"--addr", "127.0.0.1:1", "--count", "1", "--timeout", "500ms"}); err == nil {
		t.Fatal("client against a closed port must fail")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestGetPrintsStatusAndBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"localEndpoints": 0}`)
	}))
	defer srv.Close()
	out := captureStdout(t, func() {
		if err := runGet([]string{"--url", srv.URL}); err != nil {
			t.Fatal(err)
		}
	})
	if out != "STATUS 503\n{\"localEndpoints\": 0}\n" {
		t.Fatalf("get printed %q", out)
	}
	if err := runGet([]string{"--url", "http://127.0.0.1:1/", "--timeout", "500ms"}); err == nil {
		t.Fatal("get against a closed port must fail")
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}
