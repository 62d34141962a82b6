// Package metricsdoc lists every metric family the daemon serves on /metrics, read
// off the registry the way a scrape would see it, and renders the metrics reference
// of docs/OPERATIONS.md from it. The doc test (hack/update-metrics-doc.sh rewrites
// the reference) and the monitoring rules' test (deploy/monitoring) both check
// against Served, so neither can name a metric, a label or a help text the daemon
// does not serve.
package metricsdoc

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientmetrics "k8s.io/client-go/tools/metrics"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	// The daemon's command: every metric its packages register when they are
	// linked in (client-go's rest_client_*, kubernetes_build_info,
	// kubernetes_feature_enabled, ...) is registered here the same way.
	_ "github.com/kube-proxy-ipvs/kube-proxy-ipvs/cmd/kube-proxy/app"
	proxymetrics "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
)

// Family is one metric family as /metrics serves it.
type Family struct {
	Name string
	// Type is the exposition's TYPE: counter, gauge, histogram, summary or untyped.
	Type string
	// Help is the HELP text as served (component-base prefixes a stability level:
	// "[ALPHA] ", "[BETA] ").
	Help string
	// Labels are the family's label names, sorted, without the "le" of a histogram's
	// buckets and the "quantile" of a summary.
	Labels []string
	// Optional names the flag that makes the daemon serve the family ("" when it is
	// always registered).
	Optional string
}

// VirtualServerMetricsFlag is the flag under which the daemon registers the
// per-virtual-server counters.
const VirtualServerMetricsFlag = "--ipvs-virtual-server-metrics"

var (
	servedOnce     sync.Once
	servedFamilies []Family
	servedErr      error
)

// Served registers the metrics as the daemon does (the metrics server's mux, and the
// per-virtual-server counters of --ipvs-virtual-server-metrics) in this process's
// legacyregistry and returns every family it serves, sorted by name. It registers
// once per process; later calls return the same list.
func Served() ([]Family, error) {
	servedOnce.Do(func() { servedFamilies, servedErr = served() })
	return slices.Clone(servedFamilies), servedErr
}

