package monitoring

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	rulesFile     = "kube-proxy-ipvs.rules.yaml"
	dashboardFile = "kube-proxy-ipvs.dashboard.json"
)

func loadCatalog(t *testing.T) catalog {
	t.Helper()
	c, err := newCatalog()
	if err != nil {
		t.Fatalf("reading what the daemon registers: %v", err)
	}
	return c
}

// templateLabel finds {{ $labels.NAME }} in alert templates and {{NAME}} in legends.
var (
	templateLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	legendLabel   = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// TestAlertRules loads the rule file with Prometheus' own rule file parser (which
// parses every expression and template) and checks every metric and label it names
// against what the daemon serves.
func TestAlertRules(t *testing.T) {
	c := loadCatalog(t)
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if len(errs) > 0 {
		return
	}
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				t.Errorf("group %s: recording rule %s: this file holds alerts only", g.Name, r.Record)
				continue
			}
			if alerts[name] {
				t.Errorf("%s: defined twice", name)
			}
			alerts[name] = true
			result, err := c.check(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if r.For == 0 {
				t.Errorf("%s: no `for`: one bad scrape would page", name)
			}
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" && sev != "info" {
				t.Errorf("%s: severity %q, want critical, warning or info", name, sev)
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", name, a)
				}
			}
			for key, text := range r.Annotations {
				for _, m := range templateLabel.FindAllStringSubmatch(text, -1) {
					if !result[m[1]] {
						t.Errorf("%s: annotation %s uses $labels.%s, which its expression's result does not carry (%s)", name, key, m[1], result)
					}
				}
			}
		}
	}
	// What issue 29 asks the rules to cover: a rename must not silently drop one.
	for _, want := range []string{
		"KubeProxyIPVSDown", "KubeProxyIPVSTargetDown", "KubeProxyIPVSSyncStalled", "KubeProxyIPVSChangesNotProgrammed",
		"KubeProxyIPVSSyncFailing", "KubeProxyIPVSKernelRefusedObjects", "KubeProxyIPVSDriftRepaired", "KubeProxyIPVSSyncLatencyHigh",
	} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// grafanaVariables are Grafana's built-in variables, replaced by what Grafana would
// put in their place before the expression is parsed.
var grafanaVariables = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "6h",
}

// leftoverVariable is a Grafana variable reference ($name or ${name}); label_replace's
// $1 is not one.
var leftoverVariable = regexp.MustCompile(`\$\{?[a-zA-Z_]`)

// expand replaces the dashboard's own variables (used only inside label matcher
// strings, where any text parses) and Grafana's built-in ones. A variable the
// dashboard does not define is an error; one used outside a string makes the
// expression fail to parse.
func expand(expr string, vars []string) (string, error) {
	for name, value := range grafanaVariables {
		expr = strings.ReplaceAll(expr, "${"+name+"}", value)
		expr = strings.ReplaceAll(expr, "$"+name, value)
	}
	for _, name := range vars {
		expr = strings.ReplaceAll(expr, "${"+name+"}", "value-of-"+name)
		expr = strings.ReplaceAll(expr, "$"+name, "value-of-"+name)
	}
	if v := leftoverVariable.FindString(expr); v != "" {
		return "", fmt.Errorf("%s: variable %s... is not defined by the dashboard", expr, v)
	}
	return expr, nil
}

// checkDashboardExpr expands expr's variables and checks it.
func (c catalog) checkDashboardExpr(expr string, vars []string) (labelSet, error) {
	expanded, err := expand(expr, vars)
	if err != nil {
		return nil, err
	}
	return c.check(expanded)
}

type dashboard struct {
	Title      string
	Templating struct {
		List []struct {
			Name  string
			Type  string
			Query json.RawMessage
		}
	}
	Panels []panel
}

type panel struct {
	Type    string
	Title   string
	Targets []struct {
		Expr         string
		LegendFormat string
	}
	Panels []panel // a collapsed row's panels
}

// labelValuesQuery is Grafana's label_values(SELECTOR, LABEL) variable query.
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// TestDashboard parses every query of the dashboard (panel targets and variable
// queries) with Prometheus' parser and checks every metric and label it names, the
// labels its legend uses included, against what the daemon serves.
func TestDashboard(t *testing.T) {
	c := loadCatalog(t)
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	checked := 0
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var query string
		var withField struct{ Query string }
		if err := json.Unmarshal(v.Query, &query); err != nil {
			if err := json.Unmarshal(v.Query, &withField); err != nil {
				t.Errorf("variable %s: query is neither a string nor {\"query\": ...}: %s", v.Name, v.Query)
				continue
			}
			query = withField.Query
		}
		m := labelValuesQuery.FindStringSubmatch(query)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, query)
			continue
		}
		result, err := c.checkDashboardExpr(m[1], vars)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		if !result[m[2]] {
			t.Errorf("variable %s: label %q is not on %s (labels: %s)", v.Name, m[2], m[1], result)
		}
		checked++
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			for _, target := range p.Targets {
				result, err := c.checkDashboardExpr(target.Expr, vars)
				if err != nil {
					t.Errorf("panel %q: %v", p.Title, err)
					continue
				}
				for _, m := range legendLabel.FindAllStringSubmatch(target.LegendFormat, -1) {
					if !result[m[1]] {
						t.Errorf("panel %q: legend %q uses %s, which %q does not carry (%s)", p.Title, target.LegendFormat, m[1], target.Expr, result)
					}
				}
				checked++
			}
		}
	}
	walk(d.Panels)
	if checked < 30 {
		t.Errorf("checked %d queries; the dashboard has more", checked)
	}
	t.Logf("%s: checked %d queries", d.Title, checked)
}

