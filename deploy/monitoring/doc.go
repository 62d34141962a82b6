// Package monitoring holds the Prometheus alerting rules (kube-proxy-ipvs.rules.yaml)
// and the Grafana dashboard (kube-proxy-ipvs.dashboard.json) for kube-proxy-ipvs,
// and the tests that check them against what the daemon serves.
//
// It is a Go module of its own because the checks use Prometheus' own PromQL and
// rule file parsers (github.com/prometheus/prometheus), a dependency the daemon
// must not carry; go.mod replaces the daemon's module with this repository.
package monitoring
