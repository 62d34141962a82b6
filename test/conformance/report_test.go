// Package conformance holds the test of report.py, the page `make conformance`
// writes (docs/CONFORMANCE.md); the harness itself is shell (run.sh, cluster/).
package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	restartSpec = "[sig-network] Services should work after restarting kube-proxy [Disruptive]"
	basicSpec   = "[sig-network] Services should serve a basic endpoint from pods [Conformance]"
)

// report copies testdata/report (three column folders: upstream-ipvs and
// ours-iptables with junit reports, ours-nftables without), lets edit change
// the copy, runs report.py with --doc and returns the folder, results.md and
// the record page ("" when report.py did not write it).
func report(t *testing.T, edit func(out string)) (string, string, string) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed to render the conformance page (hack/install-deps.sh installs it)")
	}
	out := t.TempDir()
	if err := os.CopyFS(out, os.DirFS("testdata/report")); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(out)
	}
	doc := filepath.Join(out, "CONFORMANCE.md")
	if b, err := exec.Command("python3", "report.py", out, "--doc", doc).CombinedOutput(); err != nil {
		t.Fatalf("report.py: %v\n%s", err, b)
	}
	results, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(doc)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out, string(results), string(page)
}

// section returns the body of "## name" in text.
func section(t *testing.T, text, name string) string {
	t.Helper()
	_, after, ok := strings.Cut(text, "## "+name+"\n")
	if !ok {
		t.Fatalf("no section %q in:\n%s", name, text)
	}
	body, _, _ := strings.Cut(after, "\n## ")
	return body
}

