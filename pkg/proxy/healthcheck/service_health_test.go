package healthcheck

// Addresses: fakes use 10.0.0.1, 10.0.0.2 and fd00::1 (never bound); the real
// listener tests use 127.0.0.1 only.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeListener hands out fakeNetListeners and fails for addresses in fail.
type fakeListener struct {
	mu     sync.Mutex
	fail   map[string]error // "network addr" -> error
	opened []*fakeNetListener
}

func (f *fakeListener) Listen(_ context.Context, network, addr string) (net.Listener, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[network+" "+addr]; err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	l := &fakeNetListener{network: network, addr: addr}
	f.opened = append(f.opened, l)
	return l, nil
}

// open lists "network addr" of the listeners not closed, sorted.
func (f *fakeListener) open() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.opened {
		if !l.isClosed() {
			out = append(out, l.network+" "+l.addr)
		}
	}
	slices.Sort(out)
	return out
}

func (f *fakeListener) listenCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.opened)
}

type fakeNetListener struct {
	network, addr string
	mu            sync.Mutex
	closed        bool
}

func (l *fakeNetListener) Accept() (net.Conn, error) { return nil, errors.New("fake listener") }
func (l *fakeNetListener) Addr() net.Addr            { return &net.TCPAddr{} }
func (l *fakeNetListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}
func (l *fakeNetListener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// fakeHTTPFactory keeps every handler it was given, to call them directly.
type fakeHTTPFactory struct {
	mu       sync.Mutex
	handlers []http.Handler
}

func (f *fakeHTTPFactory) New(h http.Handler) httpServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = append(f.handlers, h)
	return fakeHTTPServer{}
}

type fakeHTTPServer struct{}

func (fakeHTTPServer) Serve(net.Listener) error { return nil }
func (fakeHTTPServer) Close() error             { return nil }

// handlerFor returns the handler most recently built for name.
func (f *fakeHTTPFactory) handlerFor(t *testing.T, name types.NamespacedName) http.Handler {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.handlers) - 1; i >= 0; i-- {
		if h, ok := f.handlers[i].(serviceHandler); ok && h.name == name {
			return h
		}
	}
	t.Fatalf("no handler for %s", name)
	return nil
}

type fakeHealth struct {
	mu      sync.Mutex
	healthy bool
}

func (f *fakeHealth) Health() ProxyHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ProxyHealth{Healthy: f.healthy}
}

func (f *fakeHealth) set(healthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.healthy = healthy
}

// recordedEvent is one Eventf call.
type recordedEvent struct {
	Regarding v1.ObjectReference
	Type      string
	Reason    string
	Action    string
	Note      string
}

type recordingRecorder struct {
	mu     sync.Mutex
	events []recordedEvent
}

var _ events.EventRecorder = &recordingRecorder{}

func (r *recordingRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, _ := regarding.(*v1.ObjectReference)
	r.events = append(r.events, recordedEvent{Regarding: *ref, Type: eventtype, Reason: reason, Action: action, Note: fmt.Sprintf(note, args...)})
}

func (r *recordingRecorder) take() []recordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

var (
	svcA = types.NamespacedName{Namespace: "ns1", Name: "a"}
	svcB = types.NamespacedName{Namespace: "ns2", Name: "b"}
)

func newFakeServiceHealthServer(family v1.IPFamily, ips []net.IP) (*serviceHealthServer, *fakeListener, *fakeHTTPFactory, *fakeHealth, *recordingRecorder) {
	l := &fakeListener{fail: map[string]error{}}
	f := &fakeHTTPFactory{}
	h := &fakeHealth{healthy: true}
	r := &recordingRecorder{}
	return newServiceHealthServer("node-a", r, family, ips, h, l, f), l, f, h, r
}

