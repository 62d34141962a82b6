package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"
)

// wantFamily is what a scrape must show for one metric family: upstream's name,
// type, help (with component-base's stability prefix), label names and buckets.
type wantFamily struct {
	name     string
	typ      dto.MetricType
	help     string
	labels   []string  // sorted, without "le"
	buckets  []float64 // histograms only
	optional bool      // present only once something registered it
}

func expBuckets() []float64 {
	var b []float64
	for v := 0.001; len(b) < 15; v *= 2 {
		b = append(b, v)
	}
	return b
}

func networkProgrammingBuckets() []float64 {
	b := []float64{0, 0.25, 0.5}
	for v := 1.0; v <= 59; v++ {
		b = append(b, v)
	}
	for v := 60.0; v <= 115; v += 5 {
		b = append(b, v)
	}
	for v := 120.0; v <= 300; v += 30 {
		b = append(b, v)
	}
	return b
}

var (
	counter   = dto.MetricType_COUNTER
	gauge     = dto.MetricType_GAUGE
	histogram = dto.MetricType_HISTOGRAM
)

// The upstream part of this table is kube-proxy v1.37 in ipvs mode (plus the
// full/partial histograms); Prometheus rules written for upstream rely on it.
var wantFamilies = []wantFamily{
	{name: "kubeproxy_sync_proxy_rules_duration_seconds", typ: histogram, help: "[ALPHA] SyncProxyRules latency in seconds", labels: []string{"ip_family"}, buckets: expBuckets()},
	{name: "kubeproxy_sync_full_proxy_rules_duration_seconds", typ: histogram, help: "[ALPHA] SyncProxyRules latency in seconds for full resyncs", labels: []string{"ip_family"}, buckets: expBuckets()},
	{name: "kubeproxy_sync_partial_proxy_rules_duration_seconds", typ: histogram, help: "[ALPHA] SyncProxyRules latency in seconds for partial resyncs", labels: []string{"ip_family"}, buckets: expBuckets()},
	{name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds", typ: gauge, help: "[ALPHA] The last time proxy rules were successfully synced", labels: []string{"ip_family"}},
	{name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", typ: gauge, help: "[ALPHA] The last time a sync of proxy rules was queued", labels: []string{"ip_family"}},
	{name: "kubeproxy_network_programming_duration_seconds", typ: histogram, help: "[ALPHA] In Cluster Network Programming Latency in seconds", labels: []string{"ip_family"}, buckets: networkProgrammingBuckets()},
	{name: "kubeproxy_sync_proxy_rules_endpoint_changes_pending", typ: gauge, help: "[ALPHA] Pending proxy rules Endpoint changes"},
	{name: "kubeproxy_sync_proxy_rules_endpoint_changes_total", typ: counter, help: "[ALPHA] Cumulative proxy rules Endpoint changes"},
	{name: "kubeproxy_sync_proxy_rules_service_changes_pending", typ: gauge, help: "[ALPHA] Pending proxy rules Service changes"},
	{name: "kubeproxy_sync_proxy_rules_service_changes_total", typ: counter, help: "[ALPHA] Cumulative proxy rules Service changes"},
	{name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total", typ: gauge, help: "[ALPHA] Number of services with a Local traffic policy and no endpoints", labels: []string{"ip_family", "traffic_policy"}},
	{name: "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", typ: counter, help: "[ALPHA] Cumulative proxy iptables restore failures", labels: []string{"ip_family"}},
	{name: "kubeproxy_proxy_healthz_total", typ: counter, help: "[ALPHA] Cumulative proxy healthz HTTP status", labels: []string{"code"}},
	{name: "kubeproxy_proxy_livez_total", typ: counter, help: "[ALPHA] Cumulative proxy livez HTTP status", labels: []string{"code"}},
	{name: "kubeproxy_conntrack_reconciler_sync_duration_seconds", typ: histogram, help: "[ALPHA] ReconcileConntrackFlowsLatency latency in seconds", labels: []string{"ip_family"}, buckets: expBuckets()},
	{name: "kubeproxy_conntrack_reconciler_deleted_entries_total", typ: counter, help: "[ALPHA] Cumulative conntrack flows deleted by conntrack reconciler", labels: []string{"ip_family"}},

	{name: "kubeproxy_ipvs_kernel_operations_total", typ: counter, help: "[ALPHA] Cumulative operations sent to the kernel, by subsystem and operation", labels: []string{"operation", "subsystem"}},
	{name: "kubeproxy_ipvs_syncs_total", typ: counter, help: "[ALPHA] Cumulative proxy rule syncs, by type (full or partial)", labels: []string{"type"}},
	{name: "kubeproxy_ipvs_sync_failures_total", typ: counter, help: "[ALPHA] Cumulative proxy rule syncs that failed"},
	{name: "kubeproxy_ipvs_drift_repairs_total", typ: counter, help: "[ALPHA] Cumulative writes a periodic resync made to repair kernel state that drifted from the last written state (IPVS requests, ipset members, address binds, nftables elements), by subsystem", labels: []string{"subsystem"}},
	{name: "kubeproxy_ipvs_graceful_termination_pending", typ: gauge, help: "[ALPHA] Real servers currently draining before removal, by IP family", labels: []string{"ip_family"}},
	{name: "kubeproxy_ipvs_held_back_objects", typ: gauge, help: "[ALPHA] Objects not programmed because they are invalid or the kernel refused them, by IP family and reason", labels: []string{"ip_family", "reason"}},

	{name: "kubeproxy_ipvs_virtual_server_connections_total", typ: counter, help: "[ALPHA] Cumulative connections scheduled by an IPVS virtual server", labels: vsLabelsSorted, optional: true},
	{name: "kubeproxy_ipvs_virtual_server_incoming_packets_total", typ: counter, help: "[ALPHA] Cumulative incoming packets of an IPVS virtual server", labels: vsLabelsSorted, optional: true},
	{name: "kubeproxy_ipvs_virtual_server_outgoing_packets_total", typ: counter, help: "[ALPHA] Cumulative outgoing packets of an IPVS virtual server", labels: vsLabelsSorted, optional: true},
	{name: "kubeproxy_ipvs_virtual_server_incoming_bytes_total", typ: counter, help: "[ALPHA] Cumulative incoming bytes of an IPVS virtual server", labels: vsLabelsSorted, optional: true},
	{name: "kubeproxy_ipvs_virtual_server_outgoing_bytes_total", typ: counter, help: "[ALPHA] Cumulative outgoing bytes of an IPVS virtual server", labels: vsLabelsSorted, optional: true},
}

var vsLabelsSorted = []string{"address", "namespace", "port", "port_name", "protocol", "scheduler", "service"}

// exerciseAll touches every metric once; a vector shows in a scrape only after a
// child was created.
func exerciseAll() {
	SyncProxyRulesLatency.WithLabelValues("IPv4").Observe(0.003)
	SyncFullProxyRulesLatency.WithLabelValues("IPv4").Observe(0.003)
	SyncPartialProxyRulesLatency.WithLabelValues("IPv6").Observe(0.001)
	SyncProxyRulesLastTimestamp.WithLabelValues("IPv4").SetToCurrentTime()
	SyncProxyRulesLastQueuedTimestamp.WithLabelValues("IPv4").SetToCurrentTime()
	NetworkProgrammingLatency.WithLabelValues("IPv4").Observe(1.5)
	EndpointChangesPending.Set(2)
	EndpointChangesTotal.Inc()
	ServiceChangesPending.Set(1)
	ServiceChangesTotal.Inc()
	SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(TrafficPolicyInternal, "IPv4").Set(1)
	IPTablesRestoreFailuresTotal.WithLabelValues("IPv4").Inc()
	ProxyHealthzTotal.WithLabelValues("200").Inc()
	ProxyLivezTotal.WithLabelValues("503").Inc()
	ObserveConntrackReconcile("IPv4", 10*time.Millisecond, 3)

	KernelOperationsTotal.WithLabelValues(SubsystemIPVS, "add_virtual_server").Inc()
	SyncsTotal.WithLabelValues(SyncTypeFull).Inc()
	SyncFailuresTotal.Inc()
	DriftRepairsTotal.WithLabelValues(SubsystemIPSet).Inc()
	GracefulTerminationPending.WithLabelValues("IPv4").Set(4)
	HeldBackObjects.WithLabelValues("IPv4", "ipvs_error").Set(1)
}

func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, body %q", rec.Code, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: Content-Type %q, want the text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

func labelNames(m *dto.Metric) []string {
	var names []string
	for _, lp := range m.GetLabel() {
		names = append(names, lp.GetName())
	}
	sort.Strings(names)
	return names
}

func TestScrapeHasEveryMetricWithUpstreamShape(t *testing.T) {
	RegisterMetrics()
	RegisterMetrics() // idempotent: a second call must not panic on duplicate registration
	exerciseAll()

	families := scrape(t, NewMetricsMux("ipvs", false, nil))

	wanted := map[string]bool{}
	for _, want := range wantFamilies {
		wanted[want.name] = true
		mf, ok := families[want.name]
		if !ok {
			if !want.optional {
				t.Errorf("%s: missing from scrape", want.name)
			}
			continue
		}
		if mf.GetType() != want.typ {
			t.Errorf("%s: type %v, want %v", want.name, mf.GetType(), want.typ)
		}
		if mf.GetHelp() != want.help {
			t.Errorf("%s: help %q, want %q", want.name, mf.GetHelp(), want.help)
		}
		if len(mf.GetMetric()) == 0 {
			t.Errorf("%s: no series", want.name)
			continue
		}
		for _, m := range mf.GetMetric() {
			if diff := cmp.Diff(want.labels, labelNames(m)); diff != "" {
				t.Errorf("%s: label names (-want +got):\n%s", want.name, diff)
			}
			if want.typ != histogram {
				continue
			}
			var got []float64
			for _, b := range m.GetHistogram().GetBucket() {
				got = append(got, b.GetUpperBound())
			}
			// The text format always ends a histogram with the +Inf bucket.
			if diff := cmp.Diff(append(slices.Clone(want.buckets), math.Inf(1)), got); diff != "" {
				t.Errorf("%s: buckets (-want +got):\n%s", want.name, diff)
			}
		}
	}

	// Nothing kubeproxy_* that is not in the table: a new metric needs a row here.
	for name := range families {
		if strings.HasPrefix(name, "kubeproxy_") && !wanted[name] {
			t.Errorf("%s: exported but not in the expected table", name)
		}
	}

	// What upstream's binary exports besides its own metrics.
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_start_time_seconds", "kubernetes_build_info", "registered_metrics_total"} {
		if _, ok := families[name]; !ok {
			t.Errorf("%s: missing from scrape", name)
		}
	}
}

func TestMetricValuesReachTheScrape(t *testing.T) {
	RegisterMetrics()
	before := scrape(t, NewMetricsMux("ipvs", false, nil))
	DriftRepairsTotal.WithLabelValues(SubsystemConntrack).Add(5)
	GracefulTerminationPending.WithLabelValues("IPv6").Set(7)
	after := scrape(t, NewMetricsMux("ipvs", false, nil))

	value := func(families map[string]*dto.MetricFamily, name, label, labelValue string) float64 {
		for _, m := range families[name].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == labelValue {
					return m.GetCounter().GetValue()
				}
			}
			if label == "" {
				return m.GetGauge().GetValue()
			}
		}
		return 0
	}
	if got := value(after, "kubeproxy_ipvs_drift_repairs_total", "subsystem", SubsystemConntrack) - value(before, "kubeproxy_ipvs_drift_repairs_total", "subsystem", SubsystemConntrack); got != 5 {
		t.Errorf("drift_repairs_total{subsystem=conntrack} grew by %v, want 5", got)
	}
	if got := gaugeValue(after, "kubeproxy_ipvs_graceful_termination_pending", "ip_family", "IPv6"); got != 7 {
		t.Errorf("graceful_termination_pending = %v, want 7", got)
	}
}

