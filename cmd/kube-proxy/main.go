// Command kube-proxy is a drop-in replacement for upstream kube-proxy in IPVS mode.
package main

import (
	"os"

	"k8s.io/klog/v2"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/cmd/kube-proxy/app"
)

func main() {
	code := app.Execute(os.Args[1:], os.Stdout, os.Stderr)
	klog.Flush()
	os.Exit(code)
}
