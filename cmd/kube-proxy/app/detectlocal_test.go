package app

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// TestLocalDetectorArgs: what goes into the iptables text for each detect-local
// mode. Node podCIDRs come from the API: only CIDRs that parse reach the rules
// (in canonical form); an invalid one is logged and skipped.
func TestLocalDetectorArgs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     v1alpha1.LocalMode
		cluster  string
		podCIDRs []string
		bridge   string
		prefix   string
		family   v1.IPFamily
		want     []string
	}{
		{name: "cluster CIDR v4", cluster: "10.244.0.0/16,fd00:244::/56", family: v1.IPv4Protocol, want: []string{"!", "-s", "10.244.0.0/16"}},
		{name: "cluster CIDR v6", mode: "ClusterCIDR", cluster: "10.244.0.0/16,fd00:244::/56", family: v1.IPv6Protocol, want: []string{"!", "-s", "fd00:244::/56"}},
		{name: "cluster CIDR of the other family only", cluster: "10.244.0.0/16", family: v1.IPv6Protocol},
		{name: "cluster CIDR host bits masked", cluster: "10.244.3.7/16", family: v1.IPv4Protocol, want: []string{"!", "-s", "10.244.0.0/16"}},
		{name: "node CIDR", mode: "NodeCIDR", podCIDRs: []string{"10.244.1.0/24", "fd00:244:1::/64"}, family: v1.IPv6Protocol, want: []string{"!", "-s", "fd00:244:1::/64"}},
		{name: "node CIDR invalid entry skipped", mode: "NodeCIDR", podCIDRs: []string{"10.244.1.0/24 -j ACCEPT", "10.244.2.0/24"}, family: v1.IPv4Protocol, want: []string{"!", "-s", "10.244.2.0/24"}},
		{name: "node CIDR only invalid", mode: "NodeCIDR", podCIDRs: []string{"10.244.1.0", "not-a-cidr", "10.244.1.0/33"}, family: v1.IPv4Protocol},
		{name: "node CIDR newline", mode: "NodeCIDR", podCIDRs: []string{"10.244.1.0/24\n-A INPUT -j ACCEPT"}, family: v1.IPv4Protocol},
		{name: "IPv4-mapped cluster CIDR is IPv4", cluster: "::ffff:10.244.0.0/112", family: v1.IPv4Protocol, want: []string{"!", "-s", "10.244.0.0/16"}},
		{name: "IPv4-mapped cluster CIDR is not IPv6", cluster: "::ffff:10.244.0.0/112", family: v1.IPv6Protocol},
		{name: "bridge", mode: "BridgeInterface", bridge: "cbr0", family: v1.IPv4Protocol, want: []string{"!", "-i", "cbr0"}},
		{name: "prefix", mode: "InterfaceNamePrefix", prefix: "veth", family: v1.IPv6Protocol, want: []string{"!", "-i", "veth+"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &v1alpha1.KubeProxyConfiguration{DetectLocalMode: tc.mode, ClusterCIDR: tc.cluster}
			cfg.DetectLocal.BridgeInterface = tc.bridge
			cfg.DetectLocal.InterfaceNamePrefix = tc.prefix
			got := localDetectorArgs(klog.Background(), cfg, tc.podCIDRs, tc.family)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestBadInterfaceFlagsExitWithOneLine: an interface name that could not be a
// Linux link name stops the daemon at start, before it reaches iptables text.
func TestBadInterfaceFlagsExitWithOneLine(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cfg.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cbr0 -j ACCEPT"}, "detectLocal.bridgeInterface"},
		{[]string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=a-very-long-bridge0"}, "at most 15"},
		{[]string{"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth/"}, "detectLocal.interfaceNamePrefix"},
	} {
		code, _, stderr := run(t, append(tc.args, "--write-config-to", out)...)
		if code != 1 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 1 and one line containing %q", tc.args, code, stderr, tc.want)
		}
	}
	if code, _, stderr := run(t, "--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth", "--write-config-to", out); code != 0 {
		t.Errorf("valid prefix: exit %d, %s", code, stderr)
	}
}