func TestVirtualServerStats(t *testing.T) {
	RegisterMetrics()
	stats := []VirtualServerStats{
		{Namespace: "default", Service: "web", PortName: "http", Protocol: "TCP", Address: "10.96.0.10", Port: 80, Scheduler: "lc",
			Connections: 3, IncomingPackets: 30, OutgoingPackets: 20, IncomingBytes: 3000, OutgoingBytes: 2000},
		{Namespace: "kube-system", Service: "dns", PortName: "", Protocol: "UDP", Address: "fd00::a", Port: 53, Scheduler: "rr",
			Connections: 1, IncomingPackets: 1, OutgoingPackets: 1, IncomingBytes: 60, OutgoingBytes: 120},
	}
	setStats := registerTestVSStats(t)
	setStats(stats)
	if err := RegisterVirtualServerStats(func() []VirtualServerStats { return nil }); !errors.Is(err, ErrVirtualServerStatsRegistered) {
		t.Fatalf("second RegisterVirtualServerStats: %v, want ErrVirtualServerStatsRegistered", err)
	}

	families := scrape(t, NewMetricsMux("ipvs", false, nil))
	type series struct {
		labels string
		value  float64
	}
	got := map[string][]series{}
	for name, mf := range families {
		if !strings.HasPrefix(name, "kubeproxy_ipvs_virtual_server_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, lp := range m.GetLabel() {
				kv = append(kv, lp.GetName()+"="+lp.GetValue())
			}
			got[name] = append(got[name], series{strings.Join(kv, ","), m.GetCounter().GetValue()})
		}
		slices.SortFunc(got[name], func(a, b series) int { return strings.Compare(a.labels, b.labels) })
	}
	web := "address=10.96.0.10,namespace=default,port=80,port_name=http,protocol=TCP,scheduler=lc,service=web"
	dns := "address=fd00::a,namespace=kube-system,port=53,port_name=,protocol=UDP,scheduler=rr,service=dns"
	want := map[string][]series{
		"kubeproxy_ipvs_virtual_server_connections_total":      {{web, 3}, {dns, 1}},
		"kubeproxy_ipvs_virtual_server_incoming_packets_total": {{web, 30}, {dns, 1}},
		"kubeproxy_ipvs_virtual_server_outgoing_packets_total": {{web, 20}, {dns, 1}},
		"kubeproxy_ipvs_virtual_server_incoming_bytes_total":   {{web, 3000}, {dns, 60}},
		"kubeproxy_ipvs_virtual_server_outgoing_bytes_total":   {{web, 2000}, {dns, 120}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(series{})); diff != "" {
		t.Errorf("virtual server series (-want +got):\n%s", diff)
	}

	// The collector reads the function on every scrape.
	setStats(stats[:1])
	families = scrape(t, NewMetricsMux("ipvs", false, nil))
	if n := len(families["kubeproxy_ipvs_virtual_server_connections_total"].GetMetric()); n != 1 {
		t.Errorf("after the stats function shrank: %d connections series, want 1", n)
	}
}

