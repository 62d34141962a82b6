// Package httpservertest checks, against a real server on a loopback address,
// that the limits of pkg/util/httpserver hold: a client that never finishes its
// headers is disconnected, and no flood of connections from one source delays a
// fresh client from another.
//
// Addresses: the servers listen on 127.0.0.1; the clients connect from other
// addresses of 127.0.0.0/8, which Linux routes to lo in every network namespace.
package httpservertest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	buf := make([]byte, 32<<10)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue // a 408, or responses to pipelined requests, before the close
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errors.New("still connected after " + within.String())
		}
		return nil // EOF or reset: closed by the server
	}
}

// Kind is what a flooding connection does.
type Kind int

const (
	// Idle sends one request, reads the response and keeps the connection.
	Idle Kind = iota
	// Headers sends the start of a request and never finishes its headers.
	Headers
	// SlowReader sends many pipelined requests and never reads a response, with
	// a small receive buffer, so the server blocks writing to it.
	SlowReader
)

var kindNames = []string{"idle", "headers", "slow-reader"}

func (k Kind) String() string { return kindNames[k] }

// PipelinedRequests is how many requests a SlowReader sends at once.
const PipelinedRequests = 200

// Dial connects to addr from the local address source (any port) and makes
// the connection do what kind does; an error if it could not. A SlowReader's
// writes that do not fit in the socket buffers by deadline are dropped.
func Dial(source, addr, path string, kind Kind, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Deadline: deadline}
	if kind == SlowReader {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				// Before connecting, so that the window the server sees is small.
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
			return errors.Join(err, serr)
		}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	request := "GET " + path + " HTTP/1.1\r\nHost: kube-proxy\r\n\r\n"
	_ = conn.SetDeadline(deadline)
	switch kind {
	case Idle:
		if _, err = io.WriteString(conn, request); err == nil {
			var resp *http.Response
			if resp, err = http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	case Headers:
		_, err = io.WriteString(conn, strings.TrimSuffix(request, "\r\n"))
	case SlowReader:
		if _, werr := io.WriteString(conn, strings.Repeat(request, PipelinedRequests)); werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded) {
			err = werr
		}
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s connection from %s to %s: %w", kind, source, addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// Probe sends one request for path to addr on a fresh connection from source
// and returns how long the answer took (any status is an answer), or an error
// if there was none within timeout.
func Probe(source, addr, path string, timeout time.Duration) (time.Duration, error) {
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}).DialContext,
			DisableKeepAlives: true,
		},
	}
	start := time.Now()
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return time.Since(start), err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), err
}

// Flood is the connections one source opens, of each kind, in that order.
type Flood struct {
	Source                    string
	Idle, Headers, SlowReader int
}

// FreshClientServed opens flood's connections to addr, each answered or not,
// then requires probes requests for path from probeSource, each on a fresh
// connection, to be answered within a second. It returns how many of the
// flood's connections the server still holds: at most its cap for one source.
// The server's header and idle timeouts must be long enough not to close them
// meanwhile (a few seconds).
func FreshClientServed(t *testing.T, addr, path string, flood Flood, probeSource string, probes int) (held int) {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range []struct {
		kind Kind
		n    int
	}{{Idle, flood.Idle}, {Headers, flood.Headers}, {SlowReader, flood.SlowReader}} {
		for range k.n {
			c, err := Dial(flood.Source, addr, path, k.kind, deadline)
			if err != nil {
				continue // shed before it was answered: what a flood gets
			}
			conns = append(conns, c)
		}
	}
	var slowest time.Duration
	for i := range probes {
		took, err := Probe(probeSource, addr, path, time.Second)
		if err != nil {
			t.Fatalf("probe %d of %s%s from %s with %d+%d+%d connections from %s opened: %v", i, addr, path, probeSource, flood.Idle, flood.Headers, flood.SlowReader, flood.Source, err)
		}
		slowest = max(slowest, took)
	}
	// A shed connection is closed at once, but a slow reader still has
	// responses to read before it sees the end: give each a second, together.
	var stillOpen atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			if waitClosed(c, time.Second) != nil {
				stillOpen.Add(1)
			}
		})
	}
	wg.Wait()
	held = int(stillOpen.Load())
	t.Logf("%d probes of %s%s answered (slowest %s) with %d+%d+%d connections from %s opened, %d held", probes, addr, path, slowest.Round(time.Millisecond), flood.Idle, flood.Headers, flood.SlowReader, flood.Source, held)
	return held
}