func served() ([]Family, error) {
	// What the daemon's metrics server does before it serves (run.go).
	_ = proxymetrics.NewMetricsMux("ipvs", false, nil)
	// What building the daemon's API client does: client-go registers its
	// rest_client_* metrics at the first client's construction.
	clientmetrics.EnsureRegistered()
	always, err := describeRegistry()
	if err != nil {
		return nil, err
	}
	// What --ipvs-virtual-server-metrics adds (server.go). One virtual server, so the
	// families show in a scrape.
	err = proxymetrics.RegisterVirtualServerStats(func() []proxymetrics.VirtualServerStats {
		return []proxymetrics.VirtualServerStats{{Namespace: "default", Service: "web", Protocol: "TCP", Address: "10.96.0.10", Port: 80, Scheduler: "rr"}}
	})
	if err != nil {
		// Also when something registered them first: which families the flag adds
		// could not be told apart.
		return nil, err
	}
	all, err := describeRegistry()
	if err != nil {
		return nil, err
	}
	gathered, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering the registry: %w", err)
	}
	byName := make(map[string]*dto.MetricFamily, len(gathered))
	for _, mf := range gathered {
		byName[mf.GetName()] = mf
	}

	out := make([]Family, 0, len(all))
	for _, d := range all {
		f := Family{Name: d.name, Help: d.help, Labels: d.labels}
		if _, ok := always[d.name]; !ok {
			f.Optional = VirtualServerMetricsFlag
		}
		if mf, ok := byName[d.name]; ok {
			f.Type = strings.ToLower(mf.GetType().String())
			if err := checkGathered(f, mf); err != nil {
				return nil, err
			}
		} else if f.Type, err = typeOfRegistered(d.desc); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	for name := range byName {
		if _, ok := all[name]; !ok {
			return nil, fmt.Errorf("%s: served but described by no registered collector", name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// described is one descriptor of the registry, decoded.
type described struct {
	name, help string
	labels     []string
	desc       *prometheus.Desc
}

// describeRegistry walks the descriptors of every collector registered in
// legacyregistry (the registry /metrics serves).
func describeRegistry() (map[string]described, error) {
	reg, ok := legacyregistry.Registerer().(*prometheus.Registry)
	if !ok {
		return nil, fmt.Errorf("legacyregistry's registerer is a %T, not a *prometheus.Registry", legacyregistry.Registerer())
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	out := map[string]described{}
	var errs []error
	for desc := range ch {
		d, err := decodeDesc(desc.String())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.desc = desc
		if prev, dup := out[d.name]; dup && (prev.help != d.help || !slices.Equal(prev.labels, d.labels)) {
			errs = append(errs, fmt.Errorf("%s: described twice, differently", d.name))
		}
		out[d.name] = d
	}
	return out, errors.Join(errs...)
}

// decodeDesc reads client_golang's Desc.String():
//
//	Desc{fqName: "name", help: "help", unit: "", constLabels: {a="1"}, variableLabels: {b,c(d)}}
//
// (c(d) marks a constrained label d). Desc has no accessors; anything else is an error,
// so a change of that format stops the generator rather than mislead it.
func decodeDesc(s string) (described, error) {
	var d described
	rest, ok := strings.CutPrefix(s, "Desc{fqName: ")
	if !ok {
		return d, fmt.Errorf("unexpected descriptor %q", s)
	}
	var err error
	if d.name, rest, err = quoted(rest, ", help: "); err == nil {
		d.help, rest, err = quoted(rest, ", unit: ")
	}
	if err == nil {
		_, rest, err = quoted(rest, ", constLabels: {")
	}
	if err != nil {
		return d, fmt.Errorf("descriptor %q: %w", s, err)
	}
	// Constant labels: name="value" pairs, comma-separated.
	for !strings.HasPrefix(rest, "}") {
		name, after, found := strings.Cut(rest, "=")
		if !found {
			return d, fmt.Errorf("descriptor %q: constant labels", s)
		}
		d.labels = append(d.labels, name)
		if _, rest, err = quoted(after, ""); err != nil {
			return d, fmt.Errorf("descriptor %q: constant label %s: %w", s, name, err)
		}
		rest = strings.TrimPrefix(rest, ",")
	}
	variable, ok := strings.CutPrefix(rest, "}, variableLabels: {")
	if !ok {
		return d, fmt.Errorf("descriptor %q: no variableLabels", s)
	}
	variable, ok = strings.CutSuffix(variable, "}}")
	if !ok {
		return d, fmt.Errorf("descriptor %q: unterminated", s)
	}
	if variable != "" {
		for _, l := range strings.Split(variable, ",") {
			if c, ok := strings.CutPrefix(l, "c("); ok {
				l = strings.TrimSuffix(c, ")")
			}
			d.labels = append(d.labels, l)
		}
	}
	sort.Strings(d.labels)
	if d.name == "" {
		return d, fmt.Errorf("descriptor %q: empty name", s)
	}
	return d, nil
}

// quoted reads one Go-quoted string at the start of s, then the separator sep.
func quoted(s, sep string) (value, rest string, err error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	if value, err = strconv.Unquote(q); err != nil {
		return "", "", err
	}
	rest, ok := strings.CutPrefix(s[len(q):], sep)
	if !ok {
		return "", "", fmt.Errorf("want %q after %s", sep, q)
	}
	return value, rest, nil
}

// checkGathered checks what a scrape shows against the descriptor: every series has
// exactly the described labels.
func checkGathered(f Family, mf *dto.MetricFamily) error {
	if mf.GetHelp() != f.Help {
		return fmt.Errorf("%s: served help %q, described %q", f.Name, mf.GetHelp(), f.Help)
	}
	for _, m := range mf.GetMetric() {
		var got []string
		for _, lp := range m.GetLabel() {
			got = append(got, lp.GetName())
		}
		sort.Strings(got)
		if !slices.Equal(got, f.Labels) {
			return fmt.Errorf("%s: a series has labels %v, described %v", f.Name, got, f.Labels)
		}
	}
	return nil
}

// singleDesc is a collector of one descriptor, used to find which registered
// collector owns that descriptor.
type singleDesc struct{ desc *prometheus.Desc }

func (c singleDesc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (singleDesc) Collect(chan<- prometheus.Metric)      {}

// typeOfRegistered returns the type of a family that has no series yet (a vector
// none of whose children exists, e.g. rest_client_* before the first request): the
// registry answers a second registration of the same descriptor with the collector
// registered first, whose Go type says what it exposes.
func typeOfRegistered(desc *prometheus.Desc) (string, error) {
	reg := legacyregistry.Registerer()
	err := reg.Register(singleDesc{desc})
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		if err == nil {
			reg.Unregister(singleDesc{desc})
		}
		return "", fmt.Errorf("%s: no series, and no single collector owns it (%v)", desc, err)
	}
	// Only vectors can be registered and have no series; plain metrics always have one.
	switch are.ExistingCollector.(type) {
	case *k8smetrics.CounterVec, *prometheus.CounterVec:
		return "counter", nil
	case *k8smetrics.GaugeVec, *prometheus.GaugeVec:
		return "gauge", nil
	case *k8smetrics.HistogramVec, *k8smetrics.TimingHistogramVec, *prometheus.HistogramVec:
		return "histogram", nil
	case *prometheus.SummaryVec:
		return "summary", nil
	}
	return "", fmt.Errorf("%s: no series, and its collector %T has no known type", desc, are.ExistingCollector)
}
