// Command kube-proxy is upstream's kube-proxy (v1.37.2, the version of the
// k8s.io/kubernetes module), built from Go modules so the end-to-end tests and
// the benchmarks can run it next to ours: migration in both directions, and
// side-by-side scale figures. It is never shipped. Its imports are those of
// upstream's cmd/kube-proxy/proxy.go, so that its flags (--logging-format=json,
// --log-json-*) and metrics (client-go, version) are the released binary's.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