var (
	testVSStatsOnce sync.Once
	testVSStatsErr  error
	testVSStatsMu   sync.Mutex
	testVSStats     []VirtualServerStats
)

// registerTestVSStats registers the collector once per test binary (registration
// is global and permanent, and -count may run the test again) and returns a setter
// for what it reports.
func registerTestVSStats(t *testing.T) func([]VirtualServerStats) {
	t.Helper()
	testVSStatsOnce.Do(func() {
		testVSStatsErr = RegisterVirtualServerStats(func() []VirtualServerStats {
			testVSStatsMu.Lock()
			defer testVSStatsMu.Unlock()
			return slices.Clone(testVSStats)
		})
	})
	if testVSStatsErr != nil {
		t.Fatalf("RegisterVirtualServerStats: %v", testVSStatsErr)
	}
	return func(s []VirtualServerStats) {
		testVSStatsMu.Lock()
		defer testVSStatsMu.Unlock()
		testVSStats = s
	}
}

func get(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, r))
	return rec
}

func TestMuxEndpoints(t *testing.T) {
	cfg := map[string]any{"kubeproxy.config.k8s.io": map[string]any{"mode": "ipvs", "bindAddress": "0.0.0.0"}}
	h := NewMetricsMux("ipvs", false, func() any { return cfg })

	rec := get(t, h, http.MethodGet, "/proxyMode", "")
	if rec.Code != http.StatusOK || rec.Body.String() != "ipvs" || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("/proxyMode: %d %q headers %v", rec.Code, rec.Body.String(), rec.Header())
	}

	rec = get(t, h, http.MethodGet, "/configz", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/configz: %d headers %v", rec.Code, rec.Header())
	}
	var gotCfg map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &gotCfg); err != nil {
		t.Fatalf("/configz body %q: %v", rec.Body.String(), err)
	}
	if diff := cmp.Diff(cfg, gotCfg); diff != "" {
		t.Errorf("/configz (-want +got):\n%s", diff)
	}

	rec = get(t, h, http.MethodGet, "/healthz", "")
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Errorf("/healthz: %d %q", rec.Code, rec.Body.String())
	}
	rec = get(t, h, http.MethodGet, "/metrics/slis", "")
	if rec.Code != http.StatusOK {
		t.Errorf("/metrics/slis: %d", rec.Code)
	}

	// Profiling is off: no pprof, no flag setter.
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/symbol", "/debug/flags/v"} {
		if rec := get(t, h, http.MethodGet, path, ""); rec.Code != http.StatusNotFound {
			t.Errorf("%s without profiling: %d, want 404", path, rec.Code)
		}
	}

	// Without a configz function there is no /configz.
	if rec := get(t, NewMetricsMux("ipvs", false, nil), http.MethodGet, "/configz", ""); rec.Code != http.StatusNotFound {
		t.Errorf("/configz with nil configz: %d, want 404", rec.Code)
	}
}

