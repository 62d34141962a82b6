package scale

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestChurnSmall runs the whole pipeline on a small cluster and checks that every
// EndpointSlice write reaches the fake IPVS, promptly.
func TestChurnSmall(t *testing.T) {
	res, err := RunChurn(context.Background(), ChurnConfig{
		Services: 200, EndpointsPerService: 3, UpdatesPerSecond: 50, Duration: time.Second,
		StartTimeout: time.Minute, Drain: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Updates < 10 {
		t.Fatalf("only %d updates written in 1s at 50/s", res.Updates)
	}
	if res.Missed != 0 || len(res.Latencies) != res.Updates {
		t.Fatalf("%d of %d updates never reached IPVS (%d arrived)", res.Missed, res.Updates, len(res.Latencies))
	}
	if res.Syncs == 0 {
		t.Fatalf("no sync counted during the churn")
	}
	// Generous: minSyncPeriod is 0, so anything near a second means a lost wake-up
	// that only the periodic timer repaired.
	if p99 := res.Percentile(0.99); p99 > 2*time.Second {
		t.Errorf("p99 latency %v, want well under 2s", p99)
	}
	t.Logf("startup %v, %d updates, %d syncs, p50 %v, p99 %v", res.Startup, res.Updates, res.Syncs, res.Percentile(0.5), res.Percentile(0.99))
}

// BenchmarkInformerToKernel: 10k Services x 10 endpoints, 100 EndpointSlice writes per
// second for CHURN_SECONDS (default 15), from the API write to the fake IPVS holding
// the new real server. One run per minSyncPeriod; use -benchtime=1x (b.N is ignored:
// the run is bounded in time, not in iterations).
func BenchmarkInformerToKernel(b *testing.B) {
	dur := 15 * time.Second
	if s := os.Getenv("CHURN_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("bad CHURN_SECONDS %q", s)
		}
		dur = time.Duration(n) * time.Second
	}
	services := 10000
	if s := os.Getenv("CHURN_SERVICES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("bad CHURN_SERVICES %q", s)
		}
		services = n
	}
	for _, minSync := range []time.Duration{0, time.Second} {
		b.Run("minSyncPeriod="+minSync.String(), func(b *testing.B) {
			res, err := RunChurn(context.Background(), ChurnConfig{
				Services: services, EndpointsPerService: 10, UpdatesPerSecond: 100, Duration: dur,
				MinSyncPeriod: minSync,
			})
			if err != nil {
				b.Fatal(err)
			}
			if res.Missed != 0 {
				b.Errorf("%d of %d updates never reached IPVS", res.Missed, res.Updates)
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(res.Percentile(0.5)), "p50-ms")
			b.ReportMetric(ms(res.Percentile(0.99)), "p99-ms")
			b.ReportMetric(ms(res.Percentile(1)), "max-ms")
			b.ReportMetric(res.Achieved, "writes/s")
			b.ReportMetric(float64(res.Syncs)/dur.Seconds(), "syncs/s")
			b.ReportMetric(res.Startup.Seconds(), "startup-s")
			b.ReportMetric(float64(res.Missed), "missed")
		})
	}
}
