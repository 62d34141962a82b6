// Command kube-proxy is upstream's kube-proxy (v1.37.2, the version of the
// k8s.io/kubernetes module), built from Go modules so the end-to-end tests and
// the benchmarks can run it next to ours: migration in both directions, and
// side-by-side scale figures. It is never shipped.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
