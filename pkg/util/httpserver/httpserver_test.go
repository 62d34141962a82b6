package httpserver

// Addresses: servers listen on 127.0.0.1 (port 0); clients connect from
// 127.0.0.1-127.0.0.9, which Linux routes to lo. Only the table tests use
// 10.0.0.0/24, in fake connections that never reach a socket.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
)

var testLimits = Limits{
	ReadHeaderTimeout:       500 * time.Millisecond,
	IdleTimeout:             500 * time.Millisecond,
	MaxHeaderBytes:          1 << 10,
	WriteTimeout:            500 * time.Millisecond,
	MaxConnectionsPerSource: 3,
	MaxConnections:          8,
}

// floodLimits keep flooding connections open for the length of a test, so that
// only the caps close them.
var floodLimits = Limits{
	ReadHeaderTimeout:       10 * time.Second,
	IdleTimeout:             10 * time.Second,
	MaxHeaderBytes:          1 << 10,
	WriteTimeout:            10 * time.Second,
	MaxConnectionsPerSource: 3,
	MaxConnections:          8,
}

// okOrBig answers "ok", or 1 MiB on /big (enough to block a client that does
// not read).
var okOrBig = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/big" {
		_, _ = w.Write(make([]byte, 1<<20))
		return
	}
	_, _ = io.WriteString(w, "ok")
})

// serve serves handler on 127.0.0.1 with limits, as the daemon does, and
// returns its address and the table of its listener.
func serve(t *testing.T, limits Limits, handler http.Handler, streams ...Stream) (string, *connTable) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limited := Limit(l, limits)
	srv := New(handler, limits, streams...)
	go func() { _ = srv.Serve(limited) }()
	t.Cleanup(func() { _ = srv.Close() })
	var table *connTable
	if ll, ok := limited.(*Listener); ok {
		table = ll.table
	}
	return l.Addr().String(), table
}

func TestDefaultLimitsAreSet(t *testing.T) {
	srv := New(http.NotFoundHandler(), DefaultLimits)
	if srv.ReadHeaderTimeout != 10*time.Second || srv.IdleTimeout != time.Minute || srv.MaxHeaderBytes != 16<<10 || srv.ConnState == nil {
		t.Errorf("server limits %v %v %v, ConnState set %v", srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes, srv.ConnState != nil)
	}
	if h, ok := srv.Handler.(*guardedHandler); !ok || h.writeTimeout != time.Minute || h.gate == nil || h.gate.max != 4 {
		t.Errorf("handler %#v, want a write deadline and a request gate", srv.Handler)
	}
	if d := DefaultLimits; d.WriteTimeout != time.Minute || d.MaxConnectionsPerSource != 32 || d.MaxConnections != 512 {
		t.Errorf("WriteTimeout %v MaxConnectionsPerSource %d MaxConnections %d", d.WriteTimeout, d.MaxConnectionsPerSource, d.MaxConnections)
	}
}

func TestSlowClientIsDisconnected(t *testing.T) {
	addr, _ := serve(t, testLimits, okOrBig)
	httpservertest.SlowClientDisconnected(t, addr, testLimits.ReadHeaderTimeout+2*time.Second)
}

func TestHugeHeadersRefused(t *testing.T) {
	addr, _ := serve(t, testLimits, okOrBig)
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	// net/http allows MaxHeaderBytes plus 4 KiB of slack.
	req.Header.Set("X-Big", strings.Repeat("a", 8<<10))
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("8 KiB header: status %d, want 431", resp.StatusCode)
	}
}

func TestIdleConnectionClosed(t *testing.T) {
	addr, _ := serve(t, testLimits, okOrBig)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the response, then nothing more: the server must close the idle
	// keep-alive connection after IdleTimeout.
	_ = conn.SetReadDeadline(time.Now().Add(testLimits.IdleTimeout + 3*time.Second))
	buf, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("idle connection still open: %v", err)
	}
	if !strings.HasPrefix(string(buf), "HTTP/1.1 200 OK") {
		t.Errorf("response %q", buf)
	}
}

func TestLimitZeroIsUnlimited(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if Limit(l, Limits{}) != l {
		t.Error("no caps, and the listener was wrapped")
	}
}

// TestFreshClientNotDelayed: whatever one source holds open (more than the caps
// allow), a fresh client from another source is answered at once, and the
// source is left with at most its cap of connections.
func TestFreshClientNotDelayed(t *testing.T) {
	for _, flood := range []httpservertest.Flood{
		{Source: "127.0.0.1", Idle: 100},
		{Source: "127.0.0.1", Headers: 100},
		{Source: "127.0.0.1", SlowReader: 50},
		{Source: "127.0.0.1", Idle: 30, Headers: 30, SlowReader: 30},
	} {
		t.Run(fmt.Sprintf("idle=%d,headers=%d,slow=%d", flood.Idle, flood.Headers, flood.SlowReader), func(t *testing.T) {
			addr, table := serve(t, floodLimits, okOrBig)
			path := "/"
			if flood.SlowReader > 0 {
				path = "/big"
			}
			held := httpservertest.FreshClientServed(t, addr, path, flood, "127.0.0.2", 10)
			if held > floodLimits.MaxConnectionsPerSource {
				t.Errorf("the flooding source still holds %d connections, cap %d", held, floodLimits.MaxConnectionsPerSource)
			}
			if n := table.openConns(); n > floodLimits.MaxConnectionsPerSource {
				t.Errorf("the server holds %d connections, want at most %d (one source's cap; the probes are closed)", n, floodLimits.MaxConnectionsPerSource)
			}
		})
	}
}
