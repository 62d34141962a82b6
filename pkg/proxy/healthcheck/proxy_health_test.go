package healthcheck

// Addresses: only 127.0.0.1 (real listeners, port 0 or a port the test holds).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

func TestMain(m *testing.M) {
	// Metrics are no-ops until registered; the tests count responses.
	metrics.RegisterMetrics()
	os.Exit(m.Run())
}

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

const healthTimeout = 60 * time.Second

func readyNode() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
}

// responses reads kubeproxy_proxy_{healthz,livez}_total{code} from the registry.
func responses(t *testing.T, endpoint, code string) float64 {
	t.Helper()
	name := "kubeproxy_proxy_healthz_total"
	if endpoint == "/livez" {
		name = "kubeproxy_proxy_livez_total"
	}
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "code" && lp.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// probe GETs path and checks the upstream headers and that the status was counted.
func probe(t *testing.T, hs *ProxyHealthServer, path string) (int, string) {
	t.Helper()
	before200, before503 := responses(t, path, "200"), responses(t, path, "503")
	rec := httptest.NewRecorder()
	hs.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", path, got)
	}
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q, want nosniff", path, got)
	}
	d200, d503 := responses(t, path, "200")-before200, responses(t, path, "503")-before503
	switch {
	case rec.Code == http.StatusOK && (d200 != 1 || d503 != 0),
		rec.Code == http.StatusServiceUnavailable && (d200 != 0 || d503 != 1):
		t.Errorf("%s answered %d but counted 200 +%v, 503 +%v", path, rec.Code, d200, d503)
	}
	return rec.Code, rec.Body.String()
}

func ts(t time.Time) string { return t.Format(time.RFC3339Nano) }

// TestProxyHealthPaths walks every path to 200 and 503 on /healthz and /livez and
// checks the exact JSON bodies.
func TestProxyHealthPaths(t *testing.T) {
	type check struct {
		healthzCode int
		healthzBody string
		livezCode   int
		livezBody   string
	}
	zero := ts(time.Time{})
	tests := []struct {
		name  string
		setup func(hs *ProxyHealthServer, clk *testingclock.FakeClock)
		want  check
	}{
		{
			name:  "not started, node not seen yet: alive, not eligible",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":false,"healthy":true}`, zero, ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true}`, ts(t0), ts(t0)),
			},
		},
		{
			name: "not started, node eligible",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
			},
			want: check{
				healthzCode: 200,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true}`, ts(t0), ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true}`, ts(t0), ts(t0)),
			},
		},
		{
			name: "queued but never updated: a starting proxier is not judged",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.QueuedUpdate(v1.IPv4Protocol)
				clk.Step(10 * healthTimeout)
			},
			want: check{
				healthzCode: 200,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true}`, ts(t0.Add(10*healthTimeout)), ts(t0.Add(10*healthTimeout))),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true}`, ts(t0.Add(10*healthTimeout)), ts(t0.Add(10*healthTimeout))),
			},
		},
		{
			name: "synced, nothing queued, long idle: healthy, lastUpdated reads now",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.Updated(v1.IPv4Protocol)
				clk.Step(10 * healthTimeout)
			},
			want: check{
				healthzCode: 200,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0.Add(10*healthTimeout)), ts(t0.Add(10*healthTimeout)), ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0.Add(10*healthTimeout)), ts(t0.Add(10*healthTimeout)), ts(t0)),
			},
		},
		{
			name: "queued change just under the timeout: healthy",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.Updated(v1.IPv4Protocol)
				hs.QueuedUpdate(v1.IPv4Protocol)
				clk.Step(healthTimeout - time.Nanosecond)
			},
			want: check{
				healthzCode: 200,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0.Add(healthTimeout-time.Nanosecond)), ts(t0.Add(healthTimeout-time.Nanosecond)), ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0.Add(healthTimeout-time.Nanosecond)), ts(t0.Add(healthTimeout-time.Nanosecond)), ts(t0)),
			},
		},
		{
			name: "queued change at the timeout: unhealthy, lastUpdated is the real one",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.Updated(v1.IPv4Protocol)
				hs.QueuedUpdate(v1.IPv4Protocol)
				clk.Step(healthTimeout)
			},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":false}}}`, ts(t0), ts(t0.Add(healthTimeout)), ts(t0)),
				livezCode:   503,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":false}}}`, ts(t0), ts(t0.Add(healthTimeout)), ts(t0)),
			},
		},
		{
			name: "later queued changes do not reset the clock of the oldest",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.Updated(v1.IPv4Protocol)
				hs.QueuedUpdate(v1.IPv4Protocol)
				clk.Step(healthTimeout / 2)
				hs.QueuedUpdate(v1.IPv4Protocol)
				clk.Step(healthTimeout / 2)
			},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":false}}}`, ts(t0), ts(t0.Add(healthTimeout)), ts(t0)),
				livezCode:   503,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":false}}}`, ts(t0), ts(t0.Add(healthTimeout)), ts(t0)),
			},
		},
		{
			name: "a late sync makes it healthy again",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.Updated(v1.IPv4Protocol)
				hs.QueuedUpdate(v1.IPv4Protocol)
				clk.Step(2 * healthTimeout)
				hs.Updated(v1.IPv4Protocol)
			},
			want: check{
				healthzCode: 200,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0.Add(2*healthTimeout)), ts(t0.Add(2*healthTimeout)), ts(t0.Add(2*healthTimeout))),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0.Add(2*healthTimeout)), ts(t0.Add(2*healthTimeout)), ts(t0.Add(2*healthTimeout))),
			},
		},
		{
			name: "dual-stack, IPv6 stuck: unhealthy; lastUpdated is the most recent family",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.Updated(v1.IPv6Protocol)
				hs.QueuedUpdate(v1.IPv6Protocol)
				clk.Step(healthTimeout)
				hs.Updated(v1.IPv4Protocol)
			},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":true},"IPv6":{"lastUpdated":%q,"healthy":false}}}`, ts(t0.Add(healthTimeout)), ts(t0.Add(healthTimeout)), ts(t0.Add(healthTimeout)), ts(t0)),
				livezCode:   503,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":true},"IPv6":{"lastUpdated":%q,"healthy":false}}}`, ts(t0.Add(healthTimeout)), ts(t0.Add(healthTimeout)), ts(t0.Add(healthTimeout)), ts(t0)),
			},
		},
		{
			name: "node being deleted: /healthz fails, /livez passes",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				node := readyNode()
				node.DeletionTimestamp = &metav1.Time{Time: t0}
				hs.SyncNode(node)
				hs.Updated(v1.IPv4Protocol)
			},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":false,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0), ts(t0), ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0), ts(t0), ts(t0)),
			},
		},
		{
			name: "node tainted by the cluster autoscaler: /healthz fails",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				node := readyNode()
				node.Spec.Taints = []v1.Taint{{Key: "other", Effect: v1.TaintEffectNoSchedule}, {Key: ToBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}
				hs.SyncNode(node)
			},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":false,"healthy":true}`, zero, ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true}`, ts(t0), ts(t0)),
			},
		},
		{
			name: "other taints do not matter",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				node := readyNode()
				node.Spec.Taints = []v1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: v1.TaintEffectNoSchedule}}
				hs.SyncNode(node)
			},
			want: check{
				healthzCode: 200,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true}`, ts(t0), ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true}`, ts(t0), ts(t0)),
			},
		},
		{
			name: "node deleted after being eligible",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.SyncNode(readyNode())
				hs.SyncNode(nil)
			},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":false,"healthy":true}`, zero, ts(t0)),
				livezCode:   200,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":true}`, ts(t0), ts(t0)),
			},
		},
		{
			name: "node stuck and ineligible",
			setup: func(hs *ProxyHealthServer, clk *testingclock.FakeClock) {
				hs.Updated(v1.IPv4Protocol)
				hs.QueuedUpdate(v1.IPv4Protocol)
				clk.Step(healthTimeout)
			},
			want: check{
				healthzCode: 503,
				healthzBody: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":false,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":false}}}`, ts(t0), ts(t0.Add(healthTimeout)), ts(t0)),
				livezCode:   503,
				livezBody:   fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"healthy":false,"status":{"IPv4":{"lastUpdated":%q,"healthy":false}}}`, ts(t0), ts(t0.Add(healthTimeout)), ts(t0)),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			hs := NewProxyHealthServerWithClock("127.0.0.1:0", healthTimeout, clk)
			tc.setup(hs, clk)
			var got check
			got.healthzCode, got.healthzBody = probe(t, hs, "/healthz")
			got.livezCode, got.livezBody = probe(t, hs, "/livez")
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(check{})); diff != "" {
				t.Errorf("responses (-want +got):\n%s", diff)
			}
			// The body is what Health says (bar the 200 lastUpdated rewrite).
			var parsed ProxyHealth
			if err := json.Unmarshal([]byte(got.livezBody), &parsed); err != nil {
				t.Fatalf("livez body does not parse: %v", err)
			}
			if parsed.Healthy != hs.Health().Healthy {
				t.Errorf("livez healthy=%v, Health().Healthy=%v", parsed.Healthy, hs.Health().Healthy)
			}
		})
	}
}

