// Command benchplot turns the output of hack/bench.sh's `go test -bench` runs into a
// markdown table of every figure and a PNG plot of sync time versus Service count
// (log-log) for full and incremental syncs.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// result is one benchmark line: name, iterations and value per unit.
type result struct {
	name    string
	n       int
	metrics map[string]float64
	units   []string // in printed order
}

var lineRE = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+(\d+)\s+(.*)$`)

func parse(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[3])
		r := result{name: m[1], n: n, metrics: map[string]float64{}}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			r.metrics[f[i+1]] = v
			r.units = append(r.units, f[i+1])
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// services extracts N from ".../services=10k".
func services(name string) (int, bool) {
	i := strings.Index(name, "services=")
	if i < 0 {
		return 0, false
	}
	s := name[i+len("services="):]
	mul := 1
	if strings.HasSuffix(s, "k") {
		s, mul = strings.TrimSuffix(s, "k"), 1000
	}
	v, err := strconv.Atoi(s)
	return v * mul, err == nil
}

func writeTable(path string, rs []result) error {
	var b strings.Builder
	b.WriteString("| Benchmark | runs | figures |\n|---|---|---|\n")
	for _, r := range rs {
		var parts []string
		for _, u := range r.units {
			v := r.metrics[u]
			switch u {
			case "ns/op":
				parts = append(parts, fmt.Sprintf("%.3f ms/op", v/1e6))
			case "B/op":
				parts = append(parts, fmt.Sprintf("%.1f MiB/op alloc", v/(1<<20)))
			default:
				parts = append(parts, strconv.FormatFloat(v, 'g', 4, 64)+" "+u)
			}
		}
		fmt.Fprintf(&b, "| `%s` | %d | %s |\n", strings.TrimPrefix(r.name, "Benchmark"), r.n, strings.Join(parts, ", "))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// point is one measurement; atLeast marks a lower bound (the run ended first).
type point struct {
	x, y    float64
	atLeast bool
}

type series struct {
	label  string
	color  color.RGBA
	points []point
}

func seriesFor(rs []result, prefix, label string, c color.RGBA) series {
	s := series{label: label, color: c}
	for _, r := range rs {
		if !strings.HasPrefix(r.name, prefix+"/") {
			continue
		}
		if n, ok := services(r.name); ok && r.metrics["ns/op"] > 0 {
			s.points = append(s.points, point{x: float64(n), y: r.metrics["ns/op"] / 1e6})
		}
	}
	sort.Slice(s.points, func(i, j int) bool { return s.points[i].x < s.points[j].x })
	return s
}

const (
	width, height = 900, 560
	left, right   = 90, 250
	top, bottom   = 50, 70
)

// plot draws all (ms against Services, log-log) under title.
func plot(path, title string, all []series) error {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	var xs, ys []float64
	for _, s := range all {
		for _, p := range s.points {
			xs, ys = append(xs, p.x), append(ys, p.y)
		}
	}
	if len(xs) == 0 {
		return fmt.Errorf("no benchmark points to plot")
	}
	// Decades that cover the data.
	minX, maxX := decade(minOf(xs), math.Floor), decade(maxOf(xs), math.Ceil)
	minY, maxY := decade(minOf(ys), math.Floor), decade(maxOf(ys), math.Ceil)
	if maxX == minX {
		maxX *= 10
	}
	if maxY == minY {
		maxY *= 10
	}
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	px := func(x float64) int { return left + int(pw*math.Log10(x/minX)/math.Log10(maxX/minX)) }
	py := func(y float64) int { return height - bottom - int(ph*math.Log10(y/minY)/math.Log10(maxY/minY)) }

	grey, black := color.RGBA{220, 220, 220, 255}, color.RGBA{0, 0, 0, 255}
	for y := minY; y <= maxY*1.0001; y *= 10 {
		line(img, left, py(y), width-right, py(y), grey)
		text(img, left-8-7*len(fmtMs(y)), py(y)+4, fmtMs(y), black)
	}
	for x := minX; x <= maxX*1.0001; x *= 10 {
		line(img, px(x), top, px(x), height-bottom, grey)
		text(img, px(x)-3*len(fmtN(x)), height-bottom+18, fmtN(x), black)
	}
	// The sizes actually measured, labelled too.
	for _, x := range xs {
		text(img, px(x)-3*len(fmtN(x)), height-bottom+32, fmtN(x), color.RGBA{90, 90, 90, 255})
	}
	line(img, left, top, left, height-bottom, black)
	line(img, left, height-bottom, width-right, height-bottom, black)
	text(img, left, top-20, title, black)
	text(img, left+int(pw)/2-60, height-18, "Services (log)", black)
	text(img, 8, top-30, "ms", black)

	for i, s := range all {
		for j, p := range s.points {
			x, y := px(p.x), py(p.y)
			label := pointLabel(p.y)
			if p.atLeast {
				// A lower bound: an open square with an arrow up.
				square(img, x, y, 4, s.color)
				square(img, x, y, 2, color.RGBA{255, 255, 255, 255})
				line(img, x, y-4, x, y-18, s.color)
				line(img, x-3, y-15, x, y-18, s.color)
				line(img, x+3, y-15, x, y-18, s.color)
				label = "> " + label
			} else {
				square(img, x, y, 3, s.color)
			}
			if j > 0 {
				q := s.points[j-1]
				thick(img, px(q.x), py(q.y), x, y, s.color)
			}
			text(img, x+6, y-6, label, s.color)
		}
		ly := top + 20 + 22*i
		thick(img, width-right+15, ly-4, width-right+40, ly-4, s.color)
		text(img, width-right+46, ly, s.label, black)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func decade(v float64, round func(float64) float64) float64 {
	return math.Pow(10, round(math.Log10(v)))
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

func fmtMs(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// pointLabel prints a value with 3 significant digits, never in exponent form.
func pointLabel(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func fmtN(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// line draws a straight line (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if 2*e >= dy {
			e += dy
			x0 += sx
		}
		if 2*e <= dx {
			e += dx
			y0 += sy
		}
	}
}

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	for d := -1; d <= 1; d++ {
		line(img, x0, y0+d, x1, y1+d, c)
	}
}

func square(img *image.RGBA, x, y, r int, c color.Color) {
	draw.Draw(img, image.Rect(x-r, y-r, x+r+1, y+r+1), image.NewUniform(c), image.Point{}, draw.Src)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

func main() {
	in := flag.String("in", "_output/bench/all.txt", "go test -bench output")
	table := flag.String("table", "_output/bench/results.md", "markdown table to write")
	out := flag.String("png", "docs/sync-scaling.png", "plot to write")
	vmLogs := flag.Bool("vm", false, "the arguments are logs of the in-VM scale run (TestScaleVM): plot upstream and ours from them instead")
	flag.Parse()
	if *vmLogs {
		if err := vmMain(flag.Args(), *table, *out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	rs, err := parse(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := writeTable(*table, rs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	all := []series{
		seriesFor(rs, "BenchmarkFullSyncInitial", "full sync, empty kernel", color.RGBA{200, 40, 40, 255}),
		seriesFor(rs, "BenchmarkFullSyncResync", "periodic full resync", color.RGBA{230, 140, 0, 255}),
		seriesFor(rs, "BenchmarkOneEndpointChange", "one-endpoint change", color.RGBA{30, 90, 200, 255}),
	}
	if err := plot(*out, "Sync time vs Service count (10 endpoints each, fake kernel; log-log)", all); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
