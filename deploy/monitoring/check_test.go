package monitoring

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/hack/metricsdoc"
	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// scrapeLabels are the labels Prometheus adds to every series it scrapes (its
// target labels); relabelling may add others, which these files do not use.
var scrapeLabels = []string{"job", "instance"}

// labelValues are the values some labels can take, where the daemon fixes them: an
// equality matcher must name one, a regular expression must match one.
var labelValues = map[string][]string{
	"ip_family": {"IPv4", "IPv6"},
	"type":      {proxymetrics.SyncTypeFull, proxymetrics.SyncTypePartial},
	"subsystem": {proxymetrics.SubsystemIPVS, proxymetrics.SubsystemIPSet, proxymetrics.SubsystemIPTables,
		proxymetrics.SubsystemNetlink, proxymetrics.SubsystemNFTables, proxymetrics.SubsystemConntrack, proxymetrics.SubsystemSysctl},
	"traffic_policy": {proxymetrics.TrafficPolicyInternal, proxymetrics.TrafficPolicyExternal},
	// pkg/proxy/ipvs's heldBackReasons (unexported there); the help of
	// kubeproxy_ipvs_held_back_objects and docs/OPERATIONS.md name the same.
	"reason": {"invalid_value", "ipvs_error", "ipset_error", "address_error", "iptables_error", "nftables_error"},
}

// labelSet is the label names an expression's result (or a metric) may carry.
type labelSet map[string]bool

func newLabelSet(names ...string) labelSet {
	s := labelSet{}
	for _, n := range names {
		s[n] = true
	}
	return s
}

func (s labelSet) String() string {
	names := slices.Collect(maps.Keys(s))
	sort.Strings(names)
	return "{" + strings.Join(names, ", ") + "}"
}

// catalog answers which series names the daemon serves and with which labels.
type catalog map[string]metricsdoc.Family

func newCatalog() (catalog, error) {
	families, err := metricsdoc.Served()
	if err != nil {
		return nil, err
	}
	c := catalog{}
	for _, f := range families {
		c[f.Name] = f
	}
	return c, nil
}

// seriesLabels returns the labels a series called name carries once scraped: a
// family's own name (counters, gauges, a summary's quantiles) or a histogram's
// _bucket, _sum and _count series; and `up`, which Prometheus writes for every target.
func (c catalog) seriesLabels(name string) (labelSet, error) {
	if name == "up" {
		return newLabelSet(scrapeLabels...), nil
	}
	if f, ok := c[name]; ok && f.Type != "histogram" {
		s := newLabelSet(append(slices.Clone(f.Labels), scrapeLabels...)...)
		if f.Type == "summary" {
			s["quantile"] = true
		}
		return s, nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f, ok := c[base]; ok && (f.Type == "histogram" || (f.Type == "summary" && suffix != "_bucket")) {
			s := newLabelSet(append(slices.Clone(f.Labels), scrapeLabels...)...)
			if suffix == "_bucket" {
				s["le"] = true
			}
			return s, nil
		}
	}
	return nil, fmt.Errorf("%s is not a series the daemon serves", name)
}

// check parses expr with Prometheus' parser and checks every selector and label
// name in it against the catalog. It returns the labels the expression's result
// may carry.
func (c catalog) check(expr string) (labelSet, error) {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parsing %q: %w", expr, err)
	}
	w := &walker{c: c}
	out := w.labels(node)
	if w.selectors == 0 {
		w.errs = append(w.errs, errors.New("selects no metric"))
	}
	if err := errors.Join(w.errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	return out, nil
}

type walker struct {
	c         catalog
	errs      []error
	selectors int
}

func (w *walker) fail(format string, args ...any) {
	w.errs = append(w.errs, fmt.Errorf(format, args...))
}

// require records an error for every name not in have.
func (w *walker) require(have labelSet, what string, names ...string) {
	for _, n := range names {
		if !have[n] {
			w.fail("%s: label %q does not exist there (labels: %s)", what, n, have)
		}
	}
}

// labels returns the label names the result of node may carry, recording an error
// for every metric, label or label value it names that the daemon does not serve.
func (w *walker) labels(node parser.Node) labelSet {
	switch n := node.(type) {
	case *parser.VectorSelector:
		return w.selector(n)
	case *parser.MatrixSelector:
		return w.labels(n.VectorSelector)
	case *parser.SubqueryExpr:
		return w.labels(n.Expr)
	case *parser.ParenExpr:
		return w.labels(n.Expr)
	case *parser.UnaryExpr:
		return w.labels(n.Expr)
	case *parser.StepInvariantExpr:
		return w.labels(n.Expr)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return labelSet{}
	case *parser.AggregateExpr:
		return w.aggregate(n)
	case *parser.Call:
		return w.call(n)
	case *parser.BinaryExpr:
		return w.binary(n)
	}
	w.fail("unexpected expression %T (%s)", node, node)
	return labelSet{}
}