func TestMuxProfiling(t *testing.T) {
	h := NewMetricsMux("ipvs", true, nil)

	rec := get(t, h, http.MethodGet, "/debug/pprof/", "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Errorf("/debug/pprof/: %d, body lacks the profile index", rec.Code)
	}
	rec = get(t, h, http.MethodGet, "/debug/pprof/goroutine?debug=1", "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine profile:") {
		t.Errorf("/debug/pprof/goroutine: %d", rec.Code)
	}
	rec = get(t, h, http.MethodGet, "/debug/pprof", "")
	if rec.Code != http.StatusFound || rec.Header().Get("Location") != "/debug/pprof/" {
		t.Errorf("/debug/pprof: %d Location %q, want a redirect to /debug/pprof/", rec.Code, rec.Header().Get("Location"))
	}

	if rec := get(t, h, http.MethodGet, "/debug/flags/v", ""); rec.Code != http.StatusNotAcceptable {
		t.Errorf("GET /debug/flags/v: %d, want 406", rec.Code)
	}
	if rec := get(t, h, http.MethodPut, "/debug/flags/v", "loud"); rec.Code != http.StatusBadRequest {
		t.Errorf("PUT /debug/flags/v loud: %d, want 400", rec.Code)
	}
	if rec := get(t, h, http.MethodPut, "/debug/flags/v", "5"+strings.Repeat(" ", 1<<20)); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT /debug/flags/v with a 1 MiB body: %d, want 413", rec.Code)
	}
	if klog.V(5).Enabled() {
		t.Fatalf("test needs klog verbosity below 5 to start with")
	}
	rec = get(t, h, http.MethodPut, "/debug/flags/v", "5")
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT /debug/flags/v 5: %d %q", rec.Code, rec.Body.String())
	}
	t.Cleanup(func() { get(t, h, http.MethodPut, "/debug/flags/v", "0") })
	if !klog.V(5).Enabled() {
		t.Errorf("after PUT /debug/flags/v 5, klog.V(5) is not enabled")
	}
}

