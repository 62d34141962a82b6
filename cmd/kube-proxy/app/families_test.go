package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// fakeProc builds a /proc with or without IPv6 and with disable_ipv6 set to v.
func fakeProc(t *testing.T, ipv6 bool, disable string) string {
	t.Helper()
	root := t.TempDir()
	if ipv6 {
		if err := os.MkdirAll(filepath.Join(root, "net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "net/if_inet6"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if disable != "" {
		dir := filepath.Join(root, "sys/net/ipv6/conf/all")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "disable_ipv6"), []byte(disable+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestFamilyCheck: IPv6 runs only when the kernel has it enabled and
// ip6tables' nat table answers, as upstream decides.
func TestFamilyCheck(t *testing.T) {
	noNAT := errors.New("ip6tables-nft-save: table `nat' does not exist")
	for _, c := range []struct {
		name       string
		family     v1.IPFamily
		ipv6       bool
		disable    string
		natErr     error
		wantReason string // "" means usable
	}{
		{"IPv4 with nat", v1.IPv4Protocol, false, "", nil, ""},
		{"IPv4 without nat", v1.IPv4Protocol, false, "", noNAT, "no usable IPv4 nat table"},
		{"IPv6 everywhere", v1.IPv6Protocol, true, "0", nil, ""},
		{"no IPv6 in the kernel", v1.IPv6Protocol, false, "", nil, "the kernel has no IPv6"},
		{"IPv6 disabled", v1.IPv6Protocol, true, "1", nil, "IPv6 is disabled"},
		{"IPv6 without a usable ip6tables nat table", v1.IPv6Protocol, true, "0", noNAT, "no usable IPv6 nat table: ip6tables-nft-save: table `nat' does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := familyCheck{
				procRoot:  fakeProc(t, c.ipv6, c.disable),
				natUsable: func(context.Context, v1.IPFamily) error { return c.natErr },
			}
			err := fc.usable(c.family)
			switch {
			case c.wantReason == "" && err != nil:
				t.Errorf("usable(%s) = %v, want nil", c.family, err)
			case c.wantReason != "" && (err == nil || !strings.Contains(err.Error(), c.wantReason)):
				t.Errorf("usable(%s) = %v, want an error saying %q", c.family, err, c.wantReason)
			}
		})
	}
}

// TestIntegrationIPv6NATCheck: in a private network namespace, the real
// ip6tables nat table answers; with IPv6 disabled in the namespace the check
// says so.
func TestIntegrationIPv6NATCheck(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		if err := iptablesNATUsable(context.Background(), v1.IPv6Protocol); err != nil {
			t.Fatalf("ip6tables nat in a fresh namespace: %v", err)
		}
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := defaultFamilyCheck().usable(v1.IPv6Protocol); err == nil || !strings.Contains(err.Error(), "disabled") {
			t.Errorf("usable(IPv6) with disable_ipv6=1: %v, want disabled", err)
		}
	})
}
