// Renders what `kubeadm init phase addon kube-proxy --print-manifest` prints
// for a kubeadm config read from stdin, using kubeadm's own code.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/kubernetes/cmd/kubeadm/app/phases/addons/proxy"
	configutil "k8s.io/kubernetes/cmd/kubeadm/app/util/config"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg, err := configutil.BytesToInitConfiguration(in, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := proxy.EnsureProxyAddon(&cfg.ClusterConfiguration, &cfg.LocalAPIEndpoint, nil, "", os.Stdout, true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
