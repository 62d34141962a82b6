package framework

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/agentproto"
)

// These run the host half of the agent protocol (VM.do) against fake guests
// on 127.0.0.1; the agent's half is tested in test/e2e/cmd/e2e-agent.

func testVM(t *testing.T) *VM {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(console, []byte("[  12.3] last console line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vm := &VM{Console: console, ln: ln, conns: make(chan net.Conn, 4), exited: make(chan struct{}), ready: true,
		ackTimeout: 300 * time.Millisecond, lostAfter: 3 * time.Second}
	t.Cleanup(func() { ln.Close() })
	go vm.accept()
	return vm
}

// dial opens a guest-side connection; answer, when true, serves one request
// on it as the agent does (acknowledgement, then a response with ExitCode 7);
// otherwise the connection stays open and silent, as one dead on the way.
func dial(t *testing.T, vm *VM, answer bool, served *atomic.Int32) {
	t.Helper()
	c, err := net.Dial("tcp", vm.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if !answer {
		return
	}
	go func() {
		var req agentproto.Request
		if err := json.NewDecoder(c).Decode(&req); err != nil {
			return
		}
		served.Add(1)
		enc := json.NewEncoder(c)
		_ = enc.Encode(agentproto.Response{Accepted: true})
		_ = enc.Encode(agentproto.Response{ExitCode: 7})
	}()
}

func TestAgentRequestSkipsAConnectionThatLostIt(t *testing.T) {
	vm := testVM(t)
	var served atomic.Int32
	dial(t, vm, false, &served) // first in line, never acknowledges
	dial(t, vm, true, &served)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := vm.Exec(ctx, "true")
	if err != nil || r.ExitCode != 7 {
		t.Fatalf("Exec = %+v, %v; want the answer of the second connection", r, err)
	}
	if served.Load() != 1 {
		t.Fatalf("the request was served %d times, want once", served.Load())
	}
}

func TestAgentRequestSkipsStaleConnections(t *testing.T) {
	vm := testVM(t)
	var served atomic.Int32
	// Connections the agent already closed (it replaces idle ones): EOF at once.
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", vm.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	dial(t, vm, true, &served)
	vm.ackTimeout = 5 * time.Second // waiting it out even once would show
	start := time.Now()
	resp, err := vm.do(context.Background(), agentproto.Request{Op: agentproto.OpWrite, Path: "/x"})
	if err != nil || resp.ExitCode != 7 {
		t.Fatalf("do = %+v, %v", resp, err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("stale connections cost %s: they must fail at once, not wait for the acknowledgement", d)
	}
}

func TestAgentThatStopsAnsweringFailsEveryLaterRequestAtOnce(t *testing.T) {
	vm := testVM(t)
	var served atomic.Int32
	dial(t, vm, false, &served) // the agent is stuck on a dead connection and dials no more
	_, err := vm.do(context.Background(), agentproto.Request{Op: agentproto.OpExec, Argv: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "the VM stopped answering") || !strings.Contains(err.Error(), "last console line") {
		t.Fatalf("do = %v; want the VM declared unresponsive with its console tail", err)
	}
	dial(t, vm, true, &served)
	start := time.Now()
	if _, err := vm.do(context.Background(), agentproto.Request{Op: agentproto.OpPing}); err == nil || time.Since(start) > time.Second {
		t.Fatalf("a request after the VM was declared unresponsive: %v after %s; want an error at once", err, time.Since(start))
	}
	if served.Load() != 0 {
		t.Fatal("a request went to the guest after the VM was declared unresponsive")
	}
}
