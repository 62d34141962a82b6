package metricsdoc

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the metrics reference of docs/OPERATIONS.md from the registry")

var operationsDoc = filepath.Join("..", "..", "docs", "OPERATIONS.md")

// TestOperationsDocMetrics fails when the metrics reference of docs/OPERATIONS.md
// differs from what the daemon serves: a family missing or extra, or a different type,
// label set or help text. hack/update-metrics-doc.sh (this test with -update)
// rewrites it.
func TestOperationsDocMetrics(t *testing.T) {
	families, err := Served()
	if err != nil {
		t.Fatalf("reading the registry: %v", err)
	}
	tables, err := Render(families)
	if err != nil {
		t.Fatalf("rendering the reference: %v", err)
	}
	raw, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Splice(string(raw), tables)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if want != string(raw) {
			if err := os.WriteFile(operationsDoc, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote %s", operationsDoc)
		}
		return
	}
	if diff := cmp.Diff(want, string(raw)); diff != "" {
		t.Errorf("%s is not what the daemon serves (-served +doc); run hack/update-metrics-doc.sh:\n%s", operationsDoc, diff)
	}
}

// TestServedHasTheDaemonsFamilies pins what Served must find, so a change in how it
// reads the registry cannot make the reference quietly shrink.
func TestServedHasTheDaemonsFamilies(t *testing.T) {
	families, err := Served()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Family{}
	for _, f := range families {
		byName[f.Name] = f
	}
	for _, want := range []Family{
		// A vector with no series yet: its type comes from its collector.
		{Name: "kubeproxy_ipvs_held_back_objects", Type: "gauge", Labels: []string{"ip_family", "reason"},
			Help: "[ALPHA] Objects not programmed because they are invalid or the kernel refused them, by IP family and reason"},
		{Name: "kubeproxy_sync_proxy_rules_duration_seconds", Type: "histogram", Labels: []string{"ip_family"},
			Help: "[ALPHA] SyncProxyRules latency in seconds"},
		// A plain metric: its series exists from registration.
		{Name: "kubeproxy_ipvs_sync_failures_total", Type: "counter", Help: "[ALPHA] Cumulative proxy rule syncs that failed"},
		// Registered at the first API client's construction.
		{Name: "rest_client_requests_total", Type: "counter", Labels: []string{"code", "host", "method"},
			Help: "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host."},
		// Only with --ipvs-virtual-server-metrics.
		{Name: "kubeproxy_ipvs_virtual_server_connections_total", Type: "counter", Optional: VirtualServerMetricsFlag,
			Labels: []string{"address", "namespace", "port", "port_name", "protocol", "scheduler", "service"},
			Help:   "[ALPHA] Cumulative connections scheduled by an IPVS virtual server"},
		{Name: "process_resident_memory_bytes", Type: "gauge", Help: "Resident memory size in bytes."},
		{Name: "kubernetes_feature_enabled", Type: "gauge", Labels: []string{"name", "stage"},
			Help: "[BETA] This metric records the data about the stage and enablement of a k8s feature."},
	} {
		got, ok := byName[want.Name]
		if !ok {
			t.Errorf("%s: not found", want.Name)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", want.Name, diff)
		}
	}
	if !slices.IsSortedFunc(families, func(a, b Family) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("families are not sorted by name")
	}
}

func TestDecodeDesc(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    described
		wantErr bool
	}{
		{in: `Desc{fqName: "a_total", help: "[ALPHA] Help, with \"quotes\", {braces} and , commas", unit: "", constLabels: {}, variableLabels: {b,c(d)}}`,
			want: described{name: "a_total", help: `[ALPHA] Help, with "quotes", {braces} and , commas`, labels: []string{"b", "d"}}},
		{in: `Desc{fqName: "x", help: "", unit: "seconds", constLabels: {z="1,}",y="2"}, variableLabels: {}}`,
			want: described{name: "x", help: "", labels: []string{"y", "z"}}},
		{in: `Desc{fqName: "x", help: "h", constLabels: {}, variableLabels: {}}`, wantErr: true}, // no unit: another format
		{in: `Desc{fqName: "", help: "h", unit: "", constLabels: {}, variableLabels: {}}`, wantErr: true},
		{in: `Desc{fqName: "x", help: "h", unit: "", constLabels: {}, variableLabels: {a}`, wantErr: true},
		{in: `something else`, wantErr: true},
	} {
		got, err := decodeDesc(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("decodeDesc(%s): error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil {
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(described{})); diff != "" {
				t.Errorf("decodeDesc(%s) (-want +got):\n%s", tc.in, diff)
			}
		}
	}
}

func TestSpliceNeedsEverySection(t *testing.T) {
	tables := map[string]string{}
	var doc strings.Builder
	for _, s := range sections {
		tables[s.id] = "| table " + s.id + " |\n"
		doc.WriteString(strings.ReplaceAll(beginMarker, "%s", s.id) + "\nstale\n" + strings.ReplaceAll(endMarker, "%s", s.id) + "\n")
	}
	got, err := Splice(doc.String(), tables)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "stale") || !strings.Contains(got, "| table go |\n<!-- END GENERATED metrics go -->") {
		t.Errorf("Splice did not replace every section:\n%s", got)
	}
	missing := strings.Replace(doc.String(), strings.ReplaceAll(endMarker, "%s", "ipvs"), "", 1)
	if _, err := Splice(missing, tables); err == nil {
		t.Error("Splice accepted a doc without the end of the ipvs section")
	}
	extra := doc.String() + strings.ReplaceAll(beginMarker, "%s", "retired") + "\n"
	if _, err := Splice(extra, tables); err == nil {
		t.Error("Splice accepted a doc with an unknown section")
	}
}
