package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// checkedImage is what checkArchive read from an archive.
type checkedImage struct {
	refs   []string          // io.containerd.image.name of each index entry
	config configFile        // the manifest's config
	files  map[string]string // path in the image -> type and content or target, all layers
}

// checkArchive reads an OCI image layout archive the way an importer does and
// checks it: oci-layout, index.json naming linux/amd64 manifests by full
// reference and tag, every descriptor's blob present with the size and sha256
// it claims, the config's diff IDs the sha256 of each uncompressed layer.
// It shares no code with the writer.
func checkArchive(path string) (checkedImage, error) {
	var img checkedImage
	f, err := os.Open(path)
	if err != nil {
		return img, err
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return img, fmt.Errorf("reading the archive: %w", err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return img, fmt.Errorf("%s: entry of type %q in a layout archive", h.Name, h.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return img, err
		}
		if _, dup := entries[h.Name]; dup {
			return img, fmt.Errorf("%s twice in the archive", h.Name)
		}
		entries[h.Name] = data
	}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(entries["oci-layout"], &layout); err != nil || layout.Version != "1.0.0" {
		return img, fmt.Errorf("oci-layout: want imageLayoutVersion 1.0.0, got %q (%v)", entries["oci-layout"], err)
	}
	used := map[string]bool{"oci-layout": true, "index.json": true}
	blobOf := func(d descriptor, mediaType string) ([]byte, error) {
		if d.MediaType != mediaType {
			return nil, fmt.Errorf("%s: media type %q, want %q", d.Digest, d.MediaType, mediaType)
		}
		hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
		if !ok {
			return nil, fmt.Errorf("digest %q is not sha256", d.Digest)
		}
		name := "blobs/sha256/" + hexSum
		data, ok := entries[name]
		if !ok {
			return nil, fmt.Errorf("%s: blob missing", name)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != hexSum {
			return nil, fmt.Errorf("%s: content hashes to %s", name, got)
		}
		if int64(len(data)) != d.Size {
			return nil, fmt.Errorf("%s: %d bytes, descriptor says %d", name, len(data), d.Size)
		}
		used[name] = true
		return data, nil
	}
	var idx indexFile
	if err := json.Unmarshal(entries["index.json"], &idx); err != nil {
		return img, fmt.Errorf("index.json: %v", err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != typeIndex || len(idx.Manifests) == 0 {
		return img, fmt.Errorf("index.json: schemaVersion %d, mediaType %q, %d manifests", idx.SchemaVersion, idx.MediaType, len(idx.Manifests))
	}
	manifestDigest := idx.Manifests[0].Digest
	for _, d := range idx.Manifests {
		if d.Digest != manifestDigest {
			return img, fmt.Errorf("index.json names two manifests (%s, %s): one image per archive", manifestDigest, d.Digest)
		}
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
			return img, fmt.Errorf("index.json: %s has platform %+v, want linux/amd64", d.Digest, d.Platform)
		}
		name := d.Annotations[annotImageName]
		if name == "" || !strings.HasSuffix(name, ":"+d.Annotations[annotRefName]) || d.Annotations[annotRefName] == "" {
			return img, fmt.Errorf("index.json: annotations %v: want %s=REGISTRY/NAME:TAG and %s=TAG", d.Annotations, annotImageName, annotRefName)
		}
		img.refs = append(img.refs, name)
	}
	manData, err := blobOf(idx.Manifests[0], typeManifest)
	if err != nil {
		return img, err
	}
	var man manifestFile
	if err := json.Unmarshal(manData, &man); err != nil {
		return img, fmt.Errorf("manifest: %v", err)
	}
	if man.SchemaVersion != 2 || man.MediaType != typeManifest || len(man.Layers) == 0 {
		return img, fmt.Errorf("manifest: schemaVersion %d, mediaType %q, %d layers", man.SchemaVersion, man.MediaType, len(man.Layers))
	}
	cfgData, err := blobOf(man.Config, typeConfig)
	if err != nil {
		return img, err
	}
	if err := json.Unmarshal(cfgData, &img.config); err != nil {
		return img, fmt.Errorf("config: %v", err)
	}
	if img.config.OS != "linux" || img.config.Architecture != "amd64" || img.config.RootFS.Type != "layers" {
		return img, fmt.Errorf("config: os %q, architecture %q, rootfs type %q", img.config.OS, img.config.Architecture, img.config.RootFS.Type)
	}
	if len(img.config.RootFS.DiffIDs) != len(man.Layers) || len(img.config.History) != len(man.Layers) {
		return img, fmt.Errorf("config: %d diff IDs and %d history entries for %d layers", len(img.config.RootFS.DiffIDs), len(img.config.History), len(man.Layers))
	}
	img.files = map[string]string{}
	for i, l := range man.Layers {
		data, err := blobOf(l, typeLayer)
		if err != nil {
			return img, err
		}
		gz, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return img, fmt.Errorf("layer %d: %v", i, err)
		}
		h := sha256.New()
		ltr := tar.NewReader(io.TeeReader(gz, h))
		for {
			hdr, err := ltr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return img, fmt.Errorf("layer %d: %v", i, err)
			}
			name := "/" + strings.TrimSuffix(hdr.Name, "/")
			switch hdr.Typeflag {
			case tar.TypeDir:
				img.files[name] = fmt.Sprintf("dir %o", hdr.Mode)
			case tar.TypeSymlink:
				img.files[name] = "symlink " + hdr.Linkname
			case tar.TypeLink:
				img.files[name] = "hardlink /" + hdr.Linkname
			case tar.TypeReg:
				content, err := io.ReadAll(ltr)
				if err != nil {
					return img, err
				}
				img.files[name] = fmt.Sprintf("file %o %s", hdr.Mode, content)
			default:
				return img, fmt.Errorf("layer %d: %s has type %q", i, hdr.Name, hdr.Typeflag)
			}
		}
		if _, err := io.Copy(io.Discard, gz); err != nil {
			return img, err
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != img.config.RootFS.DiffIDs[i] {
			return img, fmt.Errorf("layer %d: uncompressed sha256 %s, config's diff ID %s", i, got, img.config.RootFS.DiffIDs[i])
		}
	}
	for name := range entries {
		if !used[name] {
			return img, fmt.Errorf("%s: in the archive but named by no descriptor", name)
		}
	}
	return img, nil
}

func TestWriteArchive(t *testing.T) {
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "dev/pts", "proc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(rootfs, "bin/tool"), "#!/bin/sh\n", 0o755)
	write(filepath.Join(rootfs, "etc/passwd"), "root:x:0:0::/root:/bin/sh\n", 0o644)
	write(filepath.Join(rootfs, "dev/null-placeholder"), "not in the image", 0o644)
	if err := os.Link(filepath.Join(rootfs, "bin/tool"), filepath.Join(rootfs, "bin/tool2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tool", filepath.Join(rootfs, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agnhost")
	write(bin, "ELF", 0o755)

	spec := imageSpec{
		refs:       []string{"registry.k8s.io/e2e-test-images/agnhost:2.66.1", "registry.k8s.io/e2e-test-images/agnhost:latest"},
		rootfs:     rootfs,
		extra:      []entry{{kind: entryFile, path: "/agnhost", src: bin}, {kind: entryLink, path: "/agnhost-2", target: "agnhost"}, {kind: entryDir, path: "/uploads"}, {kind: entryFile, path: "/opt/x/agnhost", src: bin}},
		entrypoint: []string{"/agnhost"},
		cmd:        []string{"pause"},
		ports:      []string{"8080/tcp"},
		created:    time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	out := filepath.Join(dir, "agnhost.oci.tar")
	if _, err := writeArchive(out, spec); err != nil {
		t.Fatal(err)
	}
	img, err := checkArchive(out)
	if err != nil {
		t.Fatalf("checkArchive: %v", err)
	}
	if got, want := strings.Join(img.refs, " "), strings.Join(spec.refs, " "); got != want {
		t.Errorf("references %q, want %q", got, want)
	}
	c := img.config.Config
	if strings.Join(c.Entrypoint, " ") != "/agnhost" || strings.Join(c.Cmd, " ") != "pause" || c.Env[0] != defaultImageEnv {
		t.Errorf("config: entrypoint %q, cmd %q, env %q", c.Entrypoint, c.Cmd, c.Env)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("config: exposed ports %v, want 8080/tcp", c.ExposedPorts)
	}
	if img.config.Created != "2026-01-02T03:04:05Z" {
		t.Errorf("config: created %q", img.config.Created)
	}
	want := map[string]string{
		"/bin":            "dir 755",
		"/bin/tool":       "file 755 #!/bin/sh\n",
		"/bin/tool2":      "hardlink /bin/tool",
		"/bin/sh":         "symlink tool",
		"/etc/passwd":     "file 644 root:x:0:0::/root:/bin/sh\n",
		"/dev":            "dir 755",
		"/proc":           "dir 755",
		"/agnhost":        "file 755 ELF",
		"/agnhost-2":      "symlink agnhost",
		"/uploads":        "dir 755",
		"/opt":            "dir 755",
		"/opt/x":          "dir 755",
		"/opt/x/agnhost":  "file 755 ELF",
		"/etc":            "dir 755",
		"/dev/pts":        "",
		"/dev/null-place": "",
	}
	for name, w := range want {
		got, ok := img.files[name]
		if w == "" {
			if ok {
				t.Errorf("%s is in the image: the runtime mounts /dev", name)
			}
			continue
		}
		if got != w {
			t.Errorf("%s: %q, want %q", name, got, w)
		}
	}
	var names []string
	for n := range img.files {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("image files: %v", names)

	// The same inputs give the same bytes.
	out2 := filepath.Join(dir, "again.oci.tar")
	if _, err := writeArchive(out2, spec); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(out2)
	if !bytes.Equal(a, b) {
		t.Errorf("two writes of the same image differ (%d and %d bytes)", len(a), len(b))
	}
}

func TestCheckArchiveCatchesACorruptBlob(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")
	if err := os.WriteFile(bin, []byte("pause binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pause.oci.tar")
	if _, err := writeArchive(out, imageSpec{refs: []string{"registry.k8s.io/pause:3.10.2"}, extra: []entry{{kind: entryFile, path: "/pause", src: bin}}, created: time.Unix(0, 0).UTC()}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Flip one byte of the (in-memory JSON) config blob's content: its digest
	// no longer matches.
	i := bytes.Index(data, []byte(`"os":"linux","config":`))
	if i < 0 {
		t.Fatal("config not found in the archive")
	}
	data[i+len(`"os":"`)] = 'L'
	bad := filepath.Join(dir, "bad.oci.tar")
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkArchive(bad); err == nil || !strings.Contains(err.Error(), "hashes to") {
		t.Fatalf("checkArchive of a corrupt config: %v, want a digest mismatch", err)
	}
}

func TestRefTag(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/pause:3.10.2":                   "3.10.2",
		"registry.k8s.io/e2e-test-images/agnhost:2.66.1": "2.66.1",
		"localhost/kube-proxy-ipvs:dev":                  "dev",
		"localhost:5000/x:1":                             "1",
		"pause:3.10.2":                                   "",
		"registry.k8s.io/pause":                          "",
		"registry.k8s.io/pause@sha256:abc":               "",
		"docker.io/library/busybox:":                     "",
	} {
		got, err := refTag(ref)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("refTag(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
}
