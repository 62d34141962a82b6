package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// TestRelease checks the release directory KPI_RELEASE_DIR that make release
// wrote (make release-test): skipped without it.
func TestRelease(t *testing.T) {
	dir := os.Getenv("KPI_RELEASE_DIR")
	if dir == "" {
		t.Skip("KPI_RELEASE_DIR is not set (make release-test)")
	}
	version := filepath.Base(dir)
	arches := []string{"amd64", "arm64"}

	t.Run("checksums", func(t *testing.T) { checkSums(t, dir) })

	// The Dockerfile's runtime stage as hack/image-rootfs.sh reads it.
	planOut, err := exec.Command("bash", "../image-rootfs.sh", "--plan").Output()
	if err != nil {
		t.Fatalf("hack/image-rootfs.sh --plan: %v", err)
	}
	p, err := parsePlan(string(planOut))
	if err != nil {
		t.Fatal(err)
	}
	// The commit the release names, and its date as hack/version.sh stamps it.
	arch0 := filepath.Join(dir, "kube-proxy-linux-amd64")
	revision := labelOf(t, dir, "org.opencontainers.image.revision")
	cmd := exec.Command("git", "show", "-s", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", revision+"^{commit}")
	cmd.Env = append(os.Environ(), "TZ=UTC")
	date, err := cmd.Output()
	if err != nil {
		t.Fatalf("the revision label %q is no commit: %v", revision, err)
	}
	binary, err := os.ReadFile(arch0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(binary, []byte(revision)) {
		t.Errorf("kube-proxy-linux-amd64 was not stamped with the commit %s", revision)
	}
	vcs := map[string]string{"vcs.revision": revision, "vcs.time": strings.TrimSpace(string(date))}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":    "kube-proxy-ipvs",
		"org.opencontainers.image.source":   "https://github.com/kube-proxy-ipvs/kube-proxy-ipvs",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": vcs["vcs.revision"],
		"org.opencontainers.image.created":  vcs["vcs.time"],
	}

	images, ref := readLayout(t, filepath.Join(dir, "kube-proxy-ipvs-"+version+".oci.tar"))
	if ref != version {
		t.Errorf("ref.name %q, want %q", ref, version)
	}
	if len(images) != len(arches) {
		t.Errorf("%d platforms in the index, want %v", len(images), arches)
	}
	for _, arch := range arches {
		im, ok := images[arch]
		if !ok {
			t.Errorf("no linux/%s manifest", arch)
			continue
		}
		if !reflect.DeepEqual(im.config.Config.Labels, wantLabels) {
			t.Errorf("%s labels:\n%v\nwant\n%v", arch, im.config.Config.Labels, wantLabels)
		}
		if !reflect.DeepEqual(im.config.Config.Entrypoint, p.entrypoint) {
			t.Errorf("%s Entrypoint %q, the Dockerfile's is %q", arch, im.config.Config.Entrypoint, p.entrypoint)
		}
		if im.config.Created != vcs["vcs.time"] {
			t.Errorf("%s created %s, the commit's date is %s", arch, im.config.Created, vcs["vcs.time"])
		}
		t.Run("layer-"+arch, func(t *testing.T) { checkLayer(t, dir, arch, p.binary, im.layer) })
	}
	t.Run("skopeo", func(t *testing.T) {
		checkWithSkopeo(t, filepath.Join(dir, "kube-proxy-ipvs-"+version+".oci.tar"), arches)
	})
	t.Run("sbom", func(t *testing.T) { checkSBOM(t, dir, arches) })
	t.Run("version-in-image", func(t *testing.T) { checkVersionInImage(t, images["amd64"].layer, p.binary, version) })
}

// labelOf reads one label of the amd64 image's config.
func labelOf(t *testing.T, dir, key string) string {
	t.Helper()
	images, _ := readLayout(t, filepath.Join(dir, "kube-proxy-ipvs-"+filepath.Base(dir)+".oci.tar"))
	v := images["amd64"].config.Config.Labels[key]
	if v == "" {
		t.Fatalf("no label %s", key)
	}
	return v
}

func checkSums(t *testing.T, dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		listed[name] = true
		if got, err := fileSHA256(filepath.Join(dir, name)); err != nil || got != sum {
			t.Errorf("%s: sha256 %s (%v), SHA256SUMS says %s", name, got, err, sum)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			t.Errorf("%s is not in SHA256SUMS", e.Name())
		}
	}
}

