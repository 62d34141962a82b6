// Command ocibuild writes one linux/amd64 container image as an OCI image
// layout archive (the tar `ctr images import` reads), without Docker or a
// registry. test/conformance/images/build.sh runs it for every image the
// conformance cluster imports:
//
//	ocibuild -out NAME.oci.tar -ref REFERENCE [-ref ...] [-rootfs DIR]
//	    [-file SRC=DST] [-link DST=TARGET] [-dir DST] [-entrypoint JSON]
//	    [-cmd JSON] [-env K=V] [-workdir DIR] [-user USER] [-port 80/tcp]
//
// -rootfs DIR (a root filesystem, e.g. hack/image-rootfs.sh's image/) is the
// first layer; the -file, -link and -dir entries make a second one, owned by
// root. Every mtime is -created (default the epoch), so the same inputs give
// the same bytes. Each -ref is an entry of index.json naming the one manifest:
// io.containerd.image.name holds the full reference (what ctr names the image)
// and org.opencontainers.image.ref.name its tag, as containerd writes them.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		spec                     imageSpec
		out, rootfs, created     string
		entrypoint, cmd          string
		refs, files, links, dirs listFlag
		env, ports               listFlag
	)
	flag.StringVar(&out, "out", "", "archive to write (NAME.oci.tar)")
	flag.Var(&refs, "ref", "image reference, e.g. registry.k8s.io/pause:3.10.2 (repeatable)")
	flag.StringVar(&rootfs, "rootfs", "", "root filesystem directory: the first layer")
	flag.Var(&files, "file", "SRC=DST: a file of the host at DST in the image (repeatable)")
	flag.Var(&links, "link", "DST=TARGET: a symbolic link (repeatable)")
	flag.Var(&dirs, "dir", "DST: an empty directory, mode 0755 (repeatable)")
	flag.StringVar(&entrypoint, "entrypoint", "", `ENTRYPOINT as a JSON array, e.g. ["/pause"]`)
	flag.StringVar(&cmd, "cmd", "", `CMD as a JSON array, e.g. ["pause"]`)
	flag.Var(&env, "env", "K=V added to the config's Env (after PATH) (repeatable)")
	flag.StringVar(&spec.workdir, "workdir", "", "WORKDIR")
	flag.StringVar(&spec.user, "user", "", "USER")
	flag.Var(&ports, "port", "exposed port, e.g. 8080/tcp (repeatable)")
	flag.StringVar(&created, "created", "1970-01-01T00:00:00Z", "creation date and every mtime, RFC 3339")
	flag.Parse()

	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "ocibuild: "+format+"\n", a...)
		os.Exit(1)
	}
	if out == "" || len(refs) == 0 {
		fail("-out and -ref are required")
	}
	if rootfs == "" && len(files)+len(links)+len(dirs) == 0 {
		fail("nothing to put in the image: give -rootfs or -file/-link/-dir")
	}
	var err error
	if spec.created, err = time.Parse(time.RFC3339, created); err != nil {
		fail("-created: %v", err)
	}
	spec.created = spec.created.UTC()
	if err := parseArray(entrypoint, &spec.entrypoint); err != nil {
		fail("-entrypoint: %v", err)
	}
	if err := parseArray(cmd, &spec.cmd); err != nil {
		fail("-cmd: %v", err)
	}
	for _, r := range refs {
		if _, err := refTag(r); err != nil {
			fail("-ref %q: %v", r, err)
		}
	}
	spec.refs, spec.rootfs, spec.env, spec.ports = refs, rootfs, env, ports
	for _, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok || src == "" || !strings.HasPrefix(dst, "/") {
			fail("-file %q: want SRC=/DST", f)
		}
		spec.extra = append(spec.extra, entry{kind: entryFile, path: dst, src: src})
	}
	for _, l := range links {
		dst, target, ok := strings.Cut(l, "=")
		if !ok || target == "" || !strings.HasPrefix(dst, "/") {
			fail("-link %q: want /DST=TARGET", l)
		}
		spec.extra = append(spec.extra, entry{kind: entryLink, path: dst, target: target})
	}
	for _, d := range dirs {
		if !strings.HasPrefix(d, "/") {
			fail("-dir %q: want an absolute path", d)
		}
		spec.extra = append(spec.extra, entry{kind: entryDir, path: d})
	}
	digest, err := writeArchive(out, spec)
	if err != nil {
		fail("%v", err)
	}
	fmt.Printf("%s %s\n", out, digest)
}

func parseArray(s string, into *[]string) error {
	if s == "" {
		return nil
	}
	return json.Unmarshal([]byte(s), into)
}

// refTag returns the tag of a reference NAME:TAG (a digest reference or one
// without a tag is refused: the cluster asks for tags).
func refTag(ref string) (string, error) {
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash || colon == len(ref)-1 || strings.Contains(ref, "@") {
		return "", fmt.Errorf("want NAME:TAG")
	}
	host, _, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return "", fmt.Errorf("want a fully qualified name (registry host first), as containerd stores it")
	}
	return ref[colon+1:], nil
}