func TestServiceHealthListenAddresses(t *testing.T) {
	tests := []struct {
		name   string
		family v1.IPFamily
		ips    []net.IP
		want   []string
	}{
		{name: "no family, all addresses", want: []string{"tcp 0.0.0.0:30001"}},
		{name: "IPv4, all addresses", family: v1.IPv4Protocol, want: []string{"tcp4 0.0.0.0:30001"}},
		{name: "IPv6, all addresses", family: v1.IPv6Protocol, want: []string{"tcp6 [::]:30001"}},
		{
			name: "nodePortAddresses", family: v1.IPv4Protocol,
			ips:  []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")},
			want: []string{"tcp4 10.0.0.1:30001", "tcp4 10.0.0.2:30001"},
		},
		{
			name: "mixed addresses pick the network per address",
			ips:  []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1")},
			want: []string{"tcp4 10.0.0.1:30001", "tcp6 [fd00::1]:30001"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hcs, l, _, _, _ := newFakeServiceHealthServer(tc.family, tc.ips)
			if err := hcs.SyncServices(map[types.NamespacedName]uint16{svcA: 30001}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, l.open()); diff != "" {
				t.Errorf("listeners (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServiceHealthSyncServices(t *testing.T) {
	hcs, l, _, _, r := newFakeServiceHealthServer(v1.IPv4Protocol, []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")})

	steps := []struct {
		name       string
		services   map[types.NamespacedName]uint16
		wantOpen   []string
		wantListen int // cumulative Listen calls: unchanged services are not reopened
	}{
		{
			name:       "open two",
			services:   map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002},
			wantOpen:   []string{"tcp4 10.0.0.1:30001", "tcp4 10.0.0.1:30002", "tcp4 10.0.0.2:30001", "tcp4 10.0.0.2:30002"},
			wantListen: 4,
		},
		{
			name:       "same again: nothing reopened",
			services:   map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002},
			wantOpen:   []string{"tcp4 10.0.0.1:30001", "tcp4 10.0.0.1:30002", "tcp4 10.0.0.2:30001", "tcp4 10.0.0.2:30002"},
			wantListen: 4,
		},
		{
			name:       "port of b changes",
			services:   map[types.NamespacedName]uint16{svcA: 30001, svcB: 30003},
			wantOpen:   []string{"tcp4 10.0.0.1:30001", "tcp4 10.0.0.1:30003", "tcp4 10.0.0.2:30001", "tcp4 10.0.0.2:30003"},
			wantListen: 6,
		},
		{
			name:       "a removed",
			services:   map[types.NamespacedName]uint16{svcB: 30003},
			wantOpen:   []string{"tcp4 10.0.0.1:30003", "tcp4 10.0.0.2:30003"},
			wantListen: 6,
		},
		{
			name:       "all removed",
			services:   nil,
			wantOpen:   nil,
			wantListen: 6,
		},
	}
	for _, step := range steps {
		if err := hcs.SyncServices(step.services); err != nil {
			t.Fatalf("%s: SyncServices: %v", step.name, err)
		}
		if diff := cmp.Diff(step.wantOpen, l.open()); diff != "" {
			t.Errorf("%s: open listeners (-want +got):\n%s", step.name, diff)
		}
		if got := l.listenCalls(); got != step.wantListen {
			t.Errorf("%s: %d Listen calls so far, want %d", step.name, got, step.wantListen)
		}
	}
	if ev := r.take(); len(ev) != 0 {
		t.Errorf("events without failures: %v", ev)
	}
}

func TestServiceHealthListenFailure(t *testing.T) {
	hcs, l, f, _, r := newFakeServiceHealthServer(v1.IPv4Protocol, []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")})
	// b's port is taken on the second address only: the first must be released.
	l.fail["tcp4 10.0.0.2:30002"] = syscall.EADDRINUSE

	services := map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002}
	if err := hcs.SyncServices(services); err != nil {
		t.Fatalf("SyncServices: %v", err)
	}
	if diff := cmp.Diff([]string{"tcp4 10.0.0.1:30001", "tcp4 10.0.0.2:30001"}, l.open()); diff != "" {
		t.Errorf("open listeners (-want +got):\n%s", diff)
	}
	want := []recordedEvent{{
		Regarding: v1.ObjectReference{Kind: "Service", Namespace: "ns2", Name: "b", UID: "ns2/b"},
		Type:      "Warning",
		Reason:    "FailedToStartServiceHealthcheck",
		Action:    "Listen",
		Note:      `node node-a failed to start healthcheck "ns2/b" on port 30002: listening on tcp4 10.0.0.2:30002: listen tcp4: address already in use`,
	}}
	if diff := cmp.Diff(want, r.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// a still works.
	if err := hcs.SyncEndpoints(map[types.NamespacedName]int{svcA: 1, svcB: 1}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	f.handlerFor(t, svcA).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("a after b failed: %d, want 200", rec.Code)
	}

	// The next sync retries b (and warns again while it fails), then succeeds.
	if err := hcs.SyncServices(services); err != nil {
		t.Fatal(err)
	}
	if ev := r.take(); len(ev) != 1 {
		t.Errorf("retry while still failing: %d events, want 1", len(ev))
	}
	delete(l.fail, "tcp4 10.0.0.2:30002")
	if err := hcs.SyncServices(services); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"tcp4 10.0.0.1:30001", "tcp4 10.0.0.1:30002", "tcp4 10.0.0.2:30001", "tcp4 10.0.0.2:30002"}, l.open()); diff != "" {
		t.Errorf("after the port freed up (-want +got):\n%s", diff)
	}
	if ev := r.take(); len(ev) != 0 {
		t.Errorf("events after success: %v", ev)
	}
}

func TestServiceHealthResponses(t *testing.T) {
	hcs, _, f, health, _ := newFakeServiceHealthServer(v1.IPv4Protocol, nil)
	if err := hcs.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002}); err != nil {
		t.Fatal(err)
	}

	body := func(name types.NamespacedName, n int, healthy bool) string {
		return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}", name.Namespace, name.Name, n, healthy)
	}
	tests := []struct {
		name         string
		endpoints    map[types.NamespacedName]int
		proxyHealthy bool
		service      types.NamespacedName
		wantCode     int
		wantWeight   string
		wantBody     string
	}{
		{name: "no SyncEndpoints yet", proxyHealthy: true, service: svcA, wantCode: 503, wantWeight: "0", wantBody: body(svcA, 0, true)},
		{name: "local endpoints", endpoints: map[types.NamespacedName]int{svcA: 2}, proxyHealthy: true, service: svcA, wantCode: 200, wantWeight: "2", wantBody: body(svcA, 2, true)},
		{name: "absent from the map means none", endpoints: map[types.NamespacedName]int{svcA: 2}, proxyHealthy: true, service: svcB, wantCode: 503, wantWeight: "0", wantBody: body(svcB, 0, true)},
		{name: "explicit zero", endpoints: map[types.NamespacedName]int{svcA: 0}, proxyHealthy: true, service: svcA, wantCode: 503, wantWeight: "0", wantBody: body(svcA, 0, true)},
		{name: "endpoints but proxy unhealthy", endpoints: map[types.NamespacedName]int{svcA: 3}, proxyHealthy: false, service: svcA, wantCode: 503, wantWeight: "3", wantBody: body(svcA, 3, false)},
		{name: "unknown services in the map are ignored", endpoints: map[types.NamespacedName]int{{Namespace: "x", Name: "y"}: 1, svcB: 1}, proxyHealthy: true, service: svcB, wantCode: 200, wantWeight: "1", wantBody: body(svcB, 1, true)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.endpoints != nil {
				if err := hcs.SyncEndpoints(tc.endpoints); err != nil {
					t.Fatal(err)
				}
			}
			health.set(tc.proxyHealthy)
			rec := httptest.NewRecorder()
			f.handlerFor(t, tc.service).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != tc.wantCode {
				t.Errorf("status %d, want %d", rec.Code, tc.wantCode)
			}
			wantHeaders := map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff", "X-Load-Balancing-Endpoint-Weight": tc.wantWeight}
			for k, v := range wantHeaders {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if diff := cmp.Diff(tc.wantBody, rec.Body.String()); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}

	// A request racing the removal of its Service gets 503, not an empty 200.
	handlerA := f.handlerFor(t, svcA)
	if err := hcs.SyncServices(map[types.NamespacedName]uint16{svcB: 30002}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	handlerA.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("removed service: %d, want 503", rec.Code)
	}
}

func freeLoopbackPort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// TestServiceHealthOnLoopback uses real listeners on 127.0.0.1 and a real
// ProxyHealthServer.
func TestServiceHealthOnLoopback(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	proxyHealth := NewProxyHealthServerWithClock("127.0.0.1:0", healthTimeout, clk)
	proxyHealth.Updated(v1.IPv4Protocol)
	recorder := events.NewFakeRecorder(10)
	hcs := NewServiceHealthServerForFamily("node-a", recorder, v1.IPv4Protocol, []net.IP{net.ParseIP("127.0.0.1")}, proxyHealth)

	// b's port is held by someone else.
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	portA, portB := freeLoopbackPort(t), uint16(busy.Addr().(*net.TCPAddr).Port)

	if err := hcs.SyncServices(map[types.NamespacedName]uint16{svcA: portA, svcB: portB}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hcs.SyncServices(nil) })
	select {
	case ev := <-recorder.Events:
		if !strings.HasPrefix(ev, "Warning FailedToStartServiceHealthcheck ") || !strings.Contains(ev, "address already in use") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Errorf("no event for the busy port")
	}

	urlA := fmt.Sprintf("http://127.0.0.1:%d/", portA)
	getWhenUp := func() (int, string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			client := &http.Client{Timeout: 2 * time.Second}
			resp, err := client.Get(urlA)
			if err == nil {
				resp.Body.Close()
				return httpGet(t, urlA)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", urlA, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if code, _ := getWhenUp(); code != 503 {
		t.Errorf("a without endpoints: %d, want 503", code)
	}
	if err := hcs.SyncEndpoints(map[types.NamespacedName]int{svcA: 1}); err != nil {
		t.Fatal(err)
	}
	code, body := httpGet(t, urlA)
	if want := "{\n\t\"service\": {\n\t\t\"namespace\": \"ns1\",\n\t\t\"name\": \"a\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}"; code != 200 || body != want {
		t.Errorf("a with an endpoint: %d %q, want 200 %q", code, body, want)
	}

	// The proxy falls behind: the check fails although the endpoint is there.
	proxyHealth.QueuedUpdate(v1.IPv4Protocol)
	clk.Step(healthTimeout)
	if code, body := httpGet(t, urlA); code != 503 || !strings.Contains(body, `"serviceProxyHealthy": false`) {
		t.Errorf("a with the proxy stuck: %d %q, want 503 and serviceProxyHealthy false", code, body)
	}

	// Removing the Service frees its port at once.
	if err := hcs.SyncServices(map[types.NamespacedName]uint16{}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", portA))
	if err != nil {
		t.Fatalf("port of a still bound after its Service went away: %v", err)
	}
	l.Close()
}

func TestFakeServiceHealthServer(t *testing.T) {
	fake := NewFakeServiceHealthServer()
	if fake.Services() != nil || fake.Endpoints() != nil {
		t.Fatalf("new fake is not empty")
	}
	services := map[types.NamespacedName]uint16{svcA: 30001}
	if err := fake.SyncServices(services); err != nil {
		t.Fatal(err)
	}
	services[svcB] = 30002 // the fake keeps a copy
	if err := fake.SyncEndpoints(map[types.NamespacedName]int{svcA: 2}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[types.NamespacedName]uint16{svcA: 30001}, fake.Services()); diff != "" {
		t.Errorf("Services (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[types.NamespacedName]int{svcA: 2}, fake.Endpoints()); diff != "" {
		t.Errorf("Endpoints (-want +got):\n%s", diff)
	}
	boom := errors.New("boom")
	fake.SetError(boom)
	if err := fake.SyncServices(nil); !errors.Is(err, boom) {
		t.Errorf("SyncServices with SetError: %v", err)
	}
	if s, e := fake.Calls(); s != 2 || e != 1 {
		t.Errorf("Calls() = %d, %d, want 2, 1", s, e)
	}
}

func TestServiceHealthServerNilHealthzCountsAsHealthy(t *testing.T) {
	hcs := NewServiceHealthServerForFamily("node-a", nil, v1.IPv4Protocol, nil, nil).(*serviceHealthServer)
	if !hcs.health.Health().Healthy {
		t.Errorf("nil healthzServer: proxy reported unhealthy")
	}
	if diff := cmp.Diff([]listenAddress{{"tcp4", net.IPv4zero}}, hcs.addresses, cmp.AllowUnexported(listenAddress{})); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
}
