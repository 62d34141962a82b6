package config

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecode: any input either fails to decode or decodes to a configuration
// that Encode writes and Decode reads back unchanged (what --write-config-to
// followed by --config relies on). Validation must not panic either.
func FuzzDecode(f *testing.F) {
	if data, err := os.ReadFile("testdata/all-fields.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(wantDefaultYAML))
	f.Add([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nipvs: {scheduler: mh, excludeCIDRs: [\"10.0.0.0/8\"]}\n"))
	f.Add([]byte(`{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"ipvs"}`))
	fg := featureGateForFuzz()
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Decode(data)
		if err != nil {
			return
		}
		_ = Validate(cfg, fg)
		out, err := Encode(cfg)
		if err != nil {
			t.Fatalf("Encode of a decoded config failed: %v", err)
		}
		back, err := Decode(out)
		if err != nil {
			t.Fatalf("Decode of Encode output failed: %v\n%s", err, out)
		}
		if diff := cmp.Diff(cfg, back); diff != "" {
			t.Fatalf("round trip changed the config (-decoded +reread):\n%s", diff)
		}
	})
}
