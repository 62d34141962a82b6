package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

func TestCheckTools(t *testing.T) {
	all := []string{"ipset",
		"iptables-nft", "iptables-nft-restore", "iptables-nft-save",
		"ip6tables-nft", "ip6tables-nft-restore", "ip6tables-nft-save"}
	without := func(drop ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range all {
			m[n] = true
		}
		for _, n := range drop {
			delete(m, n)
		}
		return m
	}
	dual := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	for _, tc := range []struct {
		name      string
		installed map[string]bool
		families  []v1.IPFamily
		want      []v1.IPFamily
		wantErr   string
	}{
		{"everything installed", without(), dual, dual, ""},
		{"no ipset", without("ipset"), dual, nil, "required tools not found in $PATH: ipset (the ipvs mode needs ipset and the iptables nft backend's binaries for IPv4)"},
		{"no iptables-restore", without("iptables-nft-restore", "iptables-nft-save"), dual, nil, "required tools not found in $PATH: iptables-nft-restore, iptables-nft-save ("},
		{"no ip6tables: IPv4 single-stack", without("ip6tables-nft-save"), dual, []v1.IPFamily{v1.IPv4Protocol}, ""},
		{"IPv6 primary needs ip6tables", without("ip6tables-nft"), []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}, nil, "required tools not found in $PATH: ip6tables-nft ("},
		{"IPv6 primary without iptables: IPv6 single-stack", without("iptables-nft"), []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}, []v1.IPFamily{v1.IPv6Protocol}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookPath := func(n string) (string, error) {
				if tc.installed[n] {
					return "/usr/sbin/" + n, nil
				}
				return "", errors.New("not found")
			}
			got, err := checkTools(klog.Background(), tc.families, iptables.ModeNFT, lookPath)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("families (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMissingToolsStopStartWithOneLine: on a node without ipset and iptables the
// daemon stops before creating the proxier, with one line naming what is missing
// (the legacy backend is chosen because its iptables-legacy-save is the only one
// installed).
func TestMissingToolsStopStartWithOneLine(t *testing.T) {
	t.Setenv(iptables.EnvMode, "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "iptables-legacy-save"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	env := newTestEnv(t, testNode())
	env.deps.newProvider = createProxier
	_, err := newProxyServer(context.Background(), testOptions(t, nil), env.deps)
	want := "creating the ipvs proxier: required tools not found in $PATH: ipset, iptables-legacy, iptables-legacy-restore (the ipvs mode needs ipset and the iptables legacy backend's binaries for IPv4)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if oneLine(err.Error()) != err.Error() {
		t.Errorf("error is not one line: %q", err)
	}
}
