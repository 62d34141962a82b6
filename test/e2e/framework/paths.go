// Package framework is the host side of the end-to-end testbed: a real etcd and
// kube-apiserver on 127.0.0.1, a qemu VM (Debian's kernel, with IPVS) driven
// through the e2e-agent control channel, and helpers to create pods (network
// namespaces on a bridge in the VM), Services and EndpointSlices, and to run
// our kube-proxy in the VM exactly as in production.
package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RepoRoot returns the root of the kube-proxy-ipvs checkout, found by walking
// up from the working directory to the go.mod of the main module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/kube-proxy-ipvs/kube-proxy-ipvs\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no kube-proxy-ipvs go.mod above the working directory")
		}
		dir = parent
	}
}

// Logf is where the framework reports progress (testing.T.Logf, log.Printf...).
type Logf func(format string, args ...any)
