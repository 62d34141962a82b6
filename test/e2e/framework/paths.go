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

// NewerSource returns the Go source file of the daemon (under cmd/ and pkg/, tests
// left out) changed after the binary bin was built, "" when there is none. The suite
// runs bin as it finds it: a binary older than the tree is not the code under test
// (a scale run measured the wrong commit that way once).
func NewerSource(repoRoot, bin string) (string, error) {
	st, err := os.Stat(bin)
	if err != nil {
		return "", err
	}
	built := st.ModTime()
	var newer string
	for _, dir := range []string{"cmd", "pkg"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || newer != "" {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if info.ModTime().After(built) {
				newer = path
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return newer, nil
}
