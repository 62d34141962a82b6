package httpserver

// Addresses: 127.0.0.1 only (real listeners on port 0).

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
)

var testLimits = Limits{
	ReadHeaderTimeout: 500 * time.Millisecond,
	IdleTimeout:       500 * time.Millisecond,
	MaxHeaderBytes:    1 << 10,
	MaxConnections:    3,
}

func serve(t *testing.T, limits Limits) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), limits)
	go func() { _ = srv.Serve(Limit(l, limits)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func TestDefaultLimitsAreSet(t *testing.T) {
	srv := New(http.NotFoundHandler(), DefaultLimits)
	if srv.ReadHeaderTimeout != 10*time.Second || srv.IdleTimeout != time.Minute || srv.MaxHeaderBytes != 16<<10 {
		t.Errorf("server limits %v %v %v", srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	if DefaultLimits.MaxConnections != 100 {
		t.Errorf("MaxConnections %d", DefaultLimits.MaxConnections)
	}
}

func TestSlowClientIsDisconnected(t *testing.T) {
	httpservertest.SlowClientDisconnected(t, serve(t, testLimits), testLimits.ReadHeaderTimeout+2*time.Second)
}

func TestConnectionCapHolds(t *testing.T) {
	httpservertest.ConnectionCap(t, serve(t, testLimits), "/", testLimits.MaxConnections, testLimits.ReadHeaderTimeout)
}

func TestHugeHeadersRefused(t *testing.T) {
	addr := serve(t, testLimits)
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
	addr := serve(t, testLimits)
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
		t.Error("MaxConnections 0 wrapped the listener")
	}
}
