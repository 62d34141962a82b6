package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBuiltImages checks what test/conformance/build.sh wrote: every line of
// DIR/images/index.tsv names an archive that exists, reads back whole
// (checkArchive) and carries that reference, and every archive in the folder
// is listed. DIR is KPI_CONFORMANCE_DIR, or else every build in
// ${KPI_CACHE:-/var/cache/kube-proxy-ipvs}/conformance. With no build there it
// skips and says how to make one.
func TestBuiltImages(t *testing.T) {
	var indexes []string
	if dir := os.Getenv("KPI_CONFORMANCE_DIR"); dir != "" {
		indexes = []string{filepath.Join(dir, "images", "index.tsv")}
	} else {
		cache := os.Getenv("KPI_CACHE")
		if cache == "" {
			cache = "/var/cache/kube-proxy-ipvs"
		}
		indexes, _ = filepath.Glob(filepath.Join(cache, "conformance", "k8s-*", "images", "index.tsv"))
	}
	if len(indexes) == 0 {
		t.Skip("NOT CHECKED: no conformance images built yet; run test/conformance/build.sh " +
			"(or set KPI_CONFORMANCE_DIR to its output) to check the archives")
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
				if len(img.config.Config.Entrypoint) == 0 {
					t.Errorf("%s: no entrypoint", name)
				} else if _, ok := img.files[img.config.Config.Entrypoint[0]]; !ok {
					t.Errorf("%s: entrypoint %s is not in the image", name, img.config.Config.Entrypoint[0])
				}
				t.Logf("%s: %v, %d layers, %d files", name, img.refs, len(img.config.RootFS.DiffIDs), len(img.files))
			}
		})
	}
}
