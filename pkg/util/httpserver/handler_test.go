package httpserver

// Addresses: servers on 127.0.0.1 (port 0), clients from 127.0.0.1.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/httpserver/httpservertest"
)

// TestSlowReaderReleased: a client that sends requests and never reads does not
// hold the handler (and its goroutine) beyond WriteTimeout.
func TestSlowReaderReleased(t *testing.T) {
	returned := make(chan error, 1)
	endless := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 64<<10)
		for range 16 << 10 { // 1 GiB at most
			if _, err := w.Write(chunk); err != nil {
				returned <- err
				return
			}
		}
		returned <- nil
	})
	addr, _ := serve(t, testLimits, endless)
	start := time.Now()
	c, err := httpservertest.Dial("127.0.0.1", addr, "/", httpservertest.SlowReader, start.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case err := <-returned:
		if err == nil {
			t.Fatal("1 GiB written to a client that reads nothing")
		}
		t.Logf("handler returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(testLimits.WriteTimeout + 3*time.Second):
		t.Fatalf("handler still writing to a client that reads nothing after %s (WriteTimeout %s)", time.Since(start), testLimits.WriteTimeout)
	}
}

// TestStreamWritesForItsLength: a stream's response may take the seconds it
// asks for on top of WriteTimeout; other responses may not.
func TestStreamWritesForItsLength(t *testing.T) {
	limits := testLimits
	limits.WriteTimeout = 100 * time.Millisecond
	late := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(300 * time.Millisecond) // as a 0.3 s profile
		_, _ = io.WriteString(w, "done")
	})
	addr, _ := serve(t, limits, late, Stream{Path: "/stream/"})
	for _, tc := range []struct {
		path   string
		answer bool
	}{
		{"/stream/x?seconds=1", true},
		{"/stream/x", false},           // no seconds, no default: not a stream
		{"/other?seconds=1", false},    // not a stream
		{"/stream/x?seconds=0", false}, // as pprof: 0 is no length
	} {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get("http://" + addr + tc.path)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if got := err == nil && string(body) == "done"; got != tc.answer {
			t.Errorf("%s: body %q, error %v; want answered %v", tc.path, body, err, tc.answer)
		}
	}
}

func TestStreamLength(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   time.Duration
	}{
		{"/debug/pprof/profile", 30 * time.Second},
		{"/debug/pprof/profile?seconds=5", 5 * time.Second},
		{"/debug/pprof/profile?seconds=-5", 30 * time.Second},
		{"/debug/pprof/profile?seconds=x", 30 * time.Second},
		{"/debug/pprof/profile?seconds=NaN", 30 * time.Second},
		{"/debug/pprof/profile?seconds=1e300", 24 * time.Hour},
		{"/debug/pprof/trace", time.Second},
		{"/debug/pprof/trace?seconds=0.5", 500 * time.Millisecond},
		{"/debug/pprof/heap", 0},
		{"/debug/pprof/heap?seconds=20", 20 * time.Second},
		{"/debug/pprof", 0},
		{"/metrics?seconds=100", 0},
		{"/healthz", 0},
	} {
		if got := streamLength(PprofStreams, httptest.NewRequest(http.MethodGet, tc.target, nil)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.target, got, tc.want)
		}
	}
}