// capturingListener records the address the real listener got (port 0 picks one).
type capturingListener struct {
	addrs chan net.Addr
}

func (c capturingListener) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	l, err := stdNetListener{}.Listen(ctx, network, addr)
	if err == nil {
		c.addrs <- l.Addr()
	}
	return l, err
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestProxyHealthServerRunOnLoopback(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	addrs := make(chan net.Addr, 1)
	hs := newProxyHealthServer(capturingListener{addrs}, stdHTTPServerFactory{}, clk, "127.0.0.1:0", healthTimeout)
	hs.SyncNode(readyNode())
	hs.Updated(v1.IPv4Protocol)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hs.Run(ctx) }()
	var addr net.Addr
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not listen within 10s")
	}

	if code, body := httpGet(t, "http://"+addr.String()+"/healthz"); code != 200 || body != fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(t0), ts(t0), ts(t0)) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	hs.QueuedUpdate(v1.IPv4Protocol)
	clk.Step(healthTimeout)
	if code, _ := httpGet(t, "http://"+addr.String()+"/livez"); code != 503 {
		t.Errorf("/livez with a stuck proxier: %d, want 503", code)
	}
	if code, _ := httpGet(t, "http://"+addr.String()+"/other"); code != 404 {
		t.Errorf("/other: %d, want 404", code)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	if _, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		t.Errorf("%s still accepts connections after Run returned", addr)
	}
}

func TestProxyHealthServerRunFailsOnBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	hs := NewProxyHealthServer(busy.Addr().String(), healthTimeout)
	err = hs.Run(context.Background())
	var opErr *net.OpError
	if err == nil || !errors.As(err, &opErr) {
		t.Fatalf("Run on a busy port: %v, want a wrapped *net.OpError", err)
	}
}
