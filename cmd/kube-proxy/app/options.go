package app

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"

	proxyconfigapi "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
)

// Options holds the command line of one invocation: the configuration the flags
// write into, plus the flags that are not part of KubeProxyConfiguration.
type Options struct {
	// ConfigFile is --config: a KubeProxyConfiguration file, optionally followed by
	// a KubeProxyIPVSConfiguration document (our own settings).
	ConfigFile string
	// ExtrasFile is --ipvs-config: a KubeProxyIPVSConfiguration file (ours).
	ExtrasFile string
	// WriteConfigTo is --write-config-to: write the effective config and exit.
	WriteConfigTo string
	// CleanupAndExit is --cleanup.
	CleanupAndExit bool
	// InitAndExit is --init-only.
	InitAndExit bool
	// VirtualServerMetrics is --ipvs-virtual-server-metrics (ours, not upstream's).
	VirtualServerMetrics bool
	// WarmStart is --ipvs-warm-start (ours): program the objects of the first lists
	// as they arrive, adding only, instead of after the lists are complete.
	WarmStart bool
	// RulesBackend is --ipvs-rules-backend (ours): where the sets and rules beside
	// IPVS live, "iptables" (ipsets and iptables chains, as upstream) or "nftables".
	RulesBackend string
	// Master is --master, overriding the kubeconfig's server.
	Master string
	// hostnameOverride is --hostname-override, applied trimmed and lowercased.
	hostnameOverride string
	// healthzPort and metricsPort are the deprecated --healthz-port / --metrics-port.
	healthzPort int32
	metricsPort int32

	config      *v1alpha1.KubeProxyConfiguration
	featureGate featuregate.MutableVersionedFeatureGate
	// flags is the parsed command line (over the --config file), for /flagz.
	flags *pflag.FlagSet
}

func newOptions(cfg *v1alpha1.KubeProxyConfiguration, fg featuregate.MutableVersionedFeatureGate) *Options {
	return &Options{
		config:      cfg,
		featureGate: fg,
		healthzPort: proxyconfigapi.ProxyHealthzPort,
		// RulesBackend's default is upstream's programme.
		RulesBackend: ipvsproxy.RulesBackendIPTables,
		metricsPort:  proxyconfigapi.ProxyStatusPort,
	}
}