// TestCheckCatches runs the checker on broken expressions: each must be refused, so
// the tests above can fail.
func TestCheckCatches(t *testing.T) {
	c := loadCatalog(t)
	for _, tc := range []struct{ expr, want string }{
		{`rate(kubeproxy_ipvs_sync_failure_total[5m])`, "not a series the daemon serves"},
		{`kubeproxy_ipvs_held_back_objects{reasons="ipvs_error"}`, `label "reasons" does not exist`},
		{`kubeproxy_ipvs_held_back_objects{reason="ipvs_eror"}`, "matches none of the values"},
		{`kubeproxy_ipvs_held_back_objects{reason!="invalid"}`, "excludes a value the daemon never sets"},
		{`kubeproxy_ipvs_syncs_total{type=~"complete|incremental"}`, "matches none of the values"},
		{`sum by (ip_familly) (kubeproxy_ipvs_held_back_objects)`, `label "ip_familly" does not exist`},
		{`histogram_quantile(0.99, sum by (ip_family) (rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket[5m])))`, `label "le" does not exist`},
		{`kubeproxy_sync_proxy_rules_duration_seconds`, "not a series the daemon serves"},               // a histogram has no series of its own name
		{`kubeproxy_ipvs_sync_failures_total_bucket`, "not a series the daemon serves"},                 // nor a counter buckets
		{`kubeproxy_ipvs_drift_repairs_total{le="1"}`, `label "le" does not exist`},                     // le is on _bucket only
		{`kubeproxy_ipvs_syncs_total / on (ip_family) kubeproxy_ipvs_syncs_total`, `label "ip_family"`}, // matching on a label neither side has
		{`{job="kube-proxy"}`, "selects no metric by name"},
		{`sum(rate(kubeproxy_ipvs_syncs_total[5m])`, "parsing"},
		{`vector(1)`, "selects no metric"},
	} {
		_, err := c.check(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check(%s) = %v, want an error containing %q", tc.expr, err, tc.want)
		}
	}
	// And what it must accept.
	for _, expr := range []string{
		`up{job="kube-proxy"} == 0`,
		`histogram_quantile(0.9, sum by (le) (rate(rest_client_request_duration_seconds_bucket[5m])))`,
		`go_gc_duration_seconds{quantile="1"}`,
		`rate(go_gc_duration_seconds_count[5m])`,
		`label_replace(kubeproxy_ipvs_syncs_total, "kind", "$1", "type", "(.*)") * on (kind) group_left () label_replace(kubeproxy_ipvs_syncs_total, "kind", "$1", "type", "(.*)")`,
		`kubeproxy_ipvs_virtual_server_connections_total{scheduler="mh"}`,
	} {
		if _, err := c.check(expr); err != nil {
			t.Errorf("check(%s): %v", expr, err)
		}
	}
}

// TestExpand keeps variables out of the parser's way only where they are strings.
func TestExpand(t *testing.T) {
	vars := []string{"job", "instance"}
	got, err := expand(`rate(x{job=~"$job", instance=~"${instance}"}[$__rate_interval])`, vars)
	if want := `rate(x{job=~"value-of-job", instance=~"value-of-instance"}[5m])`; err != nil || got != want {
		t.Errorf("expand = %s, %v; want %s", got, err, want)
	}
	c := loadCatalog(t)
	for _, expr := range []string{
		`kubeproxy_ipvs_syncs_total offset $job`,        // outside a string
		`kubeproxy_ipvs_syncs_total{job=~"$jbo"}`,       // not defined
		`kubeproxy_ipvs_syncs_total{job=~"${instanc}"}`, // not defined
	} {
		if _, err := c.checkDashboardExpr(expr, vars); err == nil {
			t.Errorf("%s: accepted", expr)
		}
	}
	if _, err := c.checkDashboardExpr(`label_replace(kubeproxy_ipvs_syncs_total{job=~"$job"}, "kind", "$1", "type", "(.*)")`, vars); err != nil {
		t.Errorf("label_replace's $1: %v", err)
	}
}
