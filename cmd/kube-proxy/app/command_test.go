package app

import (
	"bytes"
	"fmt"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"

	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
)

// run executes the command in-process and returns exit code, stdout, stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Execute(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// upstreamFlags is every flag of upstream kube-proxy v1.37.2 on Linux:
// cmd/kube-proxy/app/options.go, the component-base logging flags
// (logsapi.AddFlags with the JSON format registered) and --version/--help.
var upstreamFlags = []string{
	"bind-address", "bind-address-hard-fail", "cleanup", "cluster-cidr", "config",
	"config-sync-period", "conntrack-max-per-core", "conntrack-min",
	"conntrack-tcp-be-liberal", "conntrack-tcp-timeout-close-wait",
	"conntrack-tcp-timeout-established", "conntrack-udp-timeout",
	"conntrack-udp-timeout-stream", "detect-local-mode", "feature-gates",
	"healthz-bind-address", "healthz-port", "help", "hostname-override", "init-only",
	"iptables-localhost-nodeports", "iptables-masquerade-bit", "iptables-min-sync-period",
	"iptables-sync-period", "ipvs-exclude-cidrs", "ipvs-min-sync-period", "ipvs-scheduler",
	"ipvs-strict-arp", "ipvs-sync-period", "ipvs-tcp-timeout", "ipvs-tcpfin-timeout",
	"ipvs-udp-timeout", "kube-api-burst", "kube-api-content-type", "kube-api-qps",
	"kubeconfig", "log-flush-frequency", "log-json-info-buffer-size",
	"log-json-split-stream", "log-text-info-buffer-size", "log-text-split-stream",
	"logging-format", "masquerade-all", "master", "metrics-bind-address", "metrics-port",
	"nodeport-addresses", "oom-score-adj", "pod-bridge-interface",
	"pod-interface-name-prefix", "profiling", "proxy-mode",
	"show-hidden-metrics-for-version", "v", "version", "vmodule", "write-config-to",
}

