// Command kube-apiserver is the upstream API server, built from Go modules so
// the end-to-end tests can run a real control plane without downloading a
// release binary.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
