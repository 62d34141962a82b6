// Package httpservertest checks, against a real server on a loopback address,
// that the limits of pkg/util/httpserver hold: a client that never finishes its
// headers is disconnected, and no more than the cap of connections is served at
// once.
package httpservertest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// SlowClientDisconnected connects to addr, sends the start of a request and
// never finishes its headers; the server must close the connection within
// within (its ReadHeaderTimeout plus slack).
func SlowClientDisconnected(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("connecting to %s: %v", addr, err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: kube-proxy\r\n"); err != nil {
		t.Fatalf("writing to %s: %v", addr, err)
	}
	start := time.Now()
	if err := waitClosed(conn, within); err != nil {
		t.Fatalf("slow client on %s: %v", addr, err)
	}
	t.Logf("slow client on %s disconnected after %s", addr, time.Since(start).Round(time.Millisecond))
}

// waitClosed reads from conn until the server closes it (EOF or reset), or fails
// after within.
func waitClosed(conn net.Conn, within time.Duration) error {
	_ = conn.SetReadDeadline(time.Now().Add(within))
	buf := make([]byte, 512)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue // a 408 or similar before the close is fine
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errors.New("still connected after " + within.String())
		}
		return nil // EOF or reset: closed by the server
	}
}

// ConnectionCap holds max silent connections to addr and checks that a request
// on one more connection is not served while they are open, then is served once
// the server drops them after headerTimeout (its ReadHeaderTimeout). path is any
// path the server answers.
func ConnectionCap(t *testing.T, addr, path string, max int, headerTimeout time.Duration) {
	t.Helper()
	var silent []net.Conn
	for range max {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connecting to %s: %v", addr, err)
		}
		defer conn.Close()
		silent = append(silent, conn)
	}
	// Give the server time to accept them all before the extra request.
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	type result struct {
		code int
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		client := &http.Client{Timeout: headerTimeout + 10*time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get("http://" + addr + path)
		r := result{err: err, took: time.Since(start)}
		if err == nil {
			r.code = resp.StatusCode
			resp.Body.Close()
		}
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("request %d on %s served after %s while %d connections were open (err %v): the cap does not hold", max+1, addr, r.took, max, r.err)
	case <-time.After(headerTimeout / 2):
	}
	for i, conn := range silent {
		if err := waitClosed(conn, headerTimeout+5*time.Second); err != nil {
			t.Errorf("silent connection %d: %v", i, err)
		}
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("request after the silent connections were dropped: %v", r.err)
		}
		t.Logf("request %d served after %s (status %d)", max+1, r.took.Round(time.Millisecond), r.code)
	case <-time.After(10 * time.Second):
		t.Fatal("request not served after the silent connections were dropped")
	}
}
