package ipvs

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// TestBackendRequestsAreCounted: every kernel request a rules backend counts
// (rules.Counter.Request) names an operation of kubeproxy_ipvs_kernel_operations_total;
// SyncStats drops a name it does not know, so a typo would lose the count silently.
func TestBackendRequestsAreCounted(t *testing.T) {
	subsystems := map[string]string{"SubsystemIPSet": metrics.SubsystemIPSet, "SubsystemIPTables": metrics.SubsystemIPTables,
		"SubsystemNFTables": metrics.SubsystemNFTables}
	call := regexp.MustCompile(`Request\(metrics\.(Subsystem[A-Za-z]+), "([a-z_]+)"\)`)
	files, _ := filepath.Glob("rules/*/*.go")
	n := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			n++
			var s SyncStats
			s.Request(subsystems[m[1]], m[2])
			total := 0
			for _, c := range s.ops {
				total += c
			}
			if total != 1 {
				t.Errorf("%s: Request(%s, %q) is no kernel operation the metrics know", f, m[1], m[2])
			}
		}
	}
	if n < 6 {
		t.Fatalf("found only %d counted requests in the backends: the scan proves little", n)
	}
}
