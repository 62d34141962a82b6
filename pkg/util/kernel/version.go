// Package kernel detects the running kernel's version and answers the version
// questions kube-proxy's IPVS mode asks.
package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultRoot is the sysctl tree holding kernel/osrelease.
const DefaultRoot = "/proc/sys"

// Version is a kernel release reduced to its numeric part: "6.1.0-57-amd64" is
// 6.1.0.
type Version struct {
	Major, Minor, Patch int
}

// The net/ipv4/vs/conn_reuse_mode window (kubernetes#81775, #93297): the sysctl
// exists from 4.1, and from 5.9 the kernel no longer drops the first packet of a
// reused connection, so kube-proxy sets conn_reuse_mode=0 only in between.
var (
	ConnReuseMinVersion   = Version{4, 1, 0}
	ConnReuseFixedVersion = Version{5, 9, 0}
)

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare returns -1, 0 or 1 as v is older than, equal to or newer than o.
func (v Version) Compare(o Version) int {
	for _, d := range [...]int{v.Major - o.Major, v.Minor - o.Minor, v.Patch - o.Patch} {
		if d < 0 {
			return -1
		}
		if d > 0 {
			return 1
		}
	}
	return 0
}

// AtLeast reports whether v is o or newer.
func (v Version) AtLeast(o Version) bool { return v.Compare(o) >= 0 }

// LessThan reports whether v is older than o.
func (v Version) LessThan(o Version) bool { return v.Compare(o) < 0 }

// SetConnReuseModeZero reports whether kube-proxy sets vs/conn_reuse_mode=0 on
// this kernel: 4.1 <= v < 5.9.
func SetConnReuseModeZero(v Version) bool {
	return v.AtLeast(ConnReuseMinVersion) && v.LessThan(ConnReuseFixedVersion)
}

// ParseVersion parses a kernel release such as "6.1.0-57-amd64",
// "5.15.0-1034-azure", "3.10.0-1160.el7.x86_64", "6.8.0-rc1", "5.10" or
// "6.18.44-fc-v1045": one to three dot-separated numbers, optionally followed by a
// suffix that starts with something other than a digit or a dot.
func ParseVersion(s string) (Version, error) {
	s = strings.TrimSpace(s)
	end := 0
	for end < len(s) && (s[end] == '.' || s[end] >= '0' && s[end] <= '9') {
		end++
	}
	numeric := strings.TrimSuffix(s[:end], ".")
	if numeric == "" {
		return Version{}, fmt.Errorf("parsing kernel version %q: no leading version number", s)
	}
	parts := strings.Split(numeric, ".")
	if len(parts) > 3 {
		// "3.10.0.1" is no kernel release; keep the first three.
		parts = parts[:3]
	}
	var nums [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || p == "" {
			return Version{}, fmt.Errorf("parsing kernel version %q: bad component %q", s, p)
		}
		nums[i] = n
	}
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("parsing kernel version %q: need at least major.minor", s)
	}
	return Version{nums[0], nums[1], nums[2]}, nil
}

// ReadVersion reads the running kernel's version from root/kernel/osrelease
// (root is DefaultRoot outside tests).
func ReadVersion(root string) (Version, error) {
	path := filepath.Join(root, "kernel", "osrelease")
	data, err := os.ReadFile(path)
	if err != nil {
		return Version{}, fmt.Errorf("reading kernel version: %w", err)
	}
	v, err := ParseVersion(string(data))
	if err != nil {
		return Version{}, fmt.Errorf("reading kernel version from %s: %w", path, err)
	}
	return v, nil
}
