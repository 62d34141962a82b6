// Command release writes the image of a release as an OCI image layout archive
// and its SPDX SBOM, without Docker or a registry (hack/release.sh runs it):
//
//	go run ./hack/release -version V -revision SHA -created DATE -plan PLAN \
//	    -platform amd64=ROOTFS_ENTRY,BINARY [-platform arm64=...] -out DIR
//
// PLAN is `hack/image-rootfs.sh --plan` of the Dockerfile (its runtime stage's
// ENTRYPOINT, ARGs, LABELs and COPY destination); each ROOTFS_ENTRY is the
// cache entry hack/image-rootfs.sh printed for that architecture (image/ and
// manifest.txt). One layer per architecture: the root filesystem plus BINARY at
// the COPY destination, every mtime clamped to DATE so that the same commit and
// the same root filesystem give the same bytes.
//
// The layout is written with the standard library: it is a tar of JSON
// documents and blobs named by their sha256, and a few hundred lines here cost
// less than a dependency tree in go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type platformFlag []string

func (p *platformFlag) String() string     { return strings.Join(*p, " ") }
func (p *platformFlag) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var (
		version, revision, created, planPath, out string
		platforms                                 platformFlag
	)
	flag.StringVar(&version, "version", "", "release version (hack/version.sh)")
	flag.StringVar(&revision, "revision", "", "commit the release is built from")
	flag.StringVar(&created, "created", "", "the commit's date, RFC 3339 UTC")
	flag.StringVar(&planPath, "plan", "", "output of hack/image-rootfs.sh --plan")
	flag.Var(&platforms, "platform", "ARCH=ROOTFS_ENTRY,BINARY (repeat per architecture)")
	flag.StringVar(&out, "out", "", "release directory")
	flag.Parse()
	if err := run(version, revision, created, planPath, out, platforms); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(version, revision, created, planPath, out string, platformArgs []string) error {
	if version == "" || revision == "" || created == "" || planPath == "" || out == "" || len(platformArgs) == 0 {
		return fmt.Errorf("-version, -revision, -created, -plan, -out and -platform are required")
	}
	date, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	planText, err := os.ReadFile(planPath)
	if err != nil {
		return err
	}
	p, err := parsePlan(string(planText))
	if err != nil {
		return fmt.Errorf("%s: %w", planPath, err)
	}
	labels, err := p.expandLabels(map[string]string{"VERSION": version, "REVISION": revision, "CREATED": created})
	if err != nil {
		return err
	}
	var plats []platform
	for _, a := range platformArgs {
		arch, rest, ok1 := strings.Cut(a, "=")
		entry, binary, ok2 := strings.Cut(rest, ",")
		if !ok1 || !ok2 {
			return fmt.Errorf("-platform %q: want ARCH=ROOTFS_ENTRY,BINARY", a)
		}
		pkgs, err := readManifestPackages(filepath.Join(entry, "manifest.txt"))
		if err != nil {
			return err
		}
		plats = append(plats, platform{arch: arch, rootfs: filepath.Join(entry, "image"), binary: binary, packages: pkgs})
	}
	img := imageSpec{
		version:    version,
		date:       date.UTC(),
		entrypoint: p.entrypoint,
		binaryPath: p.binary,
		labels:     labels,
		history:    p.history(),
		suite:      p.suite(),
	}
	layoutName := "kube-proxy-ipvs-" + version + ".oci.tar"
	indexDigest, err := writeLayout(filepath.Join(out, layoutName), img, plats)
	if err != nil {
		return err
	}
	doc, err := buildSBOM(img, revision, indexDigest, plats)
	if err != nil {
		return err
	}
	return writeJSONFile(filepath.Join(out, "sbom.spdx.json"), doc)
}
