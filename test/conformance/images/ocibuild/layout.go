package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Media types and annotations of the OCI image spec v1.1 and containerd.
const (
	typeIndex       = "application/vnd.oci.image.index.v1+json"
	typeManifest    = "application/vnd.oci.image.manifest.v1+json"
	typeConfig      = "application/vnd.oci.image.config.v1+json"
	typeLayer       = "application/vnd.oci.image.layer.v1.tar+gzip"
	annotRefName    = "org.opencontainers.image.ref.name"
	annotImageName  = "io.containerd.image.name"
	defaultImageEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	ociLayout       = `{"imageLayoutVersion":"1.0.0"}`
)

type imageSpec struct {
	refs            []string
	rootfs          string
	extra           []entry
	entrypoint, cmd []string
	env, ports      []string
	workdir, user   string
	created         time.Time
}

type entryKind int

const (
	entryFile entryKind = iota
	entryLink
	entryDir
)

// entry is one item of the extra layer.
type entry struct {
	kind   entryKind
	path   string // absolute, in the image
	src    string // entryFile: the host file
	target string // entryLink
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type configFile struct {
	Created      string          `json:"created"`
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Config       containerConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history"`
}

type containerConfig struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type manifestFile struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type indexFile struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// blob is content of the layout: in memory (JSON) or in a file (layers).
type blob struct {
	digest string
	data   []byte
	file   string
	size   int64
}

// writeArchive writes the image's layout archive at out (through a temporary
// file in the same folder) and returns the manifest's digest.
func writeArchive(out string, spec imageSpec) (string, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".ocibuild-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	b := &builder{tmp: tmp, cfg: newConfig(spec)}
	if spec.rootfs != "" {
		if err := b.addLayer("rootfs", "ocibuild: root filesystem "+filepath.Base(spec.rootfs), func(tw *tar.Writer) error {
			return addTree(tw, spec.rootfs, spec.created)
		}); err != nil {
			return "", err
		}
	}
	if len(spec.extra) > 0 {
		if err := b.addLayer("extra", "ocibuild: "+describe(spec.extra), func(tw *tar.Writer) error {
			return addEntries(tw, spec.extra, spec.created)
		}); err != nil {
			return "", err
		}
	}
	cfgDesc, cfgBlob, err := jsonBlob(typeConfig, b.cfg)
	if err != nil {
		return "", err
	}
	manDesc, manBlob, err := jsonBlob(typeManifest, manifestFile{SchemaVersion: 2, MediaType: typeManifest, Config: cfgDesc, Layers: b.layers})
	if err != nil {
		return "", err
	}
	b.blobs = append(b.blobs, cfgBlob, manBlob)
	idx, err := json.Marshal(newIndex(spec.refs, manDesc))
	if err != nil {
		return "", err
	}
	part := filepath.Join(tmp, "archive.tar")
	if err := writeLayoutTar(part, spec.created, idx, b.blobs); err != nil {
		return "", err
	}
	if err := os.Rename(part, out); err != nil {
		return "", err
	}
	return manDesc.Digest, nil
}

// builder collects the layers of one image and their blobs.
type builder struct {
	tmp    string
	cfg    configFile
	layers []descriptor
	blobs  []blob
}

// addLayer writes a layer with fill and records it in the manifest's layers
// and the config's diff IDs and history.
func (b *builder) addLayer(name, createdBy string, fill func(*tar.Writer) error) error {
	file := filepath.Join(b.tmp, name)
	d, diffID, err := writeLayer(file, fill)
	if err != nil {
		return fmt.Errorf("layer %s: %w", name, err)
	}
	b.layers = append(b.layers, d)
	b.blobs = append(b.blobs, blob{digest: d.Digest, file: file, size: d.Size})
	b.cfg.RootFS.DiffIDs = append(b.cfg.RootFS.DiffIDs, diffID)
	b.cfg.History = append(b.cfg.History, history{Created: b.cfg.Created, CreatedBy: createdBy})
	return nil
}

// newConfig is the image config of spec, without its layers.
func newConfig(spec imageSpec) configFile {
	cfg := configFile{
		Created:      spec.created.Format(time.RFC3339),
		Architecture: "amd64",
		OS:           "linux",
		Config: containerConfig{
			User:       spec.user,
			Env:        append([]string{defaultImageEnv}, spec.env...),
			Entrypoint: spec.entrypoint,
			Cmd:        spec.cmd,
			WorkingDir: spec.workdir,
		},
	}
	cfg.RootFS.Type = "layers"
	for _, p := range spec.ports {
		if cfg.Config.ExposedPorts == nil {
			cfg.Config.ExposedPorts = map[string]struct{}{}
		}
		cfg.Config.ExposedPorts[p] = struct{}{}
	}
	return cfg
}

// newIndex names the manifest once per reference, for linux/amd64, with the
// full reference (what containerd names the image) and its tag.
func newIndex(refs []string, manifest descriptor) indexFile {
	idx := indexFile{SchemaVersion: 2, MediaType: typeIndex}
	for _, r := range refs {
		tag, _ := refTag(r) // main checked every reference
		d := manifest
		d.Platform = &platform{Architecture: "amd64", OS: "linux"}
		d.Annotations = map[string]string{annotImageName: r, annotRefName: tag}
		idx.Manifests = append(idx.Manifests, d)
	}
	return idx
}

// writeLayoutTar writes the layout: oci-layout, index.json, then the blobs
// under blobs/sha256/, every entry root-owned and dated date.
func writeLayoutTar(path string, date time.Time, index []byte, blobs []blob) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	header := func(name string, mode, size int64, typ byte) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: size, ModTime: date, Typeflag: typ, Format: tar.FormatPAX})
	}
	werr := func() error {
		if err := header("oci-layout", 0o644, int64(len(ociLayout)), tar.TypeReg); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(ociLayout)); err != nil {
			return err
		}
		if err := header("index.json", 0o644, int64(len(index)), tar.TypeReg); err != nil {
			return err
		}
		if _, err := tw.Write(index); err != nil {
			return err
		}
		for _, d := range []string{"blobs/", "blobs/sha256/"} {
			if err := header(d, 0o755, 0, tar.TypeDir); err != nil {
				return err
			}
		}
		for _, b := range blobs {
			if err := header("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), 0o644, b.size, tar.TypeReg); err != nil {
				return err
			}
			if b.file == "" {
				_, err = tw.Write(b.data)
			} else {
				err = copyFile(tw, b.file)
			}
			if err != nil {
				return err
			}
		}
		return tw.Close()
	}()
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

