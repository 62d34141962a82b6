package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
)

// image is one platform of a layout as the checks read it back.
type image struct {
	platform ociPlatform
	config   imageConfig
	layer    []byte // gzipped
}

// readLayout reads an OCI image layout archive and checks its structure: the
// oci-layout file, index.json naming one image index by ref.name, every
// descriptor's digest and size equal to its blob's, each config's diff ID the
// digest of its uncompressed layer, and no blob that nothing references. It
// returns the images by architecture and the ref name.
func readLayout(t *testing.T, path string) (map[string]image, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", got)
	}
	used := map[string]bool{}
	blob := func(d descriptor, mediaType string) []byte {
		t.Helper()
		if d.MediaType != mediaType {
			t.Errorf("%s: media type %s, want %s", d.Digest, d.MediaType, mediaType)
		}
		name := "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
		data, ok := files[name]
		if !ok {
			t.Fatalf("no blob %s", name)
		}
		sum := sha256.Sum256(data)
		if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(data)) != d.Size {
			t.Errorf("blob %s: %d bytes, digest %x; descriptor says %d bytes", d.Digest, len(data), sum, d.Size)
		}
		used[name] = true
		return data
	}
	var top, idx index
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if top.SchemaVersion != 2 || top.MediaType != mediaTypeIndex || len(top.Manifests) != 1 {
		t.Fatalf("index.json = %+v, want one image index", top)
	}
	ref := top.Manifests[0].Annotations[annotationRefName]
	if err := json.Unmarshal(blob(top.Manifests[0], mediaTypeIndex), &idx); err != nil {
		t.Fatal(err)
	}
	images := map[string]image{}
	for _, md := range idx.Manifests {
		if md.Platform == nil || md.Platform.OS != "linux" {
			t.Fatalf("manifest %s: platform %+v", md.Digest, md.Platform)
		}
		var m manifest
		if err := json.Unmarshal(blob(md, mediaTypeManifest), &m); err != nil {
			t.Fatal(err)
		}
		var img image
		img.platform = *md.Platform
		if err := json.Unmarshal(blob(m.Config, mediaTypeConfig), &img.config); err != nil {
			t.Fatal(err)
		}
		if len(m.Layers) != 1 || len(img.config.RootFS.DiffIDs) != 1 {
			t.Fatalf("%s: %d layers, %d diff IDs; want one", md.Platform.Architecture, len(m.Layers), len(img.config.RootFS.DiffIDs))
		}
		img.layer = blob(m.Layers[0], mediaTypeLayer)
		zr, err := gzip.NewReader(bytes.NewReader(img.layer))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, zr); err != nil {
			t.Fatal(err)
		}
		if diffID := "sha256:" + hex.EncodeToString(h.Sum(nil)); diffID != img.config.RootFS.DiffIDs[0] {
			t.Errorf("%s: diff ID %s, the layer uncompressed is %s", md.Platform.Architecture, img.config.RootFS.DiffIDs[0], diffID)
		}
		if c := img.config; c.Architecture != md.Platform.Architecture || c.OS != "linux" || c.Variant != md.Platform.Variant {
			t.Errorf("config platform %s/%s/%s, index says %+v", c.OS, c.Architecture, c.Variant, *md.Platform)
		}
		if _, dup := images[md.Platform.Architecture]; dup {
			t.Errorf("two manifests for %s", md.Platform.Architecture)
		}
		images[md.Platform.Architecture] = img
	}
	for name := range files {
		if strings.HasPrefix(name, "blobs/") && !used[name] {
			t.Errorf("blob %s is referenced by nothing", name)
		}
	}
	return images, ref
}

// layerFiles calls fn for every entry of a gzipped layer.
func layerFiles(t *testing.T, layer []byte, fn func(h *tar.Header, r io.Reader)) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(h, tr)
	}
}