// AddFlags registers every flag of upstream kube-proxy 1.37 on fs, bound to
// o.config. The pointer fields of o.config must be set (SetDefaults does that).
// Where upstream's help says a flag "is ignored if a config file is specified",
// this daemon differs: a flag given on the command line overrides the file.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	c := o.config

	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "The path to the configuration file (a kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration). Flags given on the command line override its values.")
	fs.StringVar(&o.WriteConfigTo, "write-config-to", o.WriteConfigTo, "If set, write the effective configuration values to this file and exit.")
	fs.StringVar(&o.ExtrasFile, "ipvs-config", o.ExtrasFile, "The path to a file holding one kube-proxy-ipvs.io/v1alpha1 KubeProxyIPVSConfiguration: this daemon's own settings (rulesBackend, virtualServerMetrics), which a --config file may also hold as a second document; this file's values win over that document's, and flags given on the command line over both. Not an upstream flag.")
	fs.BoolVar(&o.CleanupAndExit, "cleanup", o.CleanupAndExit, "If true cleanup iptables and ipvs rules and exit.")
	fs.BoolVar(&o.InitAndExit, "init-only", o.InitAndExit, "If true, perform any initialization steps that must be done with full root privileges, and then exit. After doing this, you can run kube-proxy again with only the CAP_NET_ADMIN capability.")

	fs.Var(cliflag.NewMapStringBool(&c.FeatureGates), "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n"+
		strings.Join(o.featureGate.KnownFeatures(), "\n"))

	fs.StringVar(&c.ClientConnection.Kubeconfig, "kubeconfig", c.ClientConnection.Kubeconfig, "Path to kubeconfig file with authorization information (the master location can be overridden by the master flag).")
	fs.StringVar(&o.Master, "master", o.Master, "The address of the Kubernetes API server (overrides any value in kubeconfig)")
	fs.StringVar(&c.ClientConnection.ContentType, "kube-api-content-type", c.ClientConnection.ContentType, "Content type of requests sent to apiserver.")
	fs.Int32Var(&c.ClientConnection.Burst, "kube-api-burst", c.ClientConnection.Burst, "Burst to use while talking with kubernetes apiserver")
	fs.Float32Var(&c.ClientConnection.QPS, "kube-api-qps", c.ClientConnection.QPS, "QPS to use while talking with kubernetes apiserver")

	fs.StringVar(&o.hostnameOverride, "hostname-override", o.hostnameOverride, "If non-empty, will be used as the name of the Node that kube-proxy is running on. If unset, the node name is assumed to be the same as the node's hostname.")
	fs.Var(ipValue{&c.BindAddress}, "bind-address", "Overrides kube-proxy's idea of what its node's primary IP is. Note that the name is a historical artifact, and kube-proxy does not actually bind any sockets to this IP.")
	fs.Var(ipPortValue{&c.HealthzBindAddress}, "healthz-bind-address", "The IP address and port for the health check server to serve on, defaulting to \"0.0.0.0:10256\". Set empty to disable.")
	fs.Var(ipPortValue{&c.MetricsBindAddress}, "metrics-bind-address", "The IP address and port for the metrics server to serve on, defaulting to \"127.0.0.1:10249\". (Set to \"0.0.0.0:10249\" / \"[::]:10249\" to bind on all interfaces.) Set empty to disable.")
	fs.BoolVar(&c.BindAddressHardFail, "bind-address-hard-fail", c.BindAddressHardFail, "If true kube-proxy will treat failure to bind to a port as fatal and exit")
	fs.BoolVar(&o.VirtualServerMetrics, "ipvs-virtual-server-metrics", o.VirtualServerMetrics, "If true, export per-Service IPVS counters (connections, packets, bytes per virtual server) as kubeproxy_ipvs_virtual_server_* metrics. Not an upstream flag; each scrape reads the IPVS table once.")
	fs.BoolVar(&o.WarmStart, "ipvs-warm-start", o.WarmStart, "If true, program the Services and endpoints of the first lists from the API server as they arrive, adding only (nothing is removed until the lists are complete), instead of waiting for the whole lists as upstream kube-proxy does. Off by default: on a 2-vCPU node it measured no faster (docs/PERFORMANCE.md). Not an upstream flag.")
	fs.StringVar(&o.RulesBackend, "ipvs-rules-backend", o.RulesBackend, "Where the rules that go with IPVS live: 'iptables' (ipsets and iptables chains, as upstream kube-proxy's ipvs mode) or 'nftables' (one nftables table, inet kube-proxy-ipvs; needs neither ipset nor iptables). Switching removes the other backend's rules once the new ones are written. Not an upstream flag.")
	fs.BoolVar(&c.EnableProfiling, "profiling", c.EnableProfiling, "If true enables profiling via web interface on /debug/pprof handler.")
	fs.StringVar(&c.ShowHiddenMetricsForVersion, "show-hidden-metrics-for-version", c.ShowHiddenMetricsForVersion,
		"The previous version for which you want to show hidden metrics. Only the previous minor version is meaningful, other values will not be allowed. "+
			"The format is <major>.<minor>, e.g.: '1.16'. The purpose of this format is make sure you have the opportunity to notice if the next release hides additional metrics, "+
			"rather than being surprised when they are permanently removed in the release after that.")
	fs.Var(proxyModeValue{&c.Mode}, "proxy-mode", "Which proxy mode to use. This daemon implements only 'ipvs' (the default here when empty); any other mode is refused.")

	fs.Int32Var(c.IPTables.MasqueradeBit, "iptables-masquerade-bit", *c.IPTables.MasqueradeBit, "If using the iptables or ipvs proxy mode, the bit of the fwmark space to mark packets requiring SNAT with.  Must be within the range [0, 31].")
	fs.BoolVar(&c.IPTables.MasqueradeAll, "masquerade-all", c.IPTables.MasqueradeAll, "SNAT all traffic sent via Service cluster IPs. This may be required with some CNI plugins. Only supported on Linux.")
	fs.BoolVar(c.IPTables.LocalhostNodePorts, "iptables-localhost-nodeports", *c.IPTables.LocalhostNodePorts, "If false, kube-proxy will disable the legacy behavior of allowing NodePort services to be accessed via localhost. (Applies only to iptables mode and IPv4; localhost NodePorts are never allowed with other proxy modes or with IPv6.)")
	fs.DurationVar(&c.IPTables.SyncPeriod.Duration, "iptables-sync-period", c.IPTables.SyncPeriod.Duration, "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various re-synchronizing and cleanup operations are performed. Must be greater than 0.")
	fs.DurationVar(&c.IPTables.MinSyncPeriod.Duration, "iptables-min-sync-period", c.IPTables.MinSyncPeriod.Duration, "The minimum period between iptables rule resyncs (e.g. '5s', '1m', '2h22m'). A value of 0 means every Service or EndpointSlice change will result in an immediate iptables resync.")

	fs.DurationVar(&c.IPVS.SyncPeriod.Duration, "ipvs-sync-period", c.IPVS.SyncPeriod.Duration, "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various re-synchronizing and cleanup operations are performed. Must be greater than 0.")
	fs.DurationVar(&c.IPVS.MinSyncPeriod.Duration, "ipvs-min-sync-period", c.IPVS.MinSyncPeriod.Duration, "The minimum period between IPVS rule resyncs (e.g. '5s', '1m', '2h22m'). A value of 0 means every Service or EndpointSlice change will result in an immediate IPVS resync.")
	fs.StringVar(&c.IPVS.Scheduler, "ipvs-scheduler", c.IPVS.Scheduler, "The ipvs scheduler type when proxy mode is ipvs")
	fs.StringSliceVar(&c.IPVS.ExcludeCIDRs, "ipvs-exclude-cidrs", c.IPVS.ExcludeCIDRs, "A comma-separated list of CIDRs which the ipvs proxier should not touch when cleaning up IPVS rules.")
	fs.BoolVar(&c.IPVS.StrictARP, "ipvs-strict-arp", c.IPVS.StrictARP, "Enable strict ARP by setting arp_ignore to 1 and arp_announce to 2")
	fs.DurationVar(&c.IPVS.TCPTimeout.Duration, "ipvs-tcp-timeout", c.IPVS.TCPTimeout.Duration, "The timeout for idle IPVS TCP connections, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
	fs.DurationVar(&c.IPVS.TCPFinTimeout.Duration, "ipvs-tcpfin-timeout", c.IPVS.TCPFinTimeout.Duration, "The timeout for IPVS TCP connections after receiving a FIN packet, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
	fs.DurationVar(&c.IPVS.UDPTimeout.Duration, "ipvs-udp-timeout", c.IPVS.UDPTimeout.Duration, "The timeout for IPVS UDP packets, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")

	fs.Var(localModeValue{&c.DetectLocalMode}, "detect-local-mode", "Mode to use to detect local traffic: ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix.")
	fs.StringVar(&c.DetectLocal.BridgeInterface, "pod-bridge-interface", c.DetectLocal.BridgeInterface, "A bridge interface name. When --detect-local-mode is set to BridgeInterface, kube-proxy will consider traffic to be local if it originates from this bridge.")
	fs.StringVar(&c.DetectLocal.InterfaceNamePrefix, "pod-interface-name-prefix", c.DetectLocal.InterfaceNamePrefix, "An interface name prefix. When --detect-local-mode is set to InterfaceNamePrefix, kube-proxy will consider traffic to be local if it originates from any interface whose name begins with this prefix.")
	fs.StringVar(&c.ClusterCIDR, "cluster-cidr", c.ClusterCIDR, "The CIDR range of the pods in the cluster. (For dual-stack clusters, this can be a comma-separated dual-stack pair of CIDR ranges.). When --detect-local-mode is set to ClusterCIDR, kube-proxy will consider traffic to be local if its source IP is in this range. (Otherwise it is not used.)")
	fs.StringSliceVar(&c.NodePortAddresses, "nodeport-addresses", c.NodePortAddresses,
		"A list of CIDR ranges and/or keywords that expand to CIDR ranges. NodePort services are only accessible on node IPs covered by the list. Supported keywords: 'primary' (the Node object's primary IPv4 and/or IPv6 addresses), 'localhost' (127.0.0.0/8 and ::1/128), and 'all' (0.0.0.0/0 and ::/0). Any combination of valid keywords and CIDRS may be included in the list. Serving NodePorts on loopback IPs is only supported in iptables mode (IPv4 only, see --iptables-localhost-nodeports), and, only for TCP, in nftables mode when the KubeProxyNFTablesLocalhostNodePorts feature gate is enabled and the list explicitly includes loopback (e.g. 'localhost'). If unset, this defaults to 'all' in iptables and ipvs mode, and to 'primary' in nftables mode.")

	fs.Int32Var(c.OOMScoreAdj, "oom-score-adj", *c.OOMScoreAdj, "The oom-score-adj value for kube-proxy process. Values must be within the range [-1000, 1000].")
	fs.Int32Var(c.Conntrack.MaxPerCore, "conntrack-max-per-core", *c.Conntrack.MaxPerCore, "Maximum number of NAT connections to track per CPU core (0 to leave the limit as-is and ignore conntrack-min).")
	fs.Int32Var(c.Conntrack.Min, "conntrack-min", *c.Conntrack.Min, "Minimum number of conntrack entries to allocate, regardless of conntrack-max-per-core (set conntrack-max-per-core=0 to leave the limit as-is).")
	fs.DurationVar(&c.Conntrack.TCPEstablishedTimeout.Duration, "conntrack-tcp-timeout-established", c.Conntrack.TCPEstablishedTimeout.Duration, "Idle timeout for established TCP connections (0 to leave as-is)")
	fs.DurationVar(&c.Conntrack.TCPCloseWaitTimeout.Duration, "conntrack-tcp-timeout-close-wait", c.Conntrack.TCPCloseWaitTimeout.Duration, "NAT timeout for TCP connections in the CLOSE_WAIT state")
	fs.BoolVar(&c.Conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", c.Conntrack.TCPBeLiberal, "Enable liberal mode for tracking TCP packets by setting nf_conntrack_tcp_be_liberal to 1")
	fs.DurationVar(&c.Conntrack.UDPTimeout.Duration, "conntrack-udp-timeout", c.Conntrack.UDPTimeout.Duration, "Idle timeout for UNREPLIED UDP connections (0 to leave as-is)")
	fs.DurationVar(&c.Conntrack.UDPStreamTimeout.Duration, "conntrack-udp-timeout-stream", c.Conntrack.UDPStreamTimeout.Duration, "Idle timeout for ASSURED UDP connections (0 to leave as-is)")
	fs.DurationVar(&c.ConfigSyncPeriod.Duration, "config-sync-period", c.ConfigSyncPeriod.Duration, "How often configuration from the apiserver is refreshed.  Must be greater than 0.")

	fs.Int32Var(&o.healthzPort, "healthz-port", o.healthzPort, "The port to bind the health check server. Use 0 to disable.")
	_ = fs.MarkDeprecated("healthz-port", "This flag is deprecated and will be removed in a future release. Please use --healthz-bind-address instead.")
	fs.Int32Var(&o.metricsPort, "metrics-port", o.metricsPort, "The port to bind the metrics server. Use 0 to disable.")
	_ = fs.MarkDeprecated("metrics-port", "This flag is deprecated and will be removed in a future release. Please use --metrics-bind-address instead.")

	logsapi.AddFlags(&c.Logging, fs)
}

// applyExtras sets our own settings from a KubeProxyIPVSConfiguration, except those
// whose flag was given on the command line.
func (o *Options) applyExtras(e *proxyconfigapi.Extras, fs *pflag.FlagSet) {
	if e == nil {
		return
	}
	if e.RulesBackend != "" && !fs.Changed("ipvs-rules-backend") {
		o.RulesBackend = e.RulesBackend
	}
	if e.VirtualServerMetrics != nil && !fs.Changed("ipvs-virtual-server-metrics") {
		o.VirtualServerMetrics = *e.VirtualServerMetrics
	}
	if e.WarmStart != nil && !fs.Changed("ipvs-warm-start") {
		o.WarmStart = *e.WarmStart
	}
}

// extras returns our own settings as the KubeProxyIPVSConfiguration
// --write-config-to writes beside the KubeProxyConfiguration.
func (o *Options) extras() *proxyconfigapi.Extras {
	e := proxyconfigapi.NewExtras()
	e.RulesBackend = o.RulesBackend
	e.VirtualServerMetrics = &o.VirtualServerMetrics
	e.WarmStart = &o.WarmStart
	return e
}

// applyNonConfigFlags folds the flags that are not KubeProxyConfiguration fields
// into the configuration: the deprecated port flags and --hostname-override.
func (o *Options) applyNonConfigFlags(fs *pflag.FlagSet) error {
	c := o.config
	if fs.Changed("healthz-port") {
		c.HealthzBindAddress = addressWithPort(c.HealthzBindAddress, o.healthzPort)
	}
	if fs.Changed("metrics-port") {
		c.MetricsBindAddress = addressWithPort(c.MetricsBindAddress, o.metricsPort)
	}
	// A bare IP from --healthz-bind-address / --metrics-bind-address gets the
	// default port, as upstream's flag type does.
	if c.HealthzBindAddress != "" {
		c.HealthzBindAddress = proxyconfigapi.AppendPortIfNeeded(c.HealthzBindAddress, proxyconfigapi.ProxyHealthzPort)
	}
	if c.MetricsBindAddress != "" {
		c.MetricsBindAddress = proxyconfigapi.AppendPortIfNeeded(c.MetricsBindAddress, proxyconfigapi.ProxyStatusPort)
	}
	if fs.Changed("hostname-override") {
		name := strings.TrimSpace(o.hostnameOverride)
		if name == "" {
			return fmt.Errorf("empty --hostname-override is invalid")
		}
		c.HostnameOverride = strings.ToLower(name)
	}
	return nil
}

// addressWithPort replaces the port of a host:port (or bare host) address; port 0
// disables the server, as upstream's deprecated port flags do.
func addressWithPort(addr string, port int32) string {
	if port == 0 {
		return ""
	}
	host := addr
	if h, _, err := splitHostPort(addr); err == nil {
		host = h
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return joinHostPort(host, port)
}
