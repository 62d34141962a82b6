package main

import (
	"bufio"
	"fmt"
	"image/color"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The lines of the in-VM scale run (test/e2e/scale_test.go) this reads.
var (
	vmObjectsRE    = regexp.MustCompile(`^SCALE-VM: objects: (\d+) ClusterIP Services .* x (\d+) endpoints`)
	vmStartRE      = regexp.MustCompile(`^SCALE-VM: \[(\w+)\] start to all programmed: ([\d.]+) s`)
	vmUnfinishedRE = regexp.MustCompile(`^SCALE-VM: \[(\w+)\] NOT everything programmed (\S+) after the start`)
	vmMemoryThenRE = regexp.MustCompile(`memory then: RSS (\d+) MiB`)
	vmChangeRE     = regexp.MustCompile(`^SCALE-VM: \[(\w+)\] one-endpoint change, .*: p50 (\d+) ms, p99 (\d+) ms, max (\d+) ms`)
	vmResyncRE     = regexp.MustCompile(`^SCALE-VM: \[(\w+)\] full resyncs after the start-up [^:]*: (\d+), mean (\d+) ms`)
	vmMemoryRE     = regexp.MustCompile(`^SCALE-VM: \[(\w+)\] memory at the end: RSS (\d+) MiB`)
)

// vmRun is what one kube-proxy showed in one scale run; durations in ms, zero when
// not measured.
type vmRun struct {
	proxy               string
	services, endpoints int
	start               float64
	unfinished          bool // start is the run's bound, not reached
	p50, p99, max       float64
	resync              float64
	resyncs             int
	rss                 float64 // MiB; an unfinished run's when it was stopped
}

// parseVM reads the runs of one scale-run log.
func parseVM(path string) ([]*vmRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var services, endpoints int
	var runs []*vmRun
	run := func(proxy string) *vmRun {
		for _, r := range runs {
			if r.proxy == proxy {
				return r
			}
		}
		r := &vmRun{proxy: proxy, services: services, endpoints: endpoints}
		runs = append(runs, r)
		return r
	}
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := vmObjectsRE.FindStringSubmatch(line); m != nil {
			services, endpoints = int(num(m[1])), int(num(m[2]))
		} else if m := vmStartRE.FindStringSubmatch(line); m != nil {
			run(m[1]).start = num(m[2]) * 1000
		} else if m := vmUnfinishedRE.FindStringSubmatch(line); m != nil {
			d, err := time.ParseDuration(m[2])
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", path, line, err)
			}
			r := run(m[1])
			r.start, r.unfinished = float64(d.Milliseconds()), true
			if mem := vmMemoryThenRE.FindStringSubmatch(line); mem != nil {
				r.rss = num(mem[1])
			}
		} else if m := vmChangeRE.FindStringSubmatch(line); m != nil {
			r := run(m[1])
			r.p50, r.p99, r.max = num(m[2]), num(m[3]), num(m[4])
		} else if m := vmResyncRE.FindStringSubmatch(line); m != nil {
			r := run(m[1])
			r.resyncs, r.resync = int(num(m[2])), num(m[3])
		} else if m := vmMemoryRE.FindStringSubmatch(line); m != nil {
			run(m[1]).rss = num(m[2])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if services == 0 || len(runs) == 0 {
		return nil, fmt.Errorf("%s: no scale run in it (no SCALE-VM objects and start lines)", path)
	}
	return runs, nil
}

// vmMain writes the table of every run in logs and the plot of start-up and change
// latency against Service count for each kube-proxy.
func vmMain(logs []string, table, out string) error {
	if len(logs) == 0 {
		return fmt.Errorf("-vm: name the scale-run logs to read")
	}
	var runs []*vmRun
	for _, l := range logs {
		rs, err := parseVM(l)
		if err != nil {
			return err
		}
		runs = append(runs, rs...)
	}
	sort.SliceStable(runs, func(i, j int) bool {
		if runs[i].services != runs[j].services {
			return runs[i].services < runs[j].services
		}
		return runs[i].proxy > runs[j].proxy // upstream before ours
	})
	if err := os.WriteFile(table, []byte(vmTable(runs)), 0o644); err != nil {
		return err
	}
	colors := map[string][2]color.RGBA{
		"upstream": {{200, 40, 40, 255}, {240, 150, 60, 255}},
		"ours":     {{30, 90, 200, 255}, {40, 170, 90, 255}},
	}
	var all []series
	for _, proxy := range []string{"upstream", "ours"} {
		start := series{label: proxy + ": start to all", color: colors[proxy][0]}
		change := series{label: proxy + ": change p50", color: colors[proxy][1]}
		for _, r := range runs {
			if r.proxy != proxy {
				continue
			}
			x := float64(r.services)
			if r.start > 0 {
				start.points = append(start.points, point{x: x, y: r.start, atLeast: r.unfinished})
			}
			if r.p50 > 0 {
				change.points = append(change.points, point{x: x, y: r.p50})
			}
		}
		for _, s := range []series{start, change} {
			if len(s.points) > 0 {
				all = append(all, s)
			}
		}
	}
	return plot(out, "Real kernel (VM, TCG): ms from start to all programmed, and per change", all)
}

func vmTable(runs []*vmRun) string {
	ms := func(v float64) string {
		switch {
		case v <= 0:
			return "-"
		case v >= 10000:
			return strconv.FormatFloat(v/1000, 'f', 1, 64) + " s"
		}
		return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
	}
	var b strings.Builder
	b.WriteString("| Services x endpoints | kube-proxy | start to all programmed | change p50 / p99 / max | periodic full resync (mean, count) | RSS at the end |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range runs {
		start := ms(r.start)
		changes, resync := ms(r.p50)+" / "+ms(r.p99)+" / "+ms(r.max), fmt.Sprintf("%s (%d)", ms(r.resync), r.resyncs)
		rss := strconv.FormatFloat(r.rss, 'f', 0, 64) + " MiB"
		if r.unfinished {
			start = "not after " + ms(r.start)
			changes, resync = "not measured (still in its first sync)", "-"
		}
		fmt.Fprintf(&b, "| %d x %d | %s | %s | %s | %s | %s |\n", r.services, r.endpoints, r.proxy, start, changes, resync, rss)
	}
	return b.String()
}
