package config

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

const upstreamDoc = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
`

// TestDecodeAllReadsOurDocumentBeside: a --config file is upstream's
// KubeProxyConfiguration, unchanged, and at most one KubeProxyIPVSConfiguration
// beside it, strictly decoded; anything else is refused with an error that says why.
func TestDecodeAllReadsOurDocumentBeside(t *testing.T) {
	ours := "apiVersion: kube-proxy-ipvs.io/v1alpha1\nkind: KubeProxyIPVSConfiguration\nrulesBackend: nftables\nvirtualServerMetrics: true\n"
	for _, data := range []string{upstreamDoc + "---\n" + ours, "# ours first\n" + ours + "---\n" + upstreamDoc + "---\n"} {
		cfg, extras, err := DecodeAll([]byte(data))
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if cfg.Mode != "ipvs" || cfg.IPVS.SyncPeriod.Duration == 0 {
			t.Errorf("KubeProxyConfiguration not decoded and defaulted: mode %q syncPeriod %v", cfg.Mode, cfg.IPVS.SyncPeriod)
		}
		if extras == nil || extras.RulesBackend != "nftables" || !ptr.Deref(extras.VirtualServerMetrics, false) {
			t.Errorf("extras %+v", extras)
		}
	}
	if _, extras, err := DecodeAll([]byte(upstreamDoc)); err != nil || extras != nil {
		t.Errorf("upstream's file alone: extras %+v, %v", extras, err)
	}

	for name, tc := range map[string]struct{ data, want string }{
		"unknown field":    {upstreamDoc + "---\n" + ours + "rulesbackend: iptables\n", `unknown field "rulesbackend"`},
		"duplicate field":  {upstreamDoc + "---\n" + ours + "rulesBackend: iptables\n", "already set"},
		"bad backend":      {upstreamDoc + "---\napiVersion: kube-proxy-ipvs.io/v1alpha1\nkind: KubeProxyIPVSConfiguration\nrulesBackend: ebpf\n", `rulesBackend "ebpf": want iptables or nftables`},
		"wrong apiVersion": {upstreamDoc + "---\napiVersion: v1\nkind: KubeProxyIPVSConfiguration\n", `want kube-proxy-ipvs.io/v1alpha1`},
		"two of ours":      {upstreamDoc + "---\n" + ours + "---\n" + ours, "a second KubeProxyIPVSConfiguration"},
		"two upstream":     {upstreamDoc + "---\n" + upstreamDoc, "a second configuration"},
		"ours alone":       {ours, "no KubeProxyConfiguration"},
		"another kind":     {upstreamDoc + "---\napiVersion: v1\nkind: ConfigMap\n", "a second configuration (v1 ConfigMap)"},
	} {
		_, _, err := DecodeAll([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

// TestEncodeAllRoundTrips: what --write-config-to writes (both documents) reads back.
func TestEncodeAllRoundTrips(t *testing.T) {
	cfg, _, err := DecodeAll([]byte(upstreamDoc))
	if err != nil {
		t.Fatal(err)
	}
	e := NewExtras()
	e.RulesBackend, e.VirtualServerMetrics = "nftables", ptr.To(false)
	data, err := EncodeAll(cfg, e)
	if err != nil {
		t.Fatal(err)
	}
	back, backExtras, err := DecodeAll(data)
	if err != nil {
		t.Fatalf("%v in\n%s", err, data)
	}
	if back.Mode != cfg.Mode || backExtras == nil || backExtras.RulesBackend != "nftables" || backExtras.VirtualServerMetrics == nil || *backExtras.VirtualServerMetrics {
		t.Errorf("round trip: mode %q extras %+v from\n%s", back.Mode, backExtras, data)
	}
}
