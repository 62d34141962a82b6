package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// OCI image spec media types (image-spec v1.1).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	annotationRefName = "org.opencontainers.image.ref.name"
)

// debian:SUITE's image config sets this PATH; the runtime stage inherits it.
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

type imageSpec struct {
	version    string
	date       time.Time
	entrypoint []string
	binaryPath string
	labels     map[string]string
	history    string
	suite      string // Debian suite of the base (purl distro)
}

type platform struct {
	arch     string // Debian and OCI agree on amd64 and arm64
	rootfs   string
	binary   string
	packages []debPackage
}

func (p platform) variant() string {
	if p.arch == "arm64" {
		return "v8"
	}
	return ""
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *ociPlatform      `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

type imageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
	Config       struct {
		Env        []string          `json:"Env"`
		Entrypoint []string          `json:"Entrypoint"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// blobStore collects the blobs of the layout in the order they are made; the
// layers live in temporary files (tens of MB each).
type blobStore struct {
	dir   string
	blobs []string // digests, in order
	files map[string]string
}

func (b *blobStore) addBytes(mediaType string, data []byte) (descriptor, error) {
	sum := sha256.Sum256(data)
	d := descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
	path := filepath.Join(b.dir, hex.EncodeToString(sum[:]))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return d, err
	}
	b.add(d.Digest, path)
	return d, nil
}

func (b *blobStore) add(digest, path string) {
	if _, ok := b.files[digest]; ok {
		return
	}
	b.files[digest] = path
	b.blobs = append(b.blobs, digest)
}

// writeLayout writes the OCI image layout archive at path: index.json names
// (ref.name = the version) one image index with a manifest per platform, as
// `docker buildx build --output type=oci` does. It returns the image index's
// digest.
func writeLayout(path string, img imageSpec, plats []platform) (string, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".blobs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	store := &blobStore{dir: tmp, files: map[string]string{}}
	created := img.date.Format(time.RFC3339)

	var manifests []descriptor
	for _, p := range plats {
		layerPath := filepath.Join(tmp, "layer-"+p.arch)
		layer, diffID, err := writeLayer(layerPath, p.rootfs, p.binary, img.binaryPath, img.date)
		if err != nil {
			return "", fmt.Errorf("layer for %s: %w", p.arch, err)
		}
		store.add(layer.Digest, layerPath)

		var cfg imageConfig
		cfg.Created, cfg.Architecture, cfg.OS, cfg.Variant = created, p.arch, "linux", p.variant()
		cfg.Config.Env = []string{imagePath}
		cfg.Config.Entrypoint = img.entrypoint
		cfg.Config.Labels = img.labels
		cfg.RootFS.Type = "layers"
		cfg.RootFS.DiffIDs = []string{diffID}
		cfg.History = append(cfg.History, struct {
			Created   string `json:"created"`
			CreatedBy string `json:"created_by"`
		}{created, img.history})
		cfgDesc, err := addJSON(store, mediaTypeConfig, cfg)
		if err != nil {
			return "", err
		}
		m, err := addJSON(store, mediaTypeManifest, manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: cfgDesc, Layers: []descriptor{layer}})
		if err != nil {
			return "", err
		}
		m.Platform = &ociPlatform{Architecture: p.arch, OS: "linux", Variant: p.variant()}
		manifests = append(manifests, m)
	}
	idx, err := addJSON(store, mediaTypeIndex, index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: manifests})
	if err != nil {
		return "", err
	}
	idx.Annotations = map[string]string{annotationRefName: img.version}
	top, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{idx}})
	if err != nil {
		return "", err
	}

	f, err := os.Create(path + ".tmp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	entry := func(name string, mode int64, size int64, typ byte) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: size, Typeflag: typ, ModTime: img.date, Format: tar.FormatPAX})
	}
	layoutFile := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := entry("oci-layout", 0o644, int64(len(layoutFile)), tar.TypeReg); err != nil {
		return "", err
	}
	if _, err := tw.Write(layoutFile); err != nil {
		return "", err
	}
	if err := entry("index.json", 0o644, int64(len(top)), tar.TypeReg); err != nil {
		return "", err
	}
	if _, err := tw.Write(top); err != nil {
		return "", err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := entry(dir, 0o755, 0, tar.TypeDir); err != nil {
			return "", err
		}
	}
	for _, digest := range store.blobs {
		if err := copyBlob(tw, entry, "blobs/sha256/"+strings.TrimPrefix(digest, "sha256:"), store.files[digest]); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return idx.Digest, os.Rename(path+".tmp", path)
}

