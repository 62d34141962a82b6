package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

const testPlan = `from: debian:bookworm-slim
run: apt-get update && apt-get install -y ipset
binary: /usr/local/bin/kube-proxy
entrypoint: /usr/local/bin/kube-proxy 
arg: VERSION=v0.0.0-dev
arg: REVISION
label: org.opencontainers.image.title=kube-proxy-ipvs
label: org.opencontainers.image.version=${VERSION}
label: org.opencontainers.image.revision=$REVISION
source: deb http://deb.debian.org/debian bookworm bookworm-updates main
`

func TestExpandLabels(t *testing.T) {
	p, err := parsePlan(testPlan)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.expandLabels(map[string]string{"REVISION": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"org.opencontainers.image.title":    "kube-proxy-ipvs",
		"org.opencontainers.image.version":  "v0.0.0-dev", // the ARG's default
		"org.opencontainers.image.revision": "abc",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labels = %v, want %v", got, want)
	}
	p.labels = append(p.labels, [2]string{"x", "${NOT_AN_ARG}"})
	if _, err := p.expandLabels(nil); err == nil {
		t.Error("a label using a name that is no ARG expanded without error")
	}
}

// TestWriteLayout writes a layout from two small root filesystems and reads it
// back: structure, platforms, config, and a layer holding the root filesystem
// (mtimes clamped, hard links kept, /dev's contents and the build machine's
// /etc/hostname left out) plus the binary.
func TestWriteLayout(t *testing.T) {
	dir := t.TempDir()
	date := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var plats []platform
	for _, arch := range []string{"amd64", "arm64"} {
		root := filepath.Join(dir, arch)
		for _, d := range []string{"usr/local/bin", "usr/bin", "dev", "etc"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		must(t, os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte(arch), 0o755))
		must(t, os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))
		must(t, os.Symlink("usr/bin", filepath.Join(root, "bin")))
		must(t, os.WriteFile(filepath.Join(root, "dev/null"), nil, 0o644))
		must(t, os.WriteFile(filepath.Join(root, "etc/zzz"), nil, 0o644))
		must(t, os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("build-host\n"), 0o644))
		binary := filepath.Join(dir, "kube-proxy-"+arch)
		must(t, os.WriteFile(binary, []byte("binary-"+arch), 0o644))
		plats = append(plats, platform{arch: arch, rootfs: root, binary: binary})
	}
	p, err := parsePlan(testPlan)
	if err != nil {
		t.Fatal(err)
	}
	labels, err := p.expandLabels(map[string]string{"VERSION": "v1.2.3", "REVISION": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	img := imageSpec{version: "v1.2.3", date: date, entrypoint: p.entrypoint, binaryPath: p.binary, labels: labels, history: p.history()}
	out := filepath.Join(dir, "image.oci.tar")
	if _, err := writeLayout(out, img, plats); err != nil {
		t.Fatal(err)
	}
	images, ref := readLayout(t, out)
	if ref != "v1.2.3" {
		t.Errorf("ref.name = %q", ref)
	}
	if len(images) != 2 || images["arm64"].platform.Variant != "v8" {
		t.Fatalf("platforms: %+v", images)
	}
	for arch, im := range images {
		if !reflect.DeepEqual(im.config.Config.Entrypoint, []string{"/usr/local/bin/kube-proxy"}) || !reflect.DeepEqual(im.config.Config.Labels, labels) {
			t.Errorf("%s: config %+v", arch, im.config.Config)
		}
		var names []string
		layerFiles(t, im.layer, func(h *tar.Header, r io.Reader) {
			names = append(names, h.Name)
			if h.ModTime.After(date) {
				t.Errorf("%s: %s mtime %v after %v", arch, h.Name, h.ModTime, date)
			}
			data, _ := io.ReadAll(r)
			switch h.Name {
			case "usr/bin/tool2":
				if h.Typeflag != tar.TypeLink || h.Linkname != "usr/bin/tool" {
					t.Errorf("%s: tool2 %c -> %s, want a hard link to usr/bin/tool", arch, h.Typeflag, h.Linkname)
				}
			case "usr/local/bin/kube-proxy":
				if string(data) != "binary-"+arch || h.Mode != 0o755 {
					t.Errorf("%s: kube-proxy %q mode %o", arch, data, h.Mode)
				}
			}
		})
		want := []string{"bin", "dev/", "etc/", "etc/zzz", "usr/", "usr/bin/", "usr/bin/tool", "usr/bin/tool2", "usr/local/", "usr/local/bin/", "usr/local/bin/kube-proxy"}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("%s: layer entries\n%q\nwant\n%q", arch, names, want)
		}
	}
	// The same inputs give the same bytes.
	first, _ := os.ReadFile(out)
	if _, err := writeLayout(out, img, plats); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(out); !bytes.Equal(first, second) {
		t.Error("writing the layout twice gave different archives")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