func TestHelpListsEveryUpstreamFlag(t *testing.T) {
	code, out, errOut := run(t, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d: %s", code, errOut)
	}
	for _, f := range upstreamFlags {
		if f == "healthz-port" || f == "metrics-port" {
			continue // deprecated flags are hidden from --help, as upstream
		}
		if !strings.Contains(out, "--"+f+" ") && !strings.Contains(out, "--"+f+"\n") {
			t.Errorf("--help does not list --%s", f)
		}
	}
	for _, want := range []string{"-v, --v Level", "PreferSameTrafficDistribution=true|false (BETA - default=true)", "--ipvs-scheduler string", "--healthz-bind-address ipport", "--proxy-mode ProxyMode"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not contain %q", want)
		}
	}
	// Every flag, including deprecated ones, is registered and parses.
	cmd := NewProxyCommand(nil, &bytes.Buffer{}, &bytes.Buffer{})
	cmd.InitDefaultHelpFlag()
	for _, f := range upstreamFlags {
		if cmd.Flags().Lookup(f) == nil {
			t.Errorf("flag --%s is not registered", f)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const configHeader = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// TestBadInputExitsOneWithOneLine runs the command on every kind of bad input
// and checks exit code 1, exactly one line on stderr, no stack trace, and the
// message.
func TestBadInputExitsOneWithOneLine(t *testing.T) {
	badConfig := writeFile(t, "bad.yaml", configHeader+"ipvs:\n  scheduler: rr\n  schedular: wrr\n")
	dupConfig := writeFile(t, "dup.yaml", configHeader+"mode: ipvs\nmode: ipvs\n")
	modeConfig := writeFile(t, "mode.yaml", configHeader+"mode: nftables\n")
	invalidInFile := writeFile(t, "invalid.yaml", configHeader+"iptables:\n  masqueradeBit: 99\n")
	unreadable := filepath.Join(t.TempDir(), "dir.yaml")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"iptables mode", []string{"--proxy-mode=iptables"}, []string{`proxy mode "iptables" is not supported`, "ipvs mode only"}},
		{"nftables mode", []string{"--proxy-mode", "nftables"}, []string{"ipvs mode only"}},
		{"mode from file", []string{"--config", modeConfig}, []string{`"nftables"`, "ipvs mode only"}},
		{"unknown scheduler", []string{"--ipvs-scheduler=fastest"}, []string{"ipvs.scheduler", `"fastest"`, `"mh"`}},
		{"bad exclude cidr", []string{"--ipvs-exclude-cidrs=10.0.0.0/8,300.0.0.0/8"}, []string{"ipvs.excludeCIDRs[1]", "300.0.0.0/8"}},
		{"bad cluster cidr", []string{"--cluster-cidr=10.244.0.0/33"}, []string{"clusterCIDR", "10.244.0.0/33"}},
		{"two v4 cluster cidrs", []string{"--cluster-cidr=10.0.0.0/8,11.0.0.0/8"}, []string{"clusterCIDR", "one IPv4 and one IPv6"}},
		{"bad nodeport address", []string{"--nodeport-addresses=10.0.0.0/8,eth0"}, []string{"nodePortAddresses[1]", "eth0"}},
		{"masquerade bit 32", []string{"--iptables-masquerade-bit=32"}, []string{"iptables.masqueradeBit", "[0, 31]"}},
		{"masquerade bit negative", []string{"--iptables-masquerade-bit=-1"}, []string{"iptables.masqueradeBit"}},
		{"min sync above sync", []string{"--ipvs-sync-period=10s", "--ipvs-min-sync-period=1m"}, []string{"ipvs.minSyncPeriod", "ipvs.syncPeriod"}},
		{"zero sync period", []string{"--ipvs-sync-period=0s"}, []string{"ipvs.syncPeriod", "greater than 0"}},
		{"bad healthz address", []string{"--healthz-bind-address=localhost:10256"}, []string{"--healthz-bind-address", "ip or ip:port"}},
		{"bad metrics port", []string{"--metrics-bind-address=127.0.0.1:99999"}, []string{"metricsBindAddress", "99999"}},
		{"bad bind address", []string{"--bind-address=node-a"}, []string{"--bind-address", "not a valid IP"}},
		{"negative ipvs timeout", []string{"--ipvs-tcpfin-timeout=-5s"}, []string{"ipvs.tcpFinTimeout"}},
		{"negative conntrack timeout", []string{"--conntrack-udp-timeout=-1s"}, []string{"conntrack.udpTimeout"}},
		{"negative conntrack max", []string{"--conntrack-max-per-core=-1"}, []string{"conntrack.maxPerCore"}},
		{"oom score", []string{"--oom-score-adj=-1001"}, []string{"oomScoreAdj"}},
		{"config sync period", []string{"--config-sync-period=0"}, []string{"configSyncPeriod"}},
		{"bad detect-local-mode", []string{"--detect-local-mode=Magic"}, []string{"detectLocalMode", `"Magic"`}},
		{"bridge mode without bridge", []string{"--detect-local-mode=BridgeInterface"}, []string{"detectLocal.bridgeInterface"}},
		{"unknown feature gate", []string{"--feature-gates=NoSuchGate=true"}, []string{"feature gates", "NoSuchGate"}},
		{"ipvs gate off", []string{"--feature-gates=KubeProxyIPVS=false"}, []string{"KubeProxyIPVS", "ipvs mode only"}},
		{"hidden metrics version", []string{"--show-hidden-metrics-for-version=1.20"}, []string{"showHiddenMetricsForVersion"}},
		{"logging format", []string{"--logging-format=xml"}, []string{"logging.format"}},
		{"empty hostname override", []string{"--hostname-override=  "}, []string{"hostname-override"}},
		{"missing config file", []string{"--config=/nonexistent/kube-proxy.yaml"}, []string{"/nonexistent/kube-proxy.yaml"}},
		{"unreadable config file", []string{"--config", unreadable}, []string{unreadable}},
		{"unknown config field", []string{"--config", badConfig}, []string{badConfig, `unknown field "ipvs.schedular"`}},
		{"duplicate config field", []string{"--config", dupConfig}, []string{dupConfig, `"mode"`}},
		{"invalid value in file", []string{"--config", invalidInFile}, []string{invalidInFile, "iptables.masqueradeBit"}},
		{"unknown flag", []string{"--proxy-mod=ipvs"}, []string{"unknown flag: --proxy-mod"}},
		{"bad duration", []string{"--ipvs-sync-period=soon"}, []string{"--ipvs-sync-period"}},
		{"positional argument", []string{"ipvs"}, []string{"does not take any arguments"}},
		{"bad --version value", []string{"--version=latest"}, []string{"--version"}},
		{"unknown rules backend", []string{"--ipvs-rules-backend=pf"}, []string{"--ipvs-rules-backend", `"pf"`, "iptables or nftables"}},
		{"empty rules backend", []string{"--ipvs-rules-backend="}, []string{"--ipvs-rules-backend", "iptables or nftables"}},
		{"rules backend over a config file", []string{"--config", writeFile(t, "ok.yaml", configHeader), "--ipvs-rules-backend=NFTables"}, []string{`"NFTables"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, tc.args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1 (stderr %q)", code, errOut)
			}
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "kube-proxy: ") {
				t.Errorf("stderr is not one 'kube-proxy: ...' line: %q", errOut)
			}
			if strings.Contains(errOut, "goroutine ") || strings.Contains(errOut, "panic") {
				t.Errorf("stderr has a stack trace: %q", errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not contain %q", errOut, w)
				}
			}
		})
	}
}

func writeConfig(t *testing.T, args ...string) *v1alpha1.KubeProxyConfiguration {
	t.Helper()
	out := filepath.Join(t.TempDir(), "written.yaml")
	code, stdout, stderr := run(t, append(args, "--write-config-to", out)...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	if !strings.Contains(stdout, out) {
		t.Errorf("stdout %q does not name %s", stdout, out)
	}
	cfg, err := proxyconfigapi.LoadFile(out)
	if err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	return cfg
}

func TestWriteConfigRoundTrips(t *testing.T) {
	for name, args := range map[string][]string{
		"defaults":   nil,
		"flags":      {"--proxy-mode=ipvs", "--ipvs-scheduler=mh", "--ipvs-exclude-cidrs=10.1.0.0/16,fd00:1::/64", "--cluster-cidr=10.244.0.0/16,fd00:244::/56", "--nodeport-addresses=primary", "--masquerade-all", "--v=3", "--feature-gates=AllBeta=false", "--conntrack-udp-timeout=30s"},
		"all fields": {"--config", writeFile(t, "all-fields.yaml", string(proxyconfigapi.AllFieldsExample))},
	} {
		t.Run(name, func(t *testing.T) {
			first := writeConfig(t, args...)
			tmp := filepath.Join(t.TempDir(), "first.yaml")
			if err := proxyconfigapi.WriteFile(tmp, first, nil); err != nil {
				t.Fatal(err)
			}
			second := writeConfig(t, "--config", tmp)
			if diff := cmp.Diff(first, second); diff != "" {
				t.Errorf("--write-config-to output changed after going through --config (-first +second):\n%s", diff)
			}
		})
	}
}

func TestDefaultsWithoutConfig(t *testing.T) {
	got := writeConfig(t)
	want := proxyconfigapi.NewDefaultConfiguration()
	// The one place upstream's flag defaults differ from its v1alpha1 file
	// defaults: --ipvs-min-sync-period is 1s, a file's ipvs.minSyncPeriod 0.
	want.IPVS.MinSyncPeriod.Duration = time.Second
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flags' defaults differ from the v1alpha1 defaults (-want +got):\n%s", diff)
	}
}

// TestIPVSMinSyncPeriodDefault: 1s with flags only (upstream's --help says
// "(default 1s)"), 0 from a file that does not set it, and the flag or the
// file's value when given.
func TestIPVSMinSyncPeriodDefault(t *testing.T) {
	fileWithout := writeFile(t, "without.yaml", configHeader+"mode: ipvs\n")
	fileWith := writeFile(t, "with.yaml", configHeader+"mode: ipvs\nipvs:\n  minSyncPeriod: 3s\n")
	for _, c := range []struct {
		name string
		args []string
		want time.Duration
	}{
		{"flags only", nil, time.Second},
		{"flags only, --proxy-mode=ipvs", []string{"--proxy-mode=ipvs"}, time.Second},
		{"flag given", []string{"--ipvs-min-sync-period=250ms"}, 250 * time.Millisecond},
		{"file without minSyncPeriod", []string{"--config", fileWithout}, 0},
		{"file with minSyncPeriod", []string{"--config", fileWith}, 3 * time.Second},
		{"file and flag", []string{"--config", fileWith, "--ipvs-min-sync-period=2s"}, 2 * time.Second},
	} {
		if got := writeConfig(t, c.args...).IPVS.MinSyncPeriod.Duration; got != c.want {
			t.Errorf("%s: ipvs.minSyncPeriod = %v, want %v", c.name, got, c.want)
		}
	}
	// A sync period below the flag default needs the min sync period lowered too,
	// as upstream requires.
	if code, _, stderr := run(t, "--ipvs-sync-period=500ms", "--write-config-to", filepath.Join(t.TempDir(), "x")); code != 1 || !strings.Contains(stderr, "minSyncPeriod") {
		t.Errorf("--ipvs-sync-period=500ms with the 1s default min: exit %d, stderr %q; want exit 1 naming minSyncPeriod", code, stderr)
	}
}

func TestFlagsOverrideConfigFile(t *testing.T) {
	file := writeFile(t, "kube-proxy.yaml", configHeader+`mode: ipvs
ipvs:
  scheduler: wrr
  syncPeriod: 20s
  excludeCIDRs: [10.9.0.0/16]
iptables:
  masqueradeBit: 15
hostnameOverride: From-File
metricsBindAddress: 0.0.0.0:10249
logging:
  verbosity: 2
`)
	got := writeConfig(t, "--config", file, "--ipvs-scheduler=lc", "--ipvs-exclude-cidrs=10.8.0.0/16,10.7.0.0/16", "--hostname-override=Node-B", "--v=4")
	checks := []struct {
		name      string
		got, want any
	}{
		{"flag wins: scheduler", got.IPVS.Scheduler, "lc"},
		{"flag wins: excludeCIDRs replaced, not appended", got.IPVS.ExcludeCIDRs, []string{"10.8.0.0/16", "10.7.0.0/16"}},
		{"flag wins: hostname lowercased", got.HostnameOverride, "node-b"},
		{"flag wins: verbosity", int(got.Logging.Verbosity), 4},
		{"file kept: syncPeriod", got.IPVS.SyncPeriod.Duration.String(), "20s"},
		{"file kept: masqueradeBit", *got.IPTables.MasqueradeBit, int32(15)},
		{"file kept: metricsBindAddress", got.MetricsBindAddress, "0.0.0.0:10249"},
		{"file defaulted: healthz", got.HealthzBindAddress, "0.0.0.0:10256"},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// writtenYAML runs --write-config-to and returns the file as text (loading it
// back would re-default the addresses that flags disabled).
func writtenYAML(t *testing.T, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "written.yaml")
	if code, _, stderr := run(t, append(args, "--write-config-to", out)...); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDeprecatedPortFlags(t *testing.T) {
	if y := writtenYAML(t, "--healthz-port=0"); !strings.Contains(y, "healthzBindAddress: \"\"\n") {
		t.Errorf("--healthz-port=0 should disable healthz:\n%s", y)
	}
	got := writeConfig(t, "--metrics-port=12345", "--metrics-bind-address=127.0.0.2")
	if got.MetricsBindAddress != "127.0.0.2:12345" {
		t.Errorf("--metrics-port=12345: metricsBindAddress %q, want 127.0.0.2:12345", got.MetricsBindAddress)
	}
	var stderr bytes.Buffer
	Execute([]string{"--healthz-port=1", "--write-config-to", filepath.Join(t.TempDir(), "x")}, &bytes.Buffer{}, &stderr)
	if !strings.Contains(stderr.String(), "Flag --healthz-port has been deprecated") || !strings.Contains(stderr.String(), "--healthz-bind-address") {
		t.Errorf("no upstream deprecation message: %q", stderr.String())
	}
	if n := strings.Count(stderr.String(), "Flag --healthz-port has been deprecated"); n != 1 {
		t.Errorf("deprecation printed %d times: %q", n, stderr.String())
	}
}

func TestBareIPBindAddressesGetPorts(t *testing.T) {
	got := writeConfig(t, "--healthz-bind-address=::", "--metrics-bind-address=0.0.0.0")
	if got.HealthzBindAddress != "[::]:10256" || got.MetricsBindAddress != "0.0.0.0:10249" {
		t.Errorf("healthz %q metrics %q", got.HealthzBindAddress, got.MetricsBindAddress)
	}
	if y := writtenYAML(t, "--metrics-bind-address="); !strings.Contains(y, "metricsBindAddress: \"\"\n") {
		t.Errorf("--metrics-bind-address= should disable metrics:\n%s", y)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "--version")
	if code != 0 || !strings.Contains(out, "kube-proxy v1.37.2") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	code, out, _ = run(t, "--version=raw")
	if code != 0 || !strings.Contains(out, "version.Info") {
		t.Errorf("--version=raw: exit %d, %q", code, out)
	}
}

// TestIntegrationCleanupInNamespace runs --cleanup for real, in a private network
// namespace (never the host's): with nothing to remove it exits 0.
func TestIntegrationCleanupInNamespace(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		// The run path applies the logging configuration, which is once per process.
		resetLogging := func() {
			if err := logsapi.ResetForTest(newFeatureGate()); err != nil {
				t.Fatal(err)
			}
		}
		resetLogging()
		t.Cleanup(resetLogging)
		code, _, errOut := run(t, "--cleanup")
		if code != 0 {
			t.Errorf("--cleanup: exit %d, %q", code, errOut)
		}
	})
}

// TestKubernetesFeatureGatesAccepted: gates upstream kube-proxy accepts without using
// (a kubelet gate passed cluster-wide) are accepted and kept in the configuration, our
// own gates still take effect, and a name no Kubernetes component knows is still
// rejected (the "unknown feature gate" case above).
func TestKubernetesFeatureGatesAccepted(t *testing.T) {
	cfg := writeConfig(t, "--feature-gates=InPlacePodVerticalScaling=true,AllBeta=false,KubeProxyNFTablesLocalhostNodePorts=true")
	for name, want := range map[string]bool{"InPlacePodVerticalScaling": true, "AllBeta": false, "KubeProxyNFTablesLocalhostNodePorts": true} {
		if got, ok := cfg.FeatureGates[name]; !ok || got != want {
			t.Errorf("featureGates[%s] = %v (present %v), want %v", name, got, ok, want)
		}
	}
	fg := newFeatureGate()
	gates, inert := splitFeatureGates(map[string]bool{"InPlacePodVerticalScaling": true, "KubeProxyIPVS": true, "NoSuchGate": true}, fg)
	if strings.Join(inert, ",") != "InPlacePodVerticalScaling" || len(gates) != 2 || !gates["KubeProxyIPVS"] || !gates["NoSuchGate"] {
		t.Errorf("split = %v, inert %v; want KubeProxyIPVS and NoSuchGate kept for the gate, InPlacePodVerticalScaling inert", gates, inert)
	}
	if len(knownKubernetesFeatureGates) < 200 {
		t.Errorf("only %d known Kubernetes gates: regenerate with hack/update-known-feature-gates.sh", len(knownKubernetesFeatureGates))
	}
}

// TestRulesBackendFlag: --ipvs-rules-backend takes iptables (the default) and
// nftables, on its own and over a --config file, and reaches the ProxyServer.
func TestRulesBackendFlag(t *testing.T) {
	cfgFile := writeFile(t, "cfg.yaml", configHeader)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "iptables"},
		{[]string{"--ipvs-rules-backend=nftables"}, "nftables"},
		{[]string{"--ipvs-rules-backend", "iptables"}, "iptables"},
		{[]string{"--config", cfgFile, "--ipvs-rules-backend=nftables"}, "nftables"},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		r := &invocation{opts: newOptions(proxyconfigapi.NewFlagDefaultConfiguration(), newFeatureGate()), args: c.args}
		r.opts.AddFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if err := r.complete(fs); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if err := r.validate(); err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
		if r.opts.RulesBackend != c.want {
			t.Errorf("%v: backend %q, want %q", c.args, r.opts.RulesBackend, c.want)
		}
	}
}

// TestExtrasInConfigFiles: our own settings (--ipvs-rules-backend,
// --ipvs-virtual-server-metrics, --ipvs-warm-start) are written by --write-config-to as a
// KubeProxyIPVSConfiguration beside the KubeProxyConfiguration and read back from
// it, from an --ipvs-config file (which wins over the --config file's document),
// and a flag given on the command line wins over both.
func TestExtrasInConfigFiles(t *testing.T) {
	ours := func(backend string, metrics bool) string {
		return fmt.Sprintf("apiVersion: kube-proxy-ipvs.io/v1alpha1\nkind: KubeProxyIPVSConfiguration\nrulesBackend: %s\nvirtualServerMetrics: %v\n", backend, metrics)
	}
	upstream := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n"
	written := func(args ...string) *proxyconfigapi.Extras {
		t.Helper()
		out := filepath.Join(t.TempDir(), "written.yaml")
		if code, _, stderr := run(t, append(args, "--write-config-to", out)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		_, e, err := proxyconfigapi.LoadFileAll(out)
		if err != nil || e == nil || e.VirtualServerMetrics == nil {
			t.Fatalf("%v: the written file: extras %+v, %v", args, e, err)
		}
		return e
	}
	check := func(name string, e *proxyconfigapi.Extras, backend string, metrics bool) {
		t.Helper()
		if e.RulesBackend != backend || *e.VirtualServerMetrics != metrics {
			t.Errorf("%s: rulesBackend %q virtualServerMetrics %v, want %q %v", name, e.RulesBackend, *e.VirtualServerMetrics, backend, metrics)
		}
	}
	check("defaults", written(), "iptables", false)
	check("flags", written("--ipvs-rules-backend=nftables", "--ipvs-virtual-server-metrics"), "nftables", true)
	both := writeFile(t, "both.yaml", upstream+"---\n"+ours("nftables", true))
	check("--config document", written("--config", both), "nftables", true)
	check("flag over --config", written("--config", both, "--ipvs-rules-backend=iptables"), "iptables", true)
	extrasFile := writeFile(t, "ipvs.yaml", ours("iptables", false))
	check("--ipvs-config over --config", written("--config", both, "--ipvs-config", extrasFile), "iptables", false)
	check("--ipvs-config alone", written("--ipvs-config", writeFile(t, "ipvs2.yaml", ours("nftables", false))), "nftables", false)
	check("flag over --ipvs-config", written("--ipvs-config", extrasFile, "--ipvs-virtual-server-metrics=true"), "iptables", true)

	// What --write-config-to wrote goes back through --config unchanged.
	first := filepath.Join(t.TempDir(), "first.yaml")
	if code, _, stderr := run(t, "--ipvs-rules-backend=nftables", "--write-config-to", first); code != 0 {
		t.Fatal(stderr)
	}
	check("round trip", written("--config", first), "nftables", false)

	// --ipvs-warm-start: off unless the flag or a document says otherwise.
	warm := func(name string, e *proxyconfigapi.Extras, want bool) {
		t.Helper()
		if e.WarmStart == nil || *e.WarmStart != want {
			t.Errorf("%s: warmStart %v, want %v", name, e.WarmStart, want)
		}
	}
	warm("default", written(), false)
	warm("flag", written("--ipvs-warm-start"), true)
	on := writeFile(t, "warm.yaml", ours("iptables", false)+"warmStart: true\n")
	warm("--ipvs-config", written("--ipvs-config", on), true)
	warm("flag over --ipvs-config", written("--ipvs-config", on, "--ipvs-warm-start=false"), false)

	// Bad files stop the daemon with one line naming the file and the field.
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"unknown field": {[]string{"--ipvs-config", writeFile(t, "bad1.yaml", ours("iptables", false)+"rulesbackend: x\n")}, `unknown field "rulesbackend"`},
		"bad backend":   {[]string{"--config", writeFile(t, "bad2.yaml", upstream+"---\n"+ours("ebpf", false))}, `rulesBackend "ebpf"`},
		"two documents": {[]string{"--ipvs-config", writeFile(t, "bad3.yaml", ours("iptables", false)+"---\n"+ours("iptables", false))}, "2 documents"},
		"missing file":  {[]string{"--ipvs-config", filepath.Join(t.TempDir(), "absent.yaml")}, "absent.yaml"},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 with %q", name, code, stderr, tc.want)
		}
	}
}
