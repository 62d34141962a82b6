package config

import (
	"net"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
)

// Ports and values upstream hard-codes (pkg/cluster/ports, pkg/kubelet/qos).
const (
	// ProxyHealthzPort is the default port of the /healthz and /livez server.
	ProxyHealthzPort = 10256
	// ProxyStatusPort is the default port of the /metrics server.
	ProxyStatusPort = 10249
	// KubeProxyOOMScoreAdj keeps kube-proxy alive under memory pressure: it is
	// what keeps Services working on the node.
	KubeProxyOOMScoreAdj = -999
	// DefaultContentType is what upstream asks the apiserver for.
	DefaultContentType = "application/vnd.kubernetes.protobuf"
)

// SetDefaults fills every unset field of cfg the way upstream's v1alpha1
// defaulting does (pkg/proxy/apis/config/v1alpha1 in Kubernetes 1.37). It is
// idempotent. Fields that upstream leaves empty (mode, scheduler, the IPVS
// minSyncPeriod and timeouts, UDP conntrack timeouts, clusterCIDR,
// nodePortAddresses) stay empty.
func SetDefaults(cfg *v1alpha1.KubeProxyConfiguration) {
	if cfg.BindAddress == "" {
		cfg.BindAddress = "0.0.0.0"
	}
	healthzHost, metricsHost := defaultHosts(cfg.BindAddress)
	if cfg.HealthzBindAddress == "" {
		cfg.HealthzBindAddress = net.JoinHostPort(healthzHost, strconv.Itoa(ProxyHealthzPort))
	} else {
		cfg.HealthzBindAddress = AppendPortIfNeeded(cfg.HealthzBindAddress, ProxyHealthzPort)
	}
	if cfg.MetricsBindAddress == "" {
		cfg.MetricsBindAddress = net.JoinHostPort(metricsHost, strconv.Itoa(ProxyStatusPort))
	} else {
		cfg.MetricsBindAddress = AppendPortIfNeeded(cfg.MetricsBindAddress, ProxyStatusPort)
	}

	if cfg.OOMScoreAdj == nil {
		cfg.OOMScoreAdj = ptr.To[int32](KubeProxyOOMScoreAdj)
	}

	if cfg.IPTables.MasqueradeBit == nil {
		cfg.IPTables.MasqueradeBit = ptr.To[int32](14)
	}
	if cfg.IPTables.LocalhostNodePorts == nil {
		cfg.IPTables.LocalhostNodePorts = ptr.To(true)
	}
	defaultDuration(&cfg.IPTables.SyncPeriod, 30*time.Second)
	defaultDuration(&cfg.IPTables.MinSyncPeriod, time.Second)

	// IPVS minSyncPeriod stays 0: every change syncs at once, as upstream.
	defaultDuration(&cfg.IPVS.SyncPeriod, 30*time.Second)

	if cfg.NFTables.MasqueradeBit == nil {
		cfg.NFTables.MasqueradeBit = ptr.To[int32](14)
	}
	defaultDuration(&cfg.NFTables.SyncPeriod, 30*time.Second)
	defaultDuration(&cfg.NFTables.MinSyncPeriod, time.Second)

	if cfg.Conntrack.MaxPerCore == nil {
		cfg.Conntrack.MaxPerCore = ptr.To[int32](32 * 1024)
	}
	if cfg.Conntrack.Min == nil {
		cfg.Conntrack.Min = ptr.To[int32](128 * 1024)
	}
	if cfg.Conntrack.TCPEstablishedTimeout == nil {
		// One day, a fifth of the kernel's default of five days.
		cfg.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: 24 * time.Hour}
	}
	if cfg.Conntrack.TCPCloseWaitTimeout == nil {
		// One hour, to outlive typical server FIN_WAIT timeouts
		// (kubernetes#32551): an expired CLOSE_WAIT entry un-NATs the final FIN.
		cfg.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: time.Hour}
	}

	defaultDuration(&cfg.ConfigSyncPeriod, 15*time.Minute)

	if cfg.ClientConnection.ContentType == "" {
		cfg.ClientConnection.ContentType = DefaultContentType
	}
	if cfg.ClientConnection.QPS == 0 {
		cfg.ClientConnection.QPS = 5
	}
	if cfg.ClientConnection.Burst == 0 {
		cfg.ClientConnection.Burst = 10
	}
	if cfg.FeatureGates == nil {
		cfg.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&cfg.Logging)
}

// NewDefaultConfiguration returns a fully defaulted configuration with apiVersion
// and kind set.
func NewDefaultConfiguration() *v1alpha1.KubeProxyConfiguration {
	cfg := &v1alpha1.KubeProxyConfiguration{}
	cfg.APIVersion = v1alpha1.SchemeGroupVersion.String()
	cfg.Kind = "KubeProxyConfiguration"
	SetDefaults(cfg)
	return cfg
}

// FlagIPVSMinSyncPeriod is the default of --ipvs-min-sync-period when no
// --config file is given. Upstream keeps one sync period pair internally,
// converted from the v1alpha1 defaults of the iptables section (1s) when only
// flags are used, and from the ipvs section (0) when a file says mode: ipvs; its
// --help shows "(default 1s)". A file's missing minSyncPeriod stays 0.
const FlagIPVSMinSyncPeriod = time.Second

// NewFlagDefaultConfiguration is the configuration the command-line flags
// start from when no --config file is given: the v1alpha1 defaults, except
// where upstream's flag defaults differ from them (ipvs.minSyncPeriod).
func NewFlagDefaultConfiguration() *v1alpha1.KubeProxyConfiguration {
	cfg := NewDefaultConfiguration()
	cfg.IPVS.MinSyncPeriod.Duration = FlagIPVSMinSyncPeriod
	return cfg
}

func defaultDuration(d *metav1.Duration, value time.Duration) {
	if d.Duration == 0 {
		d.Duration = value
	}
}

// defaultHosts returns the wildcard host for healthz and the loopback host for
// metrics in the family of bindAddress, as upstream does.
func defaultHosts(bindAddress string) (healthz, metrics string) {
	if ip := net.ParseIP(bindAddress); ip != nil && ip.To4() == nil {
		return "::", "::1"
	}
	return "0.0.0.0", "127.0.0.1"
}

// AppendPortIfNeeded turns a bare IP into IP:port; anything else (already
// host:port, or not an IP at all, which validation then rejects) is returned
// unchanged.
func AppendPortIfNeeded(addr string, port int32) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	ip := net.ParseIP(addr)
	if ip == nil {
		return addr
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}