func jsonBlob(mediaType string, v any) (descriptor, blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, blob{}, err
	}
	sum := sha256.Sum256(data)
	d := descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
	return d, blob{digest: d.Digest, data: data, size: d.Size}, nil
}

// hashCount hashes what goes through it and counts the bytes.
type hashCount struct {
	h hash.Hash
	n int64
}

func (c *hashCount) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

// writeLayer writes a gzip-compressed tar layer to file and returns its
// descriptor and its diff ID (the digest of the uncompressed tar).
func writeLayer(file string, fill func(*tar.Writer) error) (descriptor, string, error) {
	f, err := os.Create(file)
	if err != nil {
		return descriptor{}, "", err
	}
	defer f.Close()
	compressed := &hashCount{h: sha256.New()}
	gz, err := gzip.NewWriterLevel(io.MultiWriter(f, compressed), gzip.BestSpeed)
	if err != nil {
		return descriptor{}, "", err
	}
	uncompressed := &hashCount{h: sha256.New()}
	tw := tar.NewWriter(io.MultiWriter(gz, uncompressed))
	if err := fill(tw); err != nil {
		return descriptor{}, "", err
	}
	if err := tw.Close(); err != nil {
		return descriptor{}, "", err
	}
	if err := gz.Close(); err != nil {
		return descriptor{}, "", err
	}
	if err := f.Close(); err != nil {
		return descriptor{}, "", err
	}
	d := descriptor{MediaType: typeLayer, Digest: "sha256:" + hex.EncodeToString(compressed.h.Sum(nil)), Size: compressed.n}
	return d, "sha256:" + hex.EncodeToString(uncompressed.h.Sum(nil)), nil
}

// emptied are the folders kept empty in a layer, as in Debian's container
// images: the runtime mounts them.
var emptied = map[string]bool{"dev": true, "proc": true, "sys": true}

type inode struct{ dev, ino uint64 }

// addTree adds the tree under root, in lexical order: owners and modes as on
// disk (numeric ids, no names), hard links as links to their first name,
// every mtime the image's date. Device nodes, FIFOs and sockets are refused
// outside the emptied folders.
func addTree(tw *tar.Writer, root string, date time.Time) error {
	seen := map[inode]string{}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if top, rest, _ := strings.Cut(rel, "/"); emptied[top] && rest != "" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat data", p)
		}
		h := &tar.Header{Name: rel, Mode: tarMode(fi.Mode()), Uid: int(st.Uid), Gid: int(st.Gid), ModTime: date, Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case fi.Mode().IsRegular():
			key := inode{uint64(st.Dev), st.Ino}
			if first, ok := seen[key]; ok && st.Nlink > 1 {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return tw.WriteHeader(h)
			}
			seen[key] = rel
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			return copyFile(tw, p)
		default:
			return fmt.Errorf("%s: unsupported file type %v in a root filesystem", p, fi.Mode().Type())
		}
		return tw.WriteHeader(h)
	})
}

// addEntries adds the extra layer, sorted by path, with the parent folders
// the entries need (root-owned, 0755).
func addEntries(tw *tar.Writer, entries []entry, date time.Time) error {
	sorted := append([]entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].path < sorted[j].path })
	made := map[string]bool{}
	var mkdirs func(dir string) error
	mkdirs = func(dir string) error {
		if dir == "/" || made[dir] {
			return nil
		}
		if err := mkdirs(path.Dir(dir)); err != nil {
			return err
		}
		made[dir] = true
		return tw.WriteHeader(&tar.Header{Name: dir[1:] + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: date, Format: tar.FormatPAX})
	}
	for _, e := range sorted {
		p := path.Clean(e.path)
		if err := mkdirs(path.Dir(p)); err != nil {
			return err
		}
		name := p[1:]
		switch e.kind {
		case entryDir:
			if made[p] {
				continue
			}
			made[p] = true
			if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: date, Format: tar.FormatPAX}); err != nil {
				return err
			}
		case entryLink:
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: e.target, ModTime: date, Format: tar.FormatPAX}); err != nil {
				return err
			}
		case entryFile:
			fi, err := os.Stat(e.src)
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("%s: not a regular file", e.src)
			}
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: tarMode(fi.Mode()), Size: fi.Size(), Typeflag: tar.TypeReg, ModTime: date, Format: tar.FormatPAX}); err != nil {
				return err
			}
			if err := copyFile(tw, e.src); err != nil {
				return err
			}
		}
	}
	return nil
}

// tarMode is the permission bits with setuid, setgid and sticky as tar
// stores them.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func describe(entries []entry) string {
	var parts []string
	for _, e := range entries {
		switch e.kind {
		case entryFile:
			parts = append(parts, "COPY "+filepath.Base(e.src)+" "+e.path)
		case entryLink:
			parts = append(parts, "LINK "+e.path+" -> "+e.target)
		case entryDir:
			parts = append(parts, "MKDIR "+e.path)
		}
	}
	return strings.Join(parts, "; ")
}
