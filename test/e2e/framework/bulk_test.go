package framework

import (
	"reflect"
	"testing"
)

func TestParseIPVSTable(t *testing.T) {
	out := `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.1:443 rr
TCP  10.96.3.4:80 rr
  -> 10.244.64.2:8080             Masq    1      0          0
  -> 10.244.64.1:8080             Masq    0      0          0
UDP  10.96.0.10:53 rr
  -> 10.244.0.3:8080              Masq    1      0          0
`
	got := ParseIPVSTable(out)
	want := IPVSTable{
		"TCP 10.96.0.1:443": {},
		"TCP 10.96.3.4:80":  {"10.244.64.1:8080 Masq 0", "10.244.64.2:8080 Masq 1"},
		"UDP 10.96.0.10:53": {"10.244.0.3:8080 Masq 1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseIPVSTable = %q, want %q", got, want)
	}
}

func TestHistogramSummary(t *testing.T) {
	page := `# HELP kubeproxy_sync_proxy_rules_duration_seconds x
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.001"} 0
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv4"} 1.5
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 3
kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1
`
	n, sum, ok := HistogramSummary(page, "kubeproxy_sync_proxy_rules_duration_seconds")
	if !ok || n != 3 || sum != 1.5 {
		t.Fatalf("got %v %v %v, want 3 1.5 true", n, sum, ok)
	}
	if _, _, ok := HistogramSummary(page, "kubeproxy_absent"); ok {
		t.Fatal("absent histogram reported present")
	}
}

func TestHistogramSummaryOf(t *testing.T) {
	page := `kubeproxy_x_count{ip_family="IPv4"} 3
kubeproxy_x_sum{ip_family="IPv4"} 1.5
kubeproxy_x_count{ip_family="IPv6"} 1
kubeproxy_x_sum{ip_family="IPv6"} 13
`
	if n, sum, ok := HistogramSummaryOf(page, "kubeproxy_x", `ip_family="IPv6"`); !ok || n != 1 || sum != 13 {
		t.Errorf("IPv6: %v %v %v", n, sum, ok)
	}
	if n, sum, _ := HistogramSummary(page, "kubeproxy_x"); n != 4 || sum != 14.5 {
		t.Errorf("all: %v %v", n, sum)
	}
}
