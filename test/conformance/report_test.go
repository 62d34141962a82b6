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

// TestReport renders testdata/report (two columns with junit reports, a third
// without) and checks what the page says: totals per column, only the spec
// whose result differs, the failure's first line, the skip list's reason and
// the suite's own skip message with its columns, and a spec outside the focus
// left out.
func TestReport(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed to render the conformance page (hack/install-deps.sh installs it)")
	}
	out := t.TempDir()
	if err := os.CopyFS(out, os.DirFS("testdata/report")); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(out, "CONFORMANCE.md")
	cmd := exec.Command("python3", "report.py", out, "--doc", doc)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("report.py: %v\n%s", err, b)
	}
	page, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	section := func(name string) string {
		_, after, ok := strings.Cut(text, "## "+name+"\n")
		if !ok {
			t.Fatalf("no section %q in:\n%s", name, text)
		}
		body, _, _ := strings.Cut(after, "\n## ")
		return body
	}
	const (
		restart = "[sig-network] Services should work after restarting kube-proxy [Disruptive]"
		basic   = "[sig-network] Services should serve a basic endpoint from pods [Conformance]"
	)
	for _, want := range []string{
		"| upstream-ipvs | 1 | 1 | 2 | 3900 s |",
		"| ours-iptables | 2 | 0 | 2 | 3800 s |",
		"| ours-nftables | no report | | | ? s |",
	} {
		if !strings.Contains(section("Totals"), want) {
			t.Errorf("Totals lacks %q:\n%s", want, section("Totals"))
		}
	}
	differ := section("Where the columns differ")
	if !strings.Contains(differ, "| "+restart+" | fail 300s | pass 120s | no report |") || strings.Contains(differ, basic) {
		t.Errorf("differences: want only the restart spec (fail upstream, pass ours):\n%s", differ)
	}
	if want := "- upstream-ipvs, " + restart + ": [FAILED] service web \\| not reachable after restart\n"; !strings.Contains(section("Failures"), want) {
		t.Errorf("Failures lacks %q:\n%s", want, section("Failures"))
	}
	skips := section("Skipped, and why")
	for _, want := range []string{
		"- `Internet connection`: the cluster has no route to the Internet",
		"- Only supported for providers [gce] (not skeleton)\n  - [sig-network] Services should be rejected for evicted pods [Provider:gce] (upstream-ipvs, ours-iptables)",
	} {
		if !strings.Contains(skips, want) {
			t.Errorf("skips lack %q:\n%s", want, skips)
		}
	}
	if strings.Contains(skips, "Internet connection for containers") {
		t.Errorf("a spec skipped by skip.txt is listed again under the suite's own skips:\n%s", skips)
	}
	if strings.Contains(text, "sig-apps") {
		t.Errorf("a spec outside the focus is on the page")
	}
	if !strings.HasPrefix(text, "# Conformance") || !strings.Contains(text, "- command: `make conformance`") {
		t.Errorf("the page's heading or command line is missing:\n%s", text[:200])
	}
	results, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil || !strings.HasSuffix(text, string(results)) {
		t.Errorf("OUT/results.md is not the page without its heading (err %v)", err)
	}
}