func gaugeValue(families map[string]*dto.MetricFamily, name, label, labelValue string) float64 {
	for _, m := range families[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && lp.GetValue() == labelValue {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestConntrackReconcileReachesTheScrape: one reconciliation makes both upstream
// conntrack series appear for its family, the counter even when it deleted
// nothing (as upstream's Add(0)), and the histogram counts each reconciliation.
func TestConntrackReconcileReachesTheScrape(t *testing.T) {
	RegisterMetrics()
	series := func(families map[string]*dto.MetricFamily, name string) *dto.Metric {
		for _, m := range families[name].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == LabelIPFamily && lp.GetValue() == "IPv6" {
					return m
				}
			}
		}
		return nil
	}
	ObserveConntrackReconcile("IPv6", 20*time.Millisecond, 0)
	first := scrape(t, NewMetricsMux("ipvs", false, nil))
	deleted := series(first, "kubeproxy_conntrack_reconciler_deleted_entries_total")
	if deleted == nil {
		t.Fatal("kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv6\"} missing after a reconciliation that deleted nothing")
	}
	latency := series(first, "kubeproxy_conntrack_reconciler_sync_duration_seconds")
	if latency == nil {
		t.Fatal("kubeproxy_conntrack_reconciler_sync_duration_seconds{ip_family=\"IPv6\"} missing")
	}
	count0, sum0, del0 := latency.GetHistogram().GetSampleCount(), latency.GetHistogram().GetSampleSum(), deleted.GetCounter().GetValue()

	ObserveConntrackReconcile("IPv6", 300*time.Millisecond, 4)
	second := scrape(t, NewMetricsMux("ipvs", false, nil))
	latency = series(second, "kubeproxy_conntrack_reconciler_sync_duration_seconds")
	deleted = series(second, "kubeproxy_conntrack_reconciler_deleted_entries_total")
	if got := latency.GetHistogram().GetSampleCount() - count0; got != 1 {
		t.Errorf("sync_duration_seconds count grew by %d, want 1", got)
	}
	if got := latency.GetHistogram().GetSampleSum() - sum0; math.Abs(got-0.3) > 1e-9 {
		t.Errorf("sync_duration_seconds sum grew by %v, want 0.3", got)
	}
	if got := deleted.GetCounter().GetValue() - del0; got != 4 {
		t.Errorf("deleted_entries_total grew by %v, want 4", got)
	}
}

func TestWithHeldBack(t *testing.T) {
	h := WithHeldBack(NewMetricsMux("ipvs", false, nil), func() any {
		return []map[string]string{{"object": "endpoint 239.1.2.3", "reason": "invalid_value"}}
	})
	for path, want := range map[string]string{HeldBackPath: `"object": "endpoint 239.1.2.3"`, "/proxyMode": "ipvs"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: %d %q, want 200 with %q", path, rec.Code, rec.Body.String(), want)
		}
	}
}

