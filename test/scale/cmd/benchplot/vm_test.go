package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Lines as test/e2e/scale_test.go prints them: upstream unfinished at 10k.
const vmSample = `=== RUN   TestScaleVM
SCALE-VM: objects: 10000 ClusterIP Services (1 TCP port) x 4 endpoints on this node, one EndpointSlice each, written in 152.9 s (8 client goroutines, QPS 500) before any kube-proxy started
SCALE-VM: [ours] start to all programmed: 46.7 s (host clock, kube-proxy start to the poller's answer); IPVS all 10000 virtual servers x 4 real servers 46.7 s
SCALE-VM: [ours] one-endpoint change, API write to IPVS (20 changes, host clock): p50 43 ms, p99 108 ms, max 108 ms (min 32 ms); the API write alone: median 8 ms, max 14 ms; in-VM poll cycle 12.1 ms
SCALE-VM: [ours] full resyncs after the start-up (daemon's histograms): 1, mean 754 ms
SCALE-VM: [ours] memory at the end: RSS 210 MiB, peak RSS 210 MiB
SCALE-VM: [upstream] NOT everything programmed 30m0s after the start (e2e-ipvswait exited 1: timeout); it had: IPVS complete at 105.1 s; progress: 105.1 s: 10000; no changes or resyncs measured (still in its first sync); memory then: RSS 150 MiB, peak 151 MiB
`

func TestVMTableAndPlot(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "vm-10000.log")
	if err := os.WriteFile(in, []byte(vmSample), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := parseVM(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("parsed %d runs, want 2", len(runs))
	}
	ours, up := runs[0], runs[1]
	if ours.proxy != "ours" || ours.services != 10000 || ours.endpoints != 4 || ours.start != 46700 || ours.p50 != 43 || ours.max != 108 ||
		ours.resync != 754 || ours.resyncs != 1 || ours.rss != 210 || ours.unfinished {
		t.Errorf("ours = %+v", *ours)
	}
	if up.proxy != "upstream" || !up.unfinished || up.start != 1800000 || up.p50 != 0 || up.rss != 150 {
		t.Errorf("upstream = %+v", *up)
	}
	table, out := filepath.Join(dir, "vm.md"), filepath.Join(dir, "vm.png")
	if err := vmMain([]string{in}, table, out); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(table)
	for _, want := range []string{
		"| 10000 x 4 | upstream | not after 1800.0 s | not measured (still in its first sync) | - | 150 MiB |",
		"| 10000 x 4 | ours | 46.7 s | 43 ms / 108 ms / 108 ms | 754 ms (1) | 210 MiB |",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("table lacks %q:\n%s", want, b)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.log")
	os.WriteFile(empty, []byte("PASS\n"), 0o644)
	if err := vmMain([]string{empty}, table, out); err == nil {
		t.Errorf("a log without a scale run gave no error")
	}
}