// checkLayer: the binary at the COPY destination is the release's binary,
// every ELF file is built for the platform (the arm64 root filesystem is
// derived from the amd64 one: nothing of amd64 may remain), and the packages
// dpkg's status holds are the ones image-manifest-linux-<arch>.txt records.
func checkLayer(t *testing.T, dir, arch, binaryPath string, layer []byte) {
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	wantBinary, err := fileSHA256(filepath.Join(dir, "kube-proxy-linux-"+arch))
	if err != nil {
		t.Fatal(err)
	}
	var status string
	elfFiles, foreign, foundBinary := 0, 0, false
	alternatives := map[string]string{}
	layerFiles(t, layer, func(h *tar.Header, r io.Reader) {
		if name, ok := strings.CutPrefix(h.Name, "etc/alternatives/"); ok && h.Typeflag == tar.TypeSymlink {
			alternatives[name] = h.Linkname
		}
		if h.Typeflag != tar.TypeReg {
			return
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case strings.TrimPrefix(binaryPath, "/"):
			foundBinary = true
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != wantBinary || h.Mode&0o111 == 0 {
				t.Errorf("%s in the layer (mode %o) is not kube-proxy-linux-%s", binaryPath, h.Mode, arch)
			}
		case "var/lib/dpkg/status":
			status = string(data)
		}
		if runtimeFiles[h.Name] {
			t.Errorf("%s: the layer holds %s (the build machine's)", arch, h.Name)
		}
		if len(data) > 4 && string(data[:4]) == elf.ELFMAG {
			f, err := elf.NewFile(strings.NewReader(string(data)))
			if err != nil {
				t.Errorf("%s: %v", h.Name, err)
				return
			}
			elfFiles++
			if f.Machine != machine {
				if foreign++; foreign <= 5 {
					t.Errorf("%s: ELF for %v in the %s image", h.Name, f.Machine, arch)
				}
			}
		}
	})
	if !foundBinary {
		t.Errorf("no %s in the layer", binaryPath)
	}
	if foreign > 0 {
		t.Errorf("%d of %d ELF files in the %s image are for another machine", foreign, elfFiles, arch)
	}
	if elfFiles < 100 {
		t.Errorf("only %d ELF files in the layer", elfFiles)
	}
	// The alternatives the RUN set (update-alternatives --set), as recorded.
	manifestText, err := os.ReadFile(filepath.Join(dir, "image-manifest-linux-"+arch+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(manifestText), "# alternatives\n")
	section, _, _ = strings.Cut(section, "#")
	if section == "" {
		t.Errorf("%s: the manifest records no alternatives", arch)
	}
	for _, line := range strings.Split(strings.TrimSpace(section), "\n") {
		name, target, _ := strings.Cut(line, " -> ")
		if alternatives[name] != target {
			t.Errorf("%s: /etc/alternatives/%s -> %q in the layer, the manifest says %q", arch, name, alternatives[name], target)
		}
	}
	// dpkg's status: installed packages and versions.
	var inStatus []string
	for _, stanza := range strings.Split(status, "\n\n") {
		var name, version string
		installed := false
		for _, line := range strings.Split(stanza, "\n") {
			switch {
			case strings.HasPrefix(line, "Package: "):
				name = strings.TrimPrefix(line, "Package: ")
			case strings.HasPrefix(line, "Version: "):
				version = strings.TrimPrefix(line, "Version: ")
			case line == "Status: install ok installed":
				installed = true
			case strings.HasPrefix(line, "Architecture: ") && line != "Architecture: all" && line != "Architecture: "+arch:
				t.Errorf("%s status: %s is %s", arch, name, line)
			}
		}
		if installed {
			inStatus = append(inStatus, name+" "+version)
		}
	}
	recorded := manifestPackages(t, filepath.Join(dir, "image-manifest-linux-"+arch+".txt"))
	sort.Strings(inStatus)
	if !reflect.DeepEqual(inStatus, recorded) {
		t.Errorf("%s: dpkg status of the layer\n%v\nmanifest\n%v", arch, inStatus, recorded)
	}
}

func manifestPackages(t *testing.T, path string) []string {
	t.Helper()
	pkgs, err := readManifestPackages(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pkgs {
		out = append(out, p.name+" "+p.version)
	}
	sort.Strings(out)
	return out
}

// checkSBOM: the SBOM names, for each binary, every module `go version -m`
// prints (with its replacement when there is one) as a dependency of that
// binary, and for each architecture every package of its manifest with the
// recorded version.
func checkSBOM(t *testing.T, dir string, arches []string) {
	data, err := os.ReadFile(filepath.Join(dir, "sbom.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.DocumentNamespace == "" {
		t.Errorf("SBOM header: %+v", doc)
	}
	byID := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		if _, dup := byID[p.SPDXID]; dup {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		byID[p.SPDXID] = p
	}
	related := map[[3]string]bool{}
	for _, r := range doc.Relationships {
		related[[3]string{r.Element, r.Type, r.Related}] = true
	}
	for _, arch := range arches {
		binID := spdxID("binary", "linux", arch)
		if _, ok := byID[binID]; !ok || !related[[3]string{spdxID("image"), "CONTAINS", binID}] {
			t.Errorf("SBOM: no %s contained in the image", binID)
		}
		out, err := exec.Command("go", "version", "-m", filepath.Join(dir, "kube-proxy-linux-"+arch)).Output()
		if err != nil {
			t.Fatalf("go version -m: %v", err)
		}
		// Each dep line, or the => line after it (the replacement is what is linked in).
		var modules [][2]string
		s := bufio.NewScanner(strings.NewReader(string(out)))
		for s.Scan() {
			f := strings.Fields(s.Text())
			switch {
			case len(f) >= 3 && f[0] == "dep":
				modules = append(modules, [2]string{f[1], f[2]})
			case len(f) >= 3 && f[0] == "=>" && len(modules) > 0:
				modules[len(modules)-1] = [2]string{f[1], f[2]}
			}
		}
		for _, m := range modules {
			id := spdxID("gomod", m[0], m[1])
			if p, ok := byID[id]; !ok || p.Name != m[0] || p.VersionInfo != m[1] {
				t.Errorf("%s: module %s %s is not in the SBOM", arch, m[0], m[1])
			}
			if !related[[3]string{binID, "DEPENDS_ON", id}] {
				t.Errorf("%s: the SBOM does not say the binary depends on %s %s", arch, m[0], m[1])
			}
		}
		if len(modules) < 20 {
			t.Errorf("%s: go version -m lists %d modules", arch, len(modules))
		}
		for _, line := range manifestPackages(t, filepath.Join(dir, "image-manifest-linux-"+arch+".txt")) {
			name, version, _ := strings.Cut(line, " ")
			id := spdxID("deb", arch, name, version)
			if p, ok := byID[id]; !ok || p.Name != name || p.VersionInfo != version || !related[[3]string{spdxID("image"), "CONTAINS", id}] {
				t.Errorf("SBOM: no Debian package %s %s (%s) in the image", name, version, arch)
			}
		}
	}
}

// checkVersionInImage unpacks the amd64 layer and runs the daemon in it: as
// root chrooted into it (no mounts, nothing of the host's network touched),
// with the image's iptables too (in a network namespace of its own);
// otherwise the unpacked binary directly.
func checkVersionInImage(t *testing.T, layer []byte, binaryPath, version string) {
	if len(layer) == 0 {
		t.Fatal("no amd64 layer")
	}
	root := t.TempDir()
	asRoot := os.Geteuid() == 0
	layerFiles(t, layer, func(h *tar.Header, r io.Reader) {
		path := filepath.Join(root, h.Name)
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o7777); err == nil {
				_, err = io.Copy(f, r)
				f.Close()
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, path)
		case tar.TypeLink:
			err = os.Link(filepath.Join(root, h.Linkname), path)
		}
		if err != nil {
			t.Fatalf("unpacking %s: %v", h.Name, err)
		}
		if asRoot && h.Typeflag != tar.TypeLink {
			_ = os.Lchown(path, h.Uid, h.Gid)
		}
	})
	var cmd *exec.Cmd
	if asRoot {
		cmd = exec.Command("chroot", root, binaryPath, "--version")
	} else {
		cmd = exec.Command(filepath.Join(root, binaryPath), "--version")
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), " "+version+" ") {
		t.Errorf("%v: %v\n%s\nwant the version %s", cmd.Args, err, out, version)
	}
	if asRoot {
		// The image's iptables is a wrapper that reads the node's rules on its
		// first call: in a network namespace of its own (nothing of this
		// machine's is read), an empty node, it picks nft as upstream's does
		// and points the unpacked image's alternatives there. (It needs the
		// /dev/null every container has.)
		if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mknod(filepath.Join(root, "dev/null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil && !os.IsExist(err) {
			t.Fatalf("mknod dev/null in the unpacked image: %v", err)
		}
		out, err := exec.Command("unshare", "--net", "chroot", root, "iptables", "--version").CombinedOutput()
		if v := strings.TrimSpace(string(out)); err != nil || strings.Contains(v, "\n") || !strings.HasPrefix(v, "iptables v") || !strings.HasSuffix(v, " (nf_tables)") {
			t.Errorf("iptables --version in the image, in an empty network namespace: %v\n%s", err, out)
		}
		if alt, err := os.Readlink(filepath.Join(root, "etc/alternatives/iptables")); err != nil || alt != "/usr/sbin/iptables-nft" {
			t.Errorf("after the first iptables call the image's iptables alternative is %q (%v), want /usr/sbin/iptables-nft", alt, err)
		}
	}
}

// checkWithSkopeo has an independent implementation read the archive: skopeo
// copies every platform (verifying each blob's digest) and picks each
// architecture from the index. Skipped where skopeo is not installed.
func checkWithSkopeo(t *testing.T, archive string, arches []string) {
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Skip("skopeo is not installed")
	}
	dest := "oci:" + filepath.Join(t.TempDir(), "copy") + ":release"
	if out, err := exec.Command("skopeo", "copy", "--all", "oci-archive:"+archive, dest).CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy --all: %v\n%s", err, out)
	}
	for _, arch := range arches {
		out, err := exec.Command("skopeo", "inspect", "--override-os", "linux", "--override-arch", arch, "oci-archive:"+archive).Output()
		if err != nil {
			t.Fatalf("skopeo inspect %s: %v", arch, err)
		}
		var got struct{ Architecture, Os string }
		if err := json.Unmarshal(out, &got); err != nil || got.Architecture != arch || got.Os != "linux" {
			t.Errorf("skopeo inspect --override-arch %s: %s/%s (%v)", arch, got.Os, got.Architecture, err)
		}
	}
}