func wantIn(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// TestReportColumnWithoutReport: ours-nftables ran (run.json) but has no
// junit report. The page says so, compares only the two other columns (the
// restart spec, failed upstream and passed ours, is the one difference), lists
// the failure's first line, the skip list's reason and the suite's own skip
// message with its columns, leaves out a spec outside the focus, and is not
// the record.
func TestReportColumnWithoutReport(t *testing.T) {
	_, text, page := report(t, nil)
	if page != "" {
		t.Errorf("the record was written though ours-nftables has no report:\n%s", page)
	}
	wantIn(t, "the column table", text,
		"| upstream-ipvs | `make conformance PARALLEL=1` (columns at the same time) | abc1234 (v0.0.0-1-gabc1234) | 2026-12-06T17:00:00Z | 3900 s | 3 | - |")
	wantIn(t, "Totals", section(t, text, "Totals"),
		"| upstream-ipvs | 1 | 1 | 2 |", "| ours-iptables | 2 | 0 | 2 |", "| ours-nftables | no report | | |")
	differ := section(t, text, "Where the columns differ")
	wantIn(t, "differences", differ, "| "+restartSpec+" | fail 300s | pass 120s | no report |")
	if strings.Contains(differ, basicSpec) {
		t.Errorf("a spec passed in both columns with a report is listed as a difference:\n%s", differ)
	}
	wantIn(t, "Failures", section(t, text, "Failures"),
		"- upstream-ipvs, "+restartSpec+": [FAILED] service web \\| not reachable after restart\n")
	skips := section(t, text, "Skipped, and why")
	wantIn(t, "skips", skips,
		"- `Internet connection`: the cluster has no route to the Internet",
		"- Only supported for providers [gce] (not skeleton)\n  - [sig-network] Services should be rejected for evicted pods [Provider:gce] (upstream-ipvs, ours-iptables)")
	if strings.Contains(skips, "Internet connection for containers") {
		t.Errorf("a spec skipped by skip.txt is listed again under the suite's own skips:\n%s", skips)
	}
	if strings.Contains(text, "sig-apps") {
		t.Errorf("a spec outside the focus is on the page")
	}
}

// giveNFTablesReport gives ours-nftables (run.json only) ours-iptables' report.
func giveNFTablesReport(t *testing.T, out string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "ours-iptables", "junit_01.xml"))
	if err == nil {
		err = os.WriteFile(filepath.Join(out, "ours-nftables", "junit_01.xml"), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestReportRecord: with a report in every column the page is the record,
// written with its heading; results.md is the same page without it.
func TestReportRecord(t *testing.T) {
	_, text, page := report(t, func(out string) { giveNFTablesReport(t, out) })
	if !strings.HasPrefix(page, "# Conformance: upstream's [sig-network] e2e suite\n") || !strings.HasSuffix(page, text) {
		t.Fatalf("the record is not the heading and results.md:\n%s", page)
	}
	wantIn(t, "Totals", section(t, text, "Totals"), "| ours-nftables | 2 | 0 | 2 |")
	wantIn(t, "differences", section(t, text, "Where the columns differ"), "| "+restartSpec+" | fail 300s | pass 120s | pass 120s |")
}

// TestReportOtherFocus: a later run of one column with another focus shows
// that column alone and names the others as left out; not the record.
func TestReportOtherFocus(t *testing.T) {
	_, text, page := report(t, func(out string) {
		p := filepath.Join(out, "ours-nftables", "run.json")
		b, err := os.ReadFile(p)
		if err == nil {
			s := strings.Replace(string(b), `(Services|Networking)"`, `Services should serve a basic endpoint"`, 1)
			s = strings.Replace(s, `"record": true`, `"record": false`, 1)
			s = strings.Replace(s, `"started": "2026-12-06T17:00:02Z"`, `"started": "2026-12-07T09:00:00Z"`, 1)
			s = strings.Replace(s, `"command": "make conformance PARALLEL=1"`, `"command": "make conformance FOCUS='a|b'"`, 1)
			err = os.WriteFile(p, []byte(s), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	if page != "" {
		t.Errorf("a one-column run of another focus was written as the record")
	}
	wantIn(t, "the page", text, "Left out (run with another focus or address family): upstream-ipvs, ours-iptables.",
		"| ours-nftables | no report | | |",
		// A | in the command would end the table cell.
		"| ours-nftables | `make conformance FOCUS='a\\|b'` (columns at the same time) |")
	if strings.Contains(section(t, text, "Totals"), "upstream-ipvs") {
		t.Errorf("a column of another focus is in the totals:\n%s", section(t, text, "Totals"))
	}
}

// TestReportExported: the record's columns kept as exported COLUMN.json files
// (docs/conformance/) render the same page as the column folders they came
// from.
func TestReportExported(t *testing.T) {
	out, _, fromFolders := report(t, func(out string) { giveNFTablesReport(t, out) })
	kept := t.TempDir()
	for _, c := range []string{"upstream-ipvs", "ours-iptables", "ours-nftables"} {
		if b, err := exec.Command("python3", "report.py", "--export", filepath.Join(out, c), filepath.Join(kept, c+".json")).CombinedOutput(); err != nil {
			t.Fatalf("report.py --export %s: %v\n%s", c, err, b)
		}
	}
	doc := filepath.Join(kept, "CONFORMANCE.md")
	if b, err := exec.Command("python3", "report.py", kept, "--doc", doc).CombinedOutput(); err != nil {
		t.Fatalf("report.py: %v\n%s", err, b)
	}
	fromKept, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if fromFolders == "" || string(fromKept) != fromFolders {
		t.Errorf("the page from the exported columns differs from the folders' page:\n%s\n---\n%s", fromKept, fromFolders)
	}
}

// TestReportTSV: --tsv prints a column's specs of its focus, one
// NAME<TAB>STATUS<TAB>SECONDS line each (what ci.sh checks), and nothing
// outside the focus.
func TestReportTSV(t *testing.T) {
	b, err := exec.Command("python3", "report.py", "--tsv", "testdata/report/upstream-ipvs").Output()
	if err != nil {
		t.Fatalf("report.py --tsv: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := []string{
		"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]\tskip\t0",
		"[sig-network] Services should be rejected for evicted pods [Provider:gce]\tskip\t0",
		basicSpec + "\tpass\t42",
		restartSpec + "\tfail\t300",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("--tsv printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReportSpecsRunAlone: a spec the first pass skipped (alone.txt) and the
// second ran (alone/junit_01.xml) counts with the second's result; a spec the
// second pass did not run keeps the first's; the page names the pattern and
// its reason.
func TestReportSpecsRunAlone(t *testing.T) {
	const terminating = "[sig-network] Services should fallback to terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Cluster"
	_, text, _ := report(t, func(out string) {
		dir := filepath.Join(out, "ours-iptables")
		editFile(t, dir, "junit_01.xml", "  </testsuite>", `    <testcase name="[It] `+terminating+`" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite>`)
		editFile(t, dir, "run.json", `"skips": [`, `"alone": [["fallback to terminating", "its checks must fit in a grace period"]], "skips": [`)
		writeJunit(t, filepath.Join(dir, "alone"), `<testcase name="[It] `+terminating+`" status="passed" time="150.2"></testcase>`)
	})
	every := section(t, text, "Every spec")
	wantIn(t, "every spec", every, "| "+terminating+" | - | pass 150s |", "| "+basicSpec+" | pass 42s | pass 38s |")
	wantIn(t, "run alone", section(t, text, "Run alone, and why"), "- `fallback to terminating`: its checks must fit in a grace period")
}

// TestReportSpecsRunOnThreeNodes: a spec the two-node cluster skipped and the
// three-node one ran (three/junit_01.xml) counts with the latter's result, a
// failure there too; the page names the pattern and its reason. A column whose
// focus held only three-node specs (no two-node cluster) is read from three/
// alone; one whose two-node cluster left no report still shows "no report". A
// pattern that matches no spec of the page is not listed.
func TestReportSpecsRunOnThreeNodes(t *testing.T) {
	const hc = "[sig-network] Services should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes"
	_, text, _ := report(t, func(out string) {
		dir := filepath.Join(out, "ours-iptables")
		editFile(t, dir, "junit_01.xml", "  </testsuite>", `    <testcase name="[It] `+hc+`" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite>`)
		editFile(t, dir, "run.json", `"skips": [`, `"three_nodes": [["HealthCheckNodePort correctly", "needs three nodes"], ["no spec has this", "not shown"]], "skips": [`)
		writeJunit(t, filepath.Join(dir, "three"), `<testcase name="[It] `+hc+`" status="failed" time="88.1"><failure message="no health check answer"></failure></testcase>`)
		dir = filepath.Join(out, "upstream-ipvs")
		editFile(t, dir, "run.json", `"skips": [`, `"two_nodes": false, "skips": [`)
		if err := os.Remove(filepath.Join(dir, "junit_01.xml")); err != nil {
			t.Fatal(err)
		}
		writeJunit(t, filepath.Join(dir, "three"), `<testcase name="[It] `+hc+`" status="passed" time="70"></testcase>`)
		// A failed two-node cluster (no report) with a three-node report.
		writeJunit(t, filepath.Join(out, "ours-nftables", "three"), `<testcase name="[It] `+hc+`" status="passed" time="71"></testcase>`)
	})
	wantIn(t, "every spec", section(t, text, "Every spec"), "| "+hc+" | pass 70s | fail 88s | no report |")
	wantIn(t, "totals", section(t, text, "Totals"), "| upstream-ipvs | 1 | 0 | 1 |", "| ours-iptables | 2 | 1 | 2 |", "| ours-nftables | no report | | |")
	wantIn(t, "failures", section(t, text, "Failures"), "- ours-iptables, "+hc+": no health check answer")
	three := section(t, text, "Run on three nodes, and why")
	wantIn(t, "three nodes", three, "- `HealthCheckNodePort correctly`: needs three nodes")
	if strings.Contains(three, "no spec has this") {
		t.Errorf("a pattern that matches no spec is listed:\n%s", three)
	}
}

// TestReportFailedSyncs: a column's failed syncs are our daemon's
// kubeproxy_ipvs_sync_failures_total at teardown, summed over the nodes of both
// of its clusters (the two-node one and the three-node one); a column whose
// nodes served no such counter (upstream) shows "-"; an exported column keeps
// the figure.
func TestReportFailedSyncs(t *testing.T) {
	out, text, _ := report(t, func(out string) {
		metrics := map[string]string{
			"ours-iptables/cluster/metrics-node1.txt":       "# TYPE kubeproxy_ipvs_sync_failures_total counter\nkubeproxy_ipvs_sync_failures_total 2\nkubeproxy_ipvs_syncs_total 90\n",
			"ours-iptables/cluster/metrics-node2.txt":       "kubeproxy_ipvs_sync_failures_total 0\n",
			"ours-iptables/three/cluster/metrics-node3.txt": "kubeproxy_ipvs_sync_failures_total 1\n",
			"upstream-ipvs/cluster/metrics-node1.txt":       "kubeproxy_sync_proxy_rules_duration_seconds_count 40\n",
		}
		for name, text := range metrics {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(out, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(out, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	wantIn(t, "the column table", text, "| 2026-12-06T17:00:00Z | 3900 s | 3 | - |", "| 3 | 3 |\n")
	exported := filepath.Join(t.TempDir(), "ours-iptables.json")
	if b, err := exec.Command("python3", "report.py", "--export", filepath.Join(out, "ours-iptables"), exported).CombinedOutput(); err != nil {
		t.Fatalf("report.py --export: %v\n%s", err, b)
	}
	b, err := os.ReadFile(exported)
	if err != nil {
		t.Fatal(err)
	}
	wantIn(t, "the exported column", string(b), `"sync_failures": 3`)
}

// TestReportSkipListsOfEveryColumn: columns kept from different runs may have
// run with different skip lists; the page gives every column's patterns, and a
// spec one of them skipped is not listed as a skip of the suite's own.
func TestReportSkipListsOfEveryColumn(t *testing.T) {
	_, text, _ := report(t, func(out string) {
		dir := filepath.Join(out, "ours-iptables")
		editFile(t, dir, "run.json", `"skips": [`, `"skips": [["Provider:gce", "no cloud here"], `)
	})
	skips := section(t, text, "Skipped, and why")
	wantIn(t, "skips", skips, "- `Internet connection`: the cluster has no route to the Internet", "- `Provider:gce`: no cloud here")
	wantIn(t, "suite skips", skips, "[sig-network] Services should be rejected for evicted pods [Provider:gce] (upstream-ipvs)\n")
	if strings.Contains(skips, "[Provider:gce] (upstream-ipvs, ours-iptables)") {
		t.Errorf("a spec skipped by a column's skip list is listed as the suite's own skip in that column:\n%s", skips)
	}
}

// editFile replaces the first old in dir/name by new; the file must hold old.
func editFile(t *testing.T, dir, name, old, new string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err == nil && !strings.Contains(string(b), old) {
		t.Fatalf("%s lacks %q", name, old)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), []byte(strings.Replace(string(b), old, new, 1)), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// writeJunit writes dir/junit_01.xml: testcase, and the basic spec skipped (a
// pass that runs a few specs reports the others as skipped).
func writeJunit(t *testing.T, dir, testcase string) {
	t.Helper()
	xml := "<testsuites><testsuite>\n" + testcase + `
<testcase name="[It] ` + basicSpec + `" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>`
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "junit_01.xml"), []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReportNames: --names turns a dry run's report into a regular expression
// of the exact names its pattern matches, skipped specs and suite nodes left
// out, every metacharacter escaped.
func TestReportNames(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "junit_01.xml")
	xml := `<testsuites><testsuite>
<testcase name="[SynchronizedBeforeSuite]" status="passed"></testcase>
<testcase name="[It] [sig-network] Services should fallback (a) when x=Local" status="passed"></testcase>
<testcase name="[It] [sig-network] Services should fallback to b" status="skipped"><skipped message="skipped"></skipped></testcase>
<testcase name="[It] [sig-network] Services should serve" status="passed"></testcase>
</testsuite></testsuites>`
	if err := os.WriteFile(junit, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command("python3", "report.py", "--names", junit, "should fallback").Output()
	if err != nil {
		t.Fatalf("report.py --names: %v", err)
	}
	if got, want := strings.TrimSpace(string(b)), `\[sig-network\] Services should fallback \(a\) when x=Local`; got != want {
		t.Errorf("--names printed %q, want %q", got, want)
	}
}
