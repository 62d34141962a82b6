package main

import (
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkFullSyncInitial/services=1k-2   3   80281395 ns/op   22532125 B/op   380184 allocs/op
BenchmarkFullSyncInitial/services=10k-2  3  896600710 ns/op  220270674 B/op  3789865 allocs/op
BenchmarkOneEndpointChange/services=10k-2  2000  429649 ns/op  3.200 kernel-ops/op  10.00 max-kernel-ops  34102 B/op  469 allocs/op
--- BENCH: BenchmarkX
PASS
`

func TestParseTablePlot(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := parse(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("parsed %d results, want 3: %+v", len(rs), rs)
	}
	if r := rs[2]; r.name != "BenchmarkOneEndpointChange/services=10k" || r.n != 2000 || r.metrics["kernel-ops/op"] != 3.2 || r.metrics["ns/op"] != 429649 {
		t.Errorf("third result = %+v", r)
	}
	if n, ok := services(rs[1].name); !ok || n != 10000 {
		t.Errorf("services(%q) = %d, %v", rs[1].name, n, ok)
	}
	table := filepath.Join(dir, "t.md")
	if err := writeTable(table, rs); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(table)
	if !strings.Contains(string(b), "| `FullSyncInitial/services=10k` | 3 | 896.601 ms/op,") {
		t.Errorf("table:\n%s", b)
	}
	s := seriesFor(rs, "BenchmarkFullSyncInitial", "full", color.RGBA{1, 2, 3, 255})
	if len(s.points) != 2 || s.points[0].x != 1000 || s.points[1].y < 896 || s.points[1].y > 897 {
		t.Errorf("series = %+v", s.points)
	}
	out := filepath.Join(dir, "p.png")
	if err := plot(out, "title", []series{s}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
		t.Errorf("plot is %v", b)
	}
	if err := plot(out, "title", nil); err == nil {
		t.Errorf("plotting no points succeeded")
	}
}
