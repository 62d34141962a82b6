package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Image is the container image's root filesystem in the VM: the Dockerfile's
// runtime stage built from Debian packages by hack/image-rootfs.sh, unpacked
// at ImageRoot in the guest, with our kube-proxy at BinaryPath inside it. The
// daemon then runs from it as from the image on a node: chrooted, in its own
// mount namespace (vm/guest/image-exec.sh), with the image's iptables, ipset,
// conntrack, kmod and nft on its PATH.
type Image struct {
	// Dir is hack/image-rootfs.sh's cache entry (image/, image.cpio.zst,
	// binary-path, manifest.txt).
	Dir string
	// Binary is the host path of the kube-proxy put into the image.
	Binary string
	// BinaryPath is where the Dockerfile's COPY puts it in the image
	// (/usr/local/bin/kube-proxy).
	BinaryPath string
}

// ImageRoot is where the image's root filesystem is unpacked in the guest.
const ImageRoot = "/image"

// imageExec is the guest script that enters the image (vm/guest/image-exec.sh).
const imageExec = "/kpi/scripts/image-exec.sh"

// ImageEnabled reports whether the e2e daemon runs from the image root
// filesystem: yes unless KPI_E2E_IMAGE_ROOTFS=0.
func ImageEnabled() bool {
	return os.Getenv("KPI_E2E_IMAGE_ROOTFS") != "0"
}

// PrepareImage builds (or reuses) the image root filesystem with
// hack/image-rootfs.sh and returns it with bin as the daemon.
func PrepareImage(ctx context.Context, root, bin string) (*Image, error) {
	dir, err := runScript(ctx, filepath.Join(root, "hack/image-rootfs.sh"))
	if err != nil {
		return nil, err
	}
	bp, err := os.ReadFile(filepath.Join(dir, "binary-path"))
	if err != nil {
		return nil, err
	}
	img := &Image{Dir: dir, Binary: bin, BinaryPath: strings.TrimSpace(string(bp))}
	if !strings.HasPrefix(img.BinaryPath, "/") {
		return nil, fmt.Errorf("%s/binary-path: %q is not an absolute path", dir, img.BinaryPath)
	}
	return img, nil
}

// Manifest is hack/image-rootfs.sh's record of the image: sources, Release
// dates, alternatives, tool and package versions.
func (img *Image) Manifest() (string, error) {
	b, err := os.ReadFile(filepath.Join(img.Dir, "manifest.txt"))
	return string(b), err
}

// ImageMount is a volume of a container started from the image: a guest path
// bind-mounted at Path in the image (read-only with ReadOnly). A missing
// source is created as an empty file (hostPath FileOrCreate).
type ImageMount struct {
	Source, Path string
	ReadOnly     bool
}

// DaemonMounts are the volumes both DaemonSets of deploy/ give the daemon
// (the kernel's modules read-only and the xtables lock), plus /kpi, where the
// harness writes its configuration and kubeconfig (a ConfigMap volume).
var DaemonMounts = []ImageMount{
	{Source: "/lib/modules", Path: "/lib/modules", ReadOnly: true},
	{Source: "/run/xtables.lock", Path: "/run/xtables.lock"},
	{Source: "/kpi", Path: "/kpi"},
}

// Image returns the image the VM booted with (nil: none).
func (vm *VM) Image() *Image { return vm.image }

// InImage returns argv run from the image as a container with mounts (see
// vm/guest/image-exec.sh); in a VM without an image it exits 127.
func (vm *VM) InImage(mounts []ImageMount, argv ...string) []string {
	out := []string{imageExec}
	for _, m := range mounts {
		b := m.Source + ":" + m.Path
		if m.ReadOnly {
			b += ":ro"
		}
		out = append(out, "--bind", b)
	}
	return append(append(out, "--"), argv...)
}

// KubeProxyCommand is the argv that runs our kube-proxy with args in the VM:
// from the image (chrooted, DaemonMounts) when the VM has one, else the bare
// binary /kpi/bin/kube-proxy on the VM's own tools.
func (vm *VM) KubeProxyCommand(args ...string) []string {
	if vm.image == nil {
		return append([]string{"/kpi/bin/kube-proxy"}, args...)
	}
	return vm.InImage(DaemonMounts, append([]string{vm.image.BinaryPath}, args...)...)
}
