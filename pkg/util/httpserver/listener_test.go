package httpserver

// Addresses: servers on 127.0.0.1 (port 0), clients from 127.0.0.1-127.0.0.9.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
)

// waitTable waits (2 s at most) until the table dumps as want.
func waitTable(t *testing.T, table *connTable, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for table.dump() != want {
		if time.Now().After(deadline) {
			t.Fatalf("table:\n%s\nwant:\n%s", table.dump(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitClosedByServer fails unless the server closed conn within a second.
func waitClosedByServer(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64<<10)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s still open", what)
		}
		return
	}
}

// TestShedOrderOnRealConnections: the server's connection states reach the
// table, so one source over its cap loses its idle connection first, then the
// oldest still sending headers, and the one being served last.
func TestShedOrderOnRealConnections(t *testing.T) {
	addr, table := serve(t, floodLimits, okOrBig)
	const source = "127.0.0.3"
	deadline := time.Now().Add(5 * time.Second)
	dial := func(kind httpservertest.Kind, path string) (net.Conn, int) {
		t.Helper()
		c, err := httpservertest.Dial(source, addr, path, kind, deadline)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, c.LocalAddr().(*net.TCPAddr).Port
	}
	idle, i := dial(httpservertest.Idle, "/")
	headers, h := dial(httpservertest.Headers, "/")
	_, s := dial(httpservertest.SlowReader, "/big") // blocks the server writing: active
	waitTable(t, table, fmt.Sprintf("%s 3 idle:%d headers:%d active:%d\n", source, i, h, s))

	_, h2 := dial(httpservertest.Headers, "/")
	waitClosedByServer(t, idle, "the idle connection")
	waitTable(t, table, fmt.Sprintf("%s 3 headers:%d,%d active:%d\n", source, h, h2, s))

	_, h3 := dial(httpservertest.Headers, "/")
	waitClosedByServer(t, headers, "the oldest connection sending headers")
	_, h4 := dial(httpservertest.Headers, "/")
	waitTable(t, table, fmt.Sprintf("%s 3 headers:%d,%d active:%d\n", source, h3, h4, s))
}

// TestCapsHold: six sources opening connections at once never make the
// listener hold more than its caps, and another is served meanwhile (fewer
// sources than the total cap: one of them always holds more than the fresh
// client).
func TestCapsHold(t *testing.T) {
	addr, table := serve(t, floodLimits, okOrBig)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst int
	var worstDump string
	wg.Add(1)
	go func() { // watches the caps while the sources connect
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			dump := table.dump()
			mu.Lock()
			if n := table.openConns(); n > worst {
				worst, worstDump = n, dump
			}
			mu.Unlock()
			for _, line := range strings.Split(strings.TrimSpace(dump), "\n") {
				var src string
				var n int
				if _, err := fmt.Sscanf(line, "%s %d", &src, &n); err == nil && n > floodLimits.MaxConnectionsPerSource {
					t.Errorf("source %s holds %d connections: %s", src, n, line)
				}
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	var clients sync.WaitGroup
	for i := 1; i <= 6; i++ {
		source := fmt.Sprintf("127.0.0.%d", i)
		clients.Add(1)
		go func() {
			defer clients.Done()
			for j := range 40 {
				if c, err := httpservertest.Dial(source, addr, "/", httpservertest.Kind(j%2), deadline); err == nil {
					t.Cleanup(func() { c.Close() })
				}
			}
		}()
	}
	if took, err := httpservertest.Probe("127.0.0.9", addr, "/", time.Second); err != nil {
		t.Errorf("probe from another source while six connect: %v (after %s)", err, took)
	}
	clients.Wait()
	if took, err := httpservertest.Probe("127.0.0.9", addr, "/", time.Second); err != nil {
		t.Errorf("probe from another source after six connected: %v (after %s)", err, took)
	}
	close(stop)
	wg.Wait()
	if worst > floodLimits.MaxConnections {
		t.Errorf("the listener held %d connections, cap %d:\n%s", worst, floodLimits.MaxConnections, worstDump)
	}
	t.Logf("at most %d connections held (cap %d), %d at the end", worst, floodLimits.MaxConnections, table.openConns())
}

// scriptedListener returns its connections and errors in order.
type scriptedListener struct {
	net.Listener
	accepts []any // net.Conn or error
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	if len(l.accepts) == 0 {
		return nil, errors.New("script ended")
	}
	next := l.accepts[0]
	l.accepts = l.accepts[1:]
	if err, ok := next.(error); ok {
		return nil, err
	}
	return next.(net.Conn), nil
}

// TestOutOfDescriptorsSheds: when accepting fails for want of descriptors, the
// listener sheds a connection and accepts again rather than leave the new one
// waiting in the kernel's queue; with nothing to shed it returns the error.
func TestOutOfDescriptorsSheds(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	old := &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}}
	fresh := &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 1}}
	l := Limit(&scriptedListener{accepts: []any{old, emfile, fresh}}, Limits{MaxConnections: 10}).(*Listener)
	for _, want := range []*fakeConn{old, fresh} {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := c.(*trackedConn).Conn; got != want {
			t.Fatalf("accepted %v, want %v", got.RemoteAddr(), want.addr)
		}
	}
	if !old.closed || fresh.closed {
		t.Errorf("old closed %v, fresh closed %v; want only old", old.closed, fresh.closed)
	}
	if got := l.table.dump(); got != "10.0.0.2 1 headers:1\n" {
		t.Errorf("table %q", got)
	}

	empty := Limit(&scriptedListener{accepts: []any{emfile}}, Limits{MaxConnections: 10})
	if _, err := empty.Accept(); !errors.Is(err, syscall.EMFILE) {
		t.Errorf("Accept with nothing to shed: %v, want EMFILE", err)
	}
}