func (w *walker) selector(vs *parser.VectorSelector) labelSet {
	w.selectors++
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		w.fail("%s: selects no metric by name", vs)
		return labelSet{}
	}
	have, err := w.c.seriesLabels(name)
	if err != nil {
		w.errs = append(w.errs, err)
		return labelSet{}
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		w.require(have, name, m.Name)
		values, fixed := labelValues[m.Name]
		if !fixed {
			continue
		}
		if !slices.ContainsFunc(values, m.Matches) && (m.Type == labels.MatchEqual || m.Type == labels.MatchRegexp) {
			w.fail("%s: %s matches none of the values the daemon sets (%s)", name, m, strings.Join(values, ", "))
		}
		if m.Type == labels.MatchNotEqual && !slices.Contains(values, m.Value) {
			w.fail("%s: %s excludes a value the daemon never sets (%s)", name, m, strings.Join(values, ", "))
		}
	}
	return have
}

func (w *walker) aggregate(a *parser.AggregateExpr) labelSet {
	inner := w.labels(a.Expr)
	if a.Param != nil {
		w.labels(a.Param)
	}
	w.require(inner, a.Op.String()+" by/without", a.Grouping...)
	if a.Without {
		out := maps.Clone(inner)
		for _, g := range a.Grouping {
			delete(out, g)
		}
		return out
	}
	switch a.Op {
	case parser.TOPK, parser.BOTTOMK, parser.LIMITK, parser.LIMIT_RATIO:
		return inner
	case parser.COUNT_VALUES:
		out := newLabelSet(a.Grouping...)
		if s, ok := a.Param.(*parser.StringLiteral); ok {
			out[s.Val] = true
		}
		return out
	}
	return newLabelSet(a.Grouping...)
}

func (w *walker) call(c *parser.Call) labelSet {
	args := make([]labelSet, len(c.Args))
	for i, a := range c.Args {
		args[i] = w.labels(a)
	}
	str := func(i int) string {
		if i < len(c.Args) {
			if s, ok := c.Args[i].(*parser.StringLiteral); ok {
				return s.Val
			}
		}
		return ""
	}
	switch c.Func.Name {
	case "histogram_quantile":
		w.require(args[1], "histogram_quantile", "le")
		out := maps.Clone(args[1])
		delete(out, "le")
		return out
	case "label_replace":
		if src := str(3); src != "" {
			w.require(args[0], "label_replace", src)
		}
		out := maps.Clone(args[0])
		out[str(1)] = true
		return out
	case "label_join":
		for i := 3; i < len(c.Args); i++ {
			w.require(args[0], "label_join", str(i))
		}
		out := maps.Clone(args[0])
		out[str(1)] = true
		return out
	case "absent", "absent_over_time":
		// The result carries the selector's equality matchers.
		out := labelSet{}
		var vs *parser.VectorSelector
		parser.Inspect(c.Args[0], func(n parser.Node, _ []parser.Node) error {
			if v, ok := n.(*parser.VectorSelector); ok && vs == nil {
				vs = v
			}
			return nil
		})
		if vs != nil {
			for _, m := range vs.LabelMatchers {
				if m.Type == labels.MatchEqual && m.Name != model.MetricNameLabel {
					out[m.Name] = true
				}
			}
		}
		return out
	case "time", "vector", "scalar":
		return labelSet{}
	}
	out := labelSet{}
	for _, a := range args {
		maps.Copy(out, a)
	}
	return out
}

func (w *walker) binary(b *parser.BinaryExpr) labelSet {
	l, r := w.labels(b.LHS), w.labels(b.RHS)
	if b.LHS.Type() != parser.ValueTypeVector || b.RHS.Type() != parser.ValueTypeVector {
		// Scalar and vector: the vector's labels.
		if b.LHS.Type() == parser.ValueTypeVector {
			return l
		}
		return r
	}
	m := b.VectorMatching
	if m == nil {
		return l
	}
	if m.On {
		w.require(l, "on (left side)", m.MatchingLabels...)
		w.require(r, "on (right side)", m.MatchingLabels...)
	} else {
		both := maps.Clone(l)
		maps.Copy(both, r)
		w.require(both, "ignoring", m.MatchingLabels...)
	}
	switch b.Op {
	case parser.LAND, parser.LUNLESS:
		return l
	case parser.LOR:
		out := maps.Clone(l)
		maps.Copy(out, r)
		return out
	}
	switch m.Card {
	case parser.CardManyToOne:
		w.require(r, "group_left", m.Include...)
		out := maps.Clone(l)
		maps.Copy(out, newLabelSet(m.Include...))
		return out
	case parser.CardOneToMany:
		w.require(l, "group_right", m.Include...)
		out := maps.Clone(r)
		maps.Copy(out, newLabelSet(m.Include...))
		return out
	}
	if m.On {
		return newLabelSet(m.MatchingLabels...)
	}
	out := maps.Clone(l)
	for _, g := range m.MatchingLabels {
		delete(out, g)
	}
	return out
}
