package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"runtime/debug"
	"time"
)

// SPDX 2.3 JSON (https://spdx.github.io/spdx-spec/v2.3/): the image, each
// architecture's binary with the Go modules linked into it (the binary's own
// build information, what `go version -m` prints), and each architecture's
// Debian packages with the versions its root filesystem got.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID                string            `json:"SPDXID"`
	Name                  string            `json:"name"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	PackageFileName       string            `json:"packageFileName,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	LicenseDeclared       string            `json:"licenseDeclared,omitempty"`
	Supplier              string            `json:"supplier,omitempty"`
	SourceInfo            string            `json:"sourceInfo,omitempty"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const sourceRepo = "https://github.com/kube-proxy-ipvs/kube-proxy-ipvs"

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(parts ...string) string {
	id := "SPDXRef"
	for _, p := range parts {
		id += "-" + spdxIDUnsafe.ReplaceAllString(p, "-")
	}
	return id
}

func purl(ref string) []spdxExternalRef {
	return []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: ref}}
}

func buildSBOM(img imageSpec, revision, indexDigest string, plats []platform) (spdxDocument, error) {
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              "kube-proxy-ipvs-" + img.version,
		DocumentNamespace: sourceRepo + "/releases/" + img.version + "/sbom.spdx.json?revision=" + revision,
		CreationInfo: spdxCreationInfo{
			Created:  img.date.Format(time.RFC3339),
			Creators: []string{"Tool: kube-proxy-ipvs hack/release", "Organization: kube-proxy-ipvs"},
		},
	}
	imageID := spdxID("image")
	doc.Packages = append(doc.Packages, spdxPackage{
		SPDXID: imageID, Name: "kube-proxy-ipvs", VersionInfo: img.version,
		PackageFileName:  "kube-proxy-ipvs-" + img.version + ".oci.tar",
		DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "CONTAINER", LicenseDeclared: "Apache-2.0",
		SourceInfo:   "built from " + sourceRepo + " at " + revision,
		Checksums:    []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: trimSHA(indexDigest)}},
		ExternalRefs: purl("pkg:oci/kube-proxy-ipvs@" + url.QueryEscape(indexDigest) + "?tag=" + url.QueryEscape(img.version)),
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", imageID})
	modules := map[string]bool{}
	for _, p := range plats {
		binID := spdxID("binary", "linux", p.arch)
		sum, err := fileSHA256(p.binary)
		if err != nil {
			return doc, err
		}
		info, err := buildinfo.ReadFile(p.binary)
		if err != nil {
			return doc, fmt.Errorf("build information of %s: %w", p.binary, err)
		}
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID: binID, Name: "kube-proxy", VersionInfo: img.version,
			PackageFileName:  "kube-proxy-linux-" + p.arch,
			DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "APPLICATION", LicenseDeclared: "Apache-2.0",
			SourceInfo: fmt.Sprintf("%s (%s) at %s, built with %s", info.Path, info.Main.Path, revision, info.GoVersion),
			Checksums:  []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sum}},
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{imageID, "CONTAINS", binID})
		// The Go standard library is linked in as well: its version is the toolchain's.
		deps := append([]*debug.Module{{Path: "stdlib", Version: info.GoVersion}}, info.Deps...)
		for _, d := range deps {
			path, version := d.Path, d.Version
			if d.Replace != nil {
				path, version = d.Replace.Path, d.Replace.Version
			}
			id := spdxID("gomod", path, version)
			if !modules[id] {
				modules[id] = true
				pkg := spdxPackage{
					SPDXID: id, Name: path, VersionInfo: version, DownloadLocation: "NOASSERTION",
					PrimaryPackagePurpose: "LIBRARY", ExternalRefs: purl("pkg:golang/" + path + "@" + version),
				}
				if d.Replace != nil {
					pkg.SourceInfo = "replaces " + d.Path + " " + d.Version
				}
				doc.Packages = append(doc.Packages, pkg)
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "DEPENDS_ON", id})
		}
		for _, deb := range p.packages {
			id := spdxID("deb", p.arch, deb.name, deb.version)
			doc.Packages = append(doc.Packages, spdxPackage{
				SPDXID: id, Name: deb.name, VersionInfo: deb.version, DownloadLocation: "NOASSERTION",
				PrimaryPackagePurpose: "OPERATING-SYSTEM", Supplier: "Organization: Debian",
				ExternalRefs: purl("pkg:deb/debian/" + deb.name + "@" + url.PathEscape(deb.version) + "?arch=" + p.arch + "&distro=" + img.suite),
			})
			doc.Relationships = append(doc.Relationships, spdxRelationship{imageID, "CONTAINS", id})
		}
	}
	return doc, nil
}

func trimSHA(digest string) string { return digest[len("sha256:"):] }

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
