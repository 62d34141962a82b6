package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBuiltImages checks what test/conformance/build.sh wrote: every line of
// DIR/images/index.tsv names an archive that exists, reads back whole
// (checkArchive) and carries that reference, and every archive in the folder
// is listed. DIR is KPI_CONFORMANCE_DIR, or else the folder build.sh uses for
// this checkout's tools module (k8s-VERSION-SUM under
// ${KPI_CACHE:-/var/cache/kube-proxy-ipvs}/conformance). With no build there
// it skips and says how to make one.
func TestBuiltImages(t *testing.T) {
	dir := os.Getenv("KPI_CONFORMANCE_DIR")
	if dir == "" {
		var err error
		if dir, err = buildDir(); err != nil {
			t.Fatal(err)
		}
	}
	indexes := []string{filepath.Join(dir, "images", "index.tsv")}
	if _, err := os.Stat(indexes[0]); err != nil {
		t.Skipf("NOT CHECKED: no conformance images at %s; run test/conformance/build.sh "+
			"(or set KPI_CONFORMANCE_DIR to its output) to check the archives", dir)
	}
	for _, index := range indexes {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(index))), func(t *testing.T) {
			data, err := os.ReadFile(index)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Dir(index)
			refsOf := map[string][]string{}
			for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				ref, name, ok := strings.Cut(line, "\t")
				if !ok || ref == "" || strings.Contains(name, "/") || !strings.HasSuffix(name, ".oci.tar") {
					t.Errorf("%s:%d: %q: want REFERENCE<TAB>NAME.oci.tar", index, i+1, line)
					continue
				}
				refsOf[name] = append(refsOf[name], ref)
			}
			archives, _ := filepath.Glob(filepath.Join(dir, "*.oci.tar"))
			for _, a := range archives {
				if _, ok := refsOf[filepath.Base(a)]; !ok {
					t.Errorf("%s is not in %s", a, index)
				}
			}
			for name, refs := range refsOf {
				img, err := checkArchive(filepath.Join(dir, name))
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				for _, r := range refs {
					if !slices.Contains(img.refs, r) {
						t.Errorf("%s: index.tsv lists %s, the archive names %v", name, r, img.refs)
					}
				}
				run := append(img.config.Config.Entrypoint, img.config.Config.Cmd...)
				if len(run) == 0 {
					t.Errorf("%s: neither entrypoint nor cmd", name)
				} else if !inImage(img, run[0]) {
					t.Errorf("%s: %s (what the image runs) is not in the image", name, run[0])
				}
				t.Logf("%s: %v, %d layers, %d files", name, img.refs, len(img.config.RootFS.DiffIDs), len(img.files))
			}
		})
	}
}

// buildDir is the folder test/conformance/build.sh prints for this checkout:
// the kubernetes version the tools module requires and the first 12 hex
// digits of the sha256 of its go.mod and go.sum.
func buildDir() (string, error) {
	tools := filepath.Join("..", "..", "tools")
	mod, err := os.ReadFile(filepath.Join(tools, "go.mod"))
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(tools, "go.sum"))
	if err != nil {
		return "", err
	}
	version := ""
	for _, line := range strings.Split(string(mod), "\n") {
		// "require k8s.io/kubernetes V" or, in a require block, "k8s.io/kubernetes V"
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "require" {
			f = f[1:]
		}
		if version == "" && len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			version = f[1]
		}
	}
	if version == "" {
		return "", fmt.Errorf("%s/go.mod: no k8s.io/kubernetes requirement", tools)
	}
	h := sha256.Sum256(append(mod, sum...))
	cache := os.Getenv("KPI_CACHE")
	if cache == "" {
		cache = "/var/cache/kube-proxy-ipvs"
	}
	return filepath.Join(cache, "conformance", "k8s-"+version+"-"+hex.EncodeToString(h[:])[:12]), nil
}

// inImage tells whether the image has the program prog: an absolute path, or
// a name looked up in the config's PATH, following symbolic links.
func inImage(img checkedImage, prog string) bool {
	var candidates []string
	if strings.HasPrefix(prog, "/") {
		candidates = []string{prog}
	} else {
		for _, e := range img.config.Config.Env {
			if p, ok := strings.CutPrefix(e, "PATH="); ok {
				for _, d := range strings.Split(p, ":") {
					candidates = append(candidates, d+"/"+prog)
				}
			}
		}
	}
	for _, c := range candidates {
		for hops := 0; hops < 10; hops++ {
			f, ok := img.files[c]
			if !ok {
				break
			}
			target, isLink := strings.CutPrefix(f, "symlink ")
			if !isLink {
				return strings.HasPrefix(f, "file ") || strings.HasPrefix(f, "hardlink ")
			}
			if !strings.HasPrefix(target, "/") {
				target = filepath.Join(filepath.Dir(c), target)
			}
			c = target
		}
	}
	return false
}