func addJSON(store *blobStore, mediaType string, v any) (descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, err
	}
	return store.addBytes(mediaType, data)
}

func copyBlob(tw *tar.Writer, entry func(string, int64, int64, byte) error, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := entry(name, 0o644, st.Size(), tar.TypeReg); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// runtimeFiles are left out of a layer: the container runtime provides them
// (docker and the kubelet mount the node's or their own), and the root
// filesystem's copies are the build machine's (mmdebstrap copies them in).
var runtimeFiles = map[string]bool{
	"etc/hostname":    true,
	"etc/resolv.conf": true,
}

// writeLayer writes the gzipped tar of rootfs with binary added at binaryPath
// to path, and returns its descriptor and diff ID (the uncompressed tar's
// digest). Entries are in lexical order with numeric owners only, mtimes
// clamped to date, hard links kept; the contents of /dev, /proc and /sys are
// left out (the runtime mounts them; the mmdebstrap tree has device nodes),
// as are runtimeFiles and extended attributes (the image has no file
// capabilities).
func writeLayer(path, rootfs, binary, binaryPath string, date time.Time) (descriptor, string, error) {
	out, err := os.Create(path)
	if err != nil {
		return descriptor{}, "", err
	}
	defer out.Close()
	compressed := sha256.New()
	uncompressed := sha256.New()
	counter := &countWriter{}
	zw, err := gzip.NewWriterLevel(io.MultiWriter(out, compressed, counter), gzip.BestCompression)
	if err != nil {
		return descriptor{}, "", err
	}
	tw := tar.NewWriter(io.MultiWriter(zw, uncompressed))
	rel := strings.TrimPrefix(binaryPath, "/")
	if _, err := os.Lstat(filepath.Join(rootfs, rel)); err == nil {
		return descriptor{}, "", fmt.Errorf("%s already exists in %s", binaryPath, rootfs)
	}
	binaryWritten := false
	writeBinary := func() error {
		binaryWritten = true
		return writeBinaryEntry(tw, binary, rel, date)
	}
	links := map[inode]string{}
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name, err := filepath.Rel(rootfs, p)
		if err != nil || name == "." {
			return err
		}
		// The binary goes where lexical order puts it among its siblings.
		if !binaryWritten && name > rel {
			if err := writeBinary(); err != nil {
				return err
			}
		}
		if runtimeFiles[name] {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := fileHeader(fi, name, target, date, links)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			if err := copyFile(tw, p); err != nil {
				return err
			}
		}
		if fi.IsDir() && (name == "dev" || name == "proc" || name == "sys") {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return descriptor{}, "", err
	}
	if !binaryWritten {
		if err := writeBinary(); err != nil {
			return descriptor{}, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return descriptor{}, "", err
	}
	if err := zw.Close(); err != nil {
		return descriptor{}, "", err
	}
	if err := out.Close(); err != nil {
		return descriptor{}, "", err
	}
	d := descriptor{MediaType: mediaTypeLayer, Digest: "sha256:" + hex.EncodeToString(compressed.Sum(nil)), Size: counter.n}
	return d, "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)), nil
}

// writeBinaryEntry writes the file binary to tw as name: mode 0755, root's, its
// modification time date.
func writeBinaryEntry(tw *tar.Writer, binary, name string, date time.Time) error {
	st, err := os.Stat(binary)
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: st.Size(), Typeflag: tar.TypeReg, ModTime: date, Format: tar.FormatPAX}); err != nil {
		return err
	}
	f, err := os.Open(binary)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// inode names a file of the root filesystem, to write its hard links as links.
type inode struct{ dev, ino uint64 }

// fileHeader is the tar header of one file of the root filesystem: numeric owners,
// no access or change time, the modification time clamped to date (whole seconds),
// and a hard link to the first name written of its inode (links remembers them).
func fileHeader(fi fs.FileInfo, name, target string, date time.Time, links map[inode]string) (*tar.Header, error) {
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return nil, err
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	hdr.Format = tar.FormatPAX
	if hdr.ModTime.After(date) {
		hdr.ModTime = date
	}
	hdr.ModTime = hdr.ModTime.Truncate(time.Second)
	st := fi.Sys().(*syscall.Stat_t)
	hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	if fi.Mode().IsRegular() && st.Nlink > 1 {
		key := inode{uint64(st.Dev), st.Ino}
		if first, ok := links[key]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
		} else {
			links[key] = name
		}
	}
	return hdr, nil
}

// copyFile writes the content of the file at path to tw.
func copyFile(tw *tar.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func writeJSONFile(path string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
