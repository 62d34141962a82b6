package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func testFeatureGate(t *testing.T) featuregate.FeatureGate {
	t.Helper()
	return featureGateForFuzz()
}

func featureGateForFuzz() featuregate.FeatureGate {
	fg := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(fg); err != nil {
		panic(err)
	}
	return fg
}

// The defaults upstream's v1alpha1 defaulting produces for an empty file
// (compare pkg/proxy/apis/config/scheme/testdata/.../roundtrip/default/v1alpha1.yaml).
const wantDefaultYAML = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 10
  contentType: application/vnd.kubernetes.protobuf
  kubeconfig: ""
  qps: 5
clusterCIDR: ""
configSyncPeriod: 15m0s
conntrack:
  maxPerCore: 32768
  min: 131072
  tcpBeLiberal: false
  tcpCloseWaitTimeout: 1h0m0s
  tcpEstablishedTimeout: 24h0m0s
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: 0.0.0.0:10256
hostnameOverride: ""
iptables:
  localhostNodePorts: true
  masqueradeAll: false
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 30s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 5s
  format: text
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: 127.0.0.1:10249
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
nodePortAddresses: null
oomScoreAdj: -999
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`

func TestDefaultsMatchUpstream(t *testing.T) {
	cfg, err := Decode([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Encode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDefaultYAML, string(got)); diff != "" {
		t.Errorf("defaulted empty config (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(NewDefaultConfiguration(), cfg); diff != "" {
		t.Errorf("NewDefaultConfiguration differs from a decoded empty file (-want +got):\n%s", diff)
	}
}

func TestDefaultsIPv6BindAddress(t *testing.T) {
	cfg := &v1alpha1.KubeProxyConfiguration{BindAddress: "fd00::1"}
	SetDefaults(cfg)
	if cfg.HealthzBindAddress != "[::]:10256" || cfg.MetricsBindAddress != "[::1]:10249" {
		t.Errorf("IPv6 defaults: healthz %q metrics %q", cfg.HealthzBindAddress, cfg.MetricsBindAddress)
	}
	cfg = &v1alpha1.KubeProxyConfiguration{HealthzBindAddress: "10.0.0.1", MetricsBindAddress: "::1"}
	SetDefaults(cfg)
	if cfg.HealthzBindAddress != "10.0.0.1:10256" || cfg.MetricsBindAddress != "[::1]:10249" {
		t.Errorf("bare IPs get the default port: healthz %q metrics %q", cfg.HealthzBindAddress, cfg.MetricsBindAddress)
	}
}

// jsonKeys lists the JSON paths of every field of t, descending into structs and
// the element type of slices of structs. Types with their own JSON form
// (durations, quantities) are leaves.
func jsonKeys(t reflect.Type, prefix string) []string {
	marshaler := reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) {
		return nil
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
		return jsonKeys(t.Elem(), prefix+"[0]")
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && f.Anonymous {
			keys = append(keys, jsonKeys(f.Type, prefix)...)
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		keys = append(keys, path)
		keys = append(keys, jsonKeys(f.Type, path)...)
	}
	return keys
}

func lookup(doc any, path string) bool {
	for _, part := range strings.Split(path, ".") {
		name, index, isIndex := strings.Cut(part, "[")
		m, ok := doc.(map[string]any)
		if !ok {
			return false
		}
		if doc, ok = m[name]; !ok {
			return false
		}
		if isIndex && index == "0]" {
			l, ok := doc.([]any)
			if !ok || len(l) == 0 {
				return false
			}
			doc = l[0]
		}
	}
	return true
}

func TestAllFieldsConfigLoads(t *testing.T) {
	path := filepath.Join("testdata", "all-fields.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, key := range jsonKeys(reflect.TypeOf(v1alpha1.KubeProxyConfiguration{}), "") {
		if !lookup(doc, key) {
			missing = append(missing, key)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s does not set these fields: %s", path, strings.Join(missing, ", "))
	}

	cfg, err := LoadFile(path)
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	if errs := Validate(cfg, testFeatureGate(t)); len(errs) > 0 {
		t.Fatalf("all-fields config does not validate: %v", errs.ToAggregate())
	}
	// Spot-check that values arrive, including nested and pointer fields.
	checks := []struct {
		name      string
		got, want any
	}{
		{"ipvs.scheduler", cfg.IPVS.Scheduler, "wrr"},
		{"ipvs.minSyncPeriod", cfg.IPVS.MinSyncPeriod.Duration, time.Second},
		{"ipvs.excludeCIDRs", cfg.IPVS.ExcludeCIDRs, []string{"10.200.0.0/16", "fd00:200::/64"}},
		{"iptables.masqueradeBit", *cfg.IPTables.MasqueradeBit, int32(15)},
		{"iptables.localhostNodePorts", *cfg.IPTables.LocalhostNodePorts, false},
		{"conntrack.tcpCloseWaitTimeout", cfg.Conntrack.TCPCloseWaitTimeout.Duration, 30 * time.Minute},
		{"conntrack.udpStreamTimeout", cfg.Conntrack.UDPStreamTimeout.Duration, 2 * time.Minute},
		{"oomScoreAdj", *cfg.OOMScoreAdj, int32(-500)},
		{"clientConnection.qps", cfg.ClientConnection.QPS, float32(50)},
		{"logging.verbosity", int(cfg.Logging.Verbosity), 2},
		{"logging.vmodule", cfg.Logging.VModule[0].FilePattern, "proxier*"},
		{"featureGates", cfg.FeatureGates, map[string]bool{"KubeProxyIPVS": true}},
		{"windowsRunAsService", cfg.WindowsRunAsService, true},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, path := range []string{"testdata/all-fields.yaml", ""} {
		var cfg *v1alpha1.KubeProxyConfiguration
		if path == "" {
			cfg = NewDefaultConfiguration()
		} else {
			var err error
			if cfg, err = LoadFile(path); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(t.TempDir(), "config.yaml")
		if err := WriteFile(out, cfg, nil); err != nil {
			t.Fatal(err)
		}
		back, err := LoadFile(out)
		if err != nil {
			t.Fatalf("reading back what Encode wrote: %v", err)
		}
		if diff := cmp.Diff(cfg, back); diff != "" {
			t.Errorf("%q: round trip changed the config (-before +after):\n%s", path, diff)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	header := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	cases := []struct {
		name, data string
		want       []string // substrings of the error
	}{
		{"unknown field", header + "ipvs:\n  schedular: rr\n", []string{`unknown field "ipvs.schedular"`}},
		{"unknown top-level field", header + "udpIdleTimeout: 250ms\n", []string{`unknown field "udpIdleTimeout"`}},
		{"duplicate field", header + "mode: ipvs\nmode: iptables\n", []string{`"mode"`, "already set"}},
		{"wrong type", header + "oomScoreAdj: lots\n", []string{"oomScoreAdj"}},
		{"missing kind", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n", []string{"Kind"}},
		{"wrong group", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", []string{"no kind"}},
		{"empty", "  \n", []string{"empty configuration"}},
		{"not yaml", "{{{", []string{"decoding KubeProxyConfiguration"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kube-proxy.yaml")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadFile(path)
			if err == nil {
				t.Fatalf("LoadFile accepted %q", tc.data)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("missing file: error %v does not name the file", err)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*v1alpha1.KubeProxyConfiguration)
		want   string // substring; "" means valid
	}{
		{"defaults", func(*v1alpha1.KubeProxyConfiguration) {}, ""},
		{"ipvs mode", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "ipvs" }, ""},
		{"iptables mode", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "iptables" }, "ipvs mode only"},
		{"every kernel scheduler", func(c *v1alpha1.KubeProxyConfiguration) { c.IPVS.Scheduler = "mh" }, ""},
		{"unknown scheduler", func(c *v1alpha1.KubeProxyConfiguration) { c.IPVS.Scheduler = "fastest" }, `ipvs.scheduler: Unsupported value: "fastest"`},
		{"bad exclude cidr", func(c *v1alpha1.KubeProxyConfiguration) { c.IPVS.ExcludeCIDRs = []string{"10.0.0.0/8", "10.0.0.0/33"} }, "ipvs.excludeCIDRs[1]"},
		{"zero sync period", func(c *v1alpha1.KubeProxyConfiguration) { c.IPVS.SyncPeriod.Duration = 0 }, "ipvs.syncPeriod"},
		{"min above sync", func(c *v1alpha1.KubeProxyConfiguration) { c.IPVS.MinSyncPeriod.Duration = time.Hour }, "ipvs.minSyncPeriod"},
		{"negative tcp timeout", func(c *v1alpha1.KubeProxyConfiguration) { c.IPVS.TCPTimeout.Duration = -time.Second }, "ipvs.tcpTimeout"},
		{"masquerade bit 32", func(c *v1alpha1.KubeProxyConfiguration) { c.IPTables.MasqueradeBit = ptr.To[int32](32) }, "iptables.masqueradeBit"},
		{"masquerade bit -1", func(c *v1alpha1.KubeProxyConfiguration) { c.IPTables.MasqueradeBit = ptr.To[int32](-1) }, "iptables.masqueradeBit"},
		{"oom score", func(c *v1alpha1.KubeProxyConfiguration) { c.OOMScoreAdj = ptr.To[int32](1001) }, "oomScoreAdj"},
		{"conntrack negative", func(c *v1alpha1.KubeProxyConfiguration) { c.Conntrack.MaxPerCore = ptr.To[int32](-1) }, "conntrack.maxPerCore"},
		{"conntrack udp timeout", func(c *v1alpha1.KubeProxyConfiguration) { c.Conntrack.UDPTimeout.Duration = -1 }, "conntrack.udpTimeout"},
		{"config sync period", func(c *v1alpha1.KubeProxyConfiguration) { c.ConfigSyncPeriod.Duration = 0 }, "configSyncPeriod"},
		{"bind address", func(c *v1alpha1.KubeProxyConfiguration) { c.BindAddress = "node-a" }, "bindAddress"},
		{"healthz no port", func(c *v1alpha1.KubeProxyConfiguration) { c.HealthzBindAddress = "0.0.0.0" }, "healthzBindAddress"},
		{"healthz bad host", func(c *v1alpha1.KubeProxyConfiguration) { c.HealthzBindAddress = "localhost:10256" }, "healthzBindAddress"},
		{"metrics bad port", func(c *v1alpha1.KubeProxyConfiguration) { c.MetricsBindAddress = "127.0.0.1:70000" }, "metricsBindAddress"},
		{"metrics disabled", func(c *v1alpha1.KubeProxyConfiguration) { c.MetricsBindAddress = "" }, ""},
		{"cluster cidr", func(c *v1alpha1.KubeProxyConfiguration) { c.ClusterCIDR = "10.244.0.0/16,fd00::/56" }, ""},
		{"cluster cidr bad", func(c *v1alpha1.KubeProxyConfiguration) { c.ClusterCIDR = "10.244.0.0" }, "clusterCIDR"},
		{"cluster cidr two v4", func(c *v1alpha1.KubeProxyConfiguration) { c.ClusterCIDR = "10.0.0.0/8,11.0.0.0/8" }, "one IPv4 and one IPv6"},
		{"cluster cidr three", func(c *v1alpha1.KubeProxyConfiguration) { c.ClusterCIDR = "10.0.0.0/8,fd00::/8,11.0.0.0/8" }, "clusterCIDR"},
		{"nodeport primary", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"primary"} }, ""},
		{"nodeport bad", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"192.168.0.0/16", "eth0"} }, "nodePortAddresses[1]"},
		{"detect local bad", func(c *v1alpha1.KubeProxyConfiguration) { c.DetectLocalMode = "Magic" }, "detectLocalMode"},
		{"bridge without name", func(c *v1alpha1.KubeProxyConfiguration) { c.DetectLocalMode = LocalModeBridgeInterface }, "detectLocal.bridgeInterface"},
		{"prefix without name", func(c *v1alpha1.KubeProxyConfiguration) { c.DetectLocalMode = LocalModeInterfaceNamePrefix }, "detectLocal.interfaceNamePrefix"},
		{"hidden metrics", func(c *v1alpha1.KubeProxyConfiguration) { c.ShowHiddenMetricsForVersion = "1.30" }, "showHiddenMetricsForVersion"},
		{"port range", func(c *v1alpha1.KubeProxyConfiguration) { c.PortRange = "abc" }, "portRange"},
		{"logging format", func(c *v1alpha1.KubeProxyConfiguration) { c.Logging.Format = "xml" }, "logging.format"},
		{"negative burst", func(c *v1alpha1.KubeProxyConfiguration) { c.ClientConnection.Burst = -1 }, "clientConnection.burst"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := NewDefaultConfiguration()
			tc.mutate(cfg)
			errs := Validate(cfg, testFeatureGate(t))
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("unexpected errors: %v", errs.ToAggregate())
			case tc.want != "" && len(errs) == 0:
				t.Errorf("accepted, want error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(errs.ToAggregate().Error(), tc.want):
				t.Errorf("error %q does not contain %q", errs.ToAggregate(), tc.want)
			}
		})
	}
}

func TestAllFieldsExampleIsTheTestdataFile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "all-fields.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(AllFieldsExample) {
		t.Error("AllFieldsExample differs from testdata/all-fields.yaml")
	}
}

// TestDetectLocalInterfaceNames: a detectLocal interface name or prefix goes
// into iptables-restore text as "-i NAME" / "-i PREFIX+", so only names the
// kernel could have (and that stay one plain word) are accepted.
func TestDetectLocalInterfaceNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix bool
		want   string // "" = valid, else part of the error
	}{
		{"cbr0", false, ""},
		{"br-0a1b2c3d4e5f", false, ""},
		{"eth0.100", false, ""},
		{"vxlan_calico-1", false, ""},
		{"a23456789012345", false, ""}, // 15: the kernel's maximum
		{"a234567890123456", false, "at most 15"},
		{"veth", true, ""},
		{"a2345678901234", true, ""}, // 14 + "+" = 15
		{"a23456789012345", true, "at most 14"},
		{".", false, "not a valid"},
		{"..", false, "not a valid"},
		{"eth/0", false, `contains '/'`},
		{"eth:0", false, `contains ':'`},
		{"eth 0", false, `contains ' '`},
		{"eth\t0", false, `contains '\t'`},
		{"eth0\n-A INPUT", false, `contains '\n'`},
		{`eth"0`, false, `contains '"'`},
		{"eth'0", false, `contains '\''`},
		{`eth\0`, false, `contains '\\'`},
		{"!eth0", false, `contains '!'`},
		{"ethé", false, `contains 'é'`},
		{"br+", false, "must not end in '+'"},
		{"cali+", true, ""}, // a literal '+' inside a prefix is a valid name character
	} {
		err := ValidateInterfaceName(tc.name, tc.prefix)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q (prefix %v): %v", tc.name, tc.prefix, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q (prefix %v): %v, want an error containing %q", tc.name, tc.prefix, err, tc.want)
		}
	}

	// Through Validate: the field is named.
	cfg := NewDefaultConfiguration()
	cfg.DetectLocalMode = LocalModeBridgeInterface
	cfg.DetectLocal.BridgeInterface = "cbr0 -j ACCEPT"
	if errs := Validate(cfg, testFeatureGate(t)); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "detectLocal.bridgeInterface") {
		t.Errorf("bridgeInterface with blanks: %v", errs.ToAggregate())
	}
	cfg = NewDefaultConfiguration()
	cfg.DetectLocalMode = LocalModeInterfaceNamePrefix
	cfg.DetectLocal.InterfaceNamePrefix = "veth/"
	if errs := Validate(cfg, testFeatureGate(t)); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "detectLocal.interfaceNamePrefix") {
		t.Errorf("interfaceNamePrefix with '/': %v", errs.ToAggregate())
	}
}