// TestHeldBackListBounded: however many objects are held back, one answer lists at
// most MaxHeldBackListed of them and says how many there are and that it left some out.
func TestHeldBackListBounded(t *testing.T) {
	for _, n := range []int{0, 3, MaxHeldBackListed, MaxHeldBackListed + 1, 20000} {
		h := WithHeldBack(http.NotFoundHandler(), func() any {
			out := make([]map[string]string, n)
			for i := range out {
				out[i] = map[string]string{"object": fmt.Sprintf("endpoint %d", i)}
			}
			return out
		})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, HeldBackPath, nil))
		var got struct {
			Total     int                 `json:"total"`
			Truncated bool                `json:"truncated"`
			Items     []map[string]string `json:"items"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%d objects: %v in %.200q", n, err, rec.Body.String())
		}
		listed := min(n, MaxHeldBackListed)
		if got.Total != n || len(got.Items) != listed || got.Truncated != (n > MaxHeldBackListed) {
			t.Errorf("%d objects: total %d, %d listed, truncated %v; want %d, %d, %v", n, got.Total, len(got.Items), got.Truncated, n, listed, n > MaxHeldBackListed)
		}
		if rec.Body.Len() > 200<<10 {
			t.Errorf("%d objects: %d bytes", n, rec.Body.Len())
		}
	}
}
