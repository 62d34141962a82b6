package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
	netutils "k8s.io/utils/net"
)

// Proxy modes this daemon runs. "" means the default, which here is ipvs.
const ProxyModeIPVS v1alpha1.ProxyMode = "ipvs"

// Local-traffic detection modes (upstream's LocalMode values).
const (
	LocalModeClusterCIDR         v1alpha1.LocalMode = "ClusterCIDR"
	LocalModeNodeCIDR            v1alpha1.LocalMode = "NodeCIDR"
	LocalModeBridgeInterface     v1alpha1.LocalMode = "BridgeInterface"
	LocalModeInterfaceNamePrefix v1alpha1.LocalMode = "InterfaceNamePrefix"
)

// NodePortAddresses keywords (v1alpha1 API, Kubernetes 1.37).
const (
	NodePortAddressesPrimary   = "primary"
	NodePortAddressesLocalhost = "localhost"
	NodePortAddressesAll       = "all"
)

// IPVSSchedulers lists every scheduler the Linux kernel ships (net/netfilter/ipvs,
// ip_vs_<name>.ko). Upstream's own list stops at nq; the kernel is the authority
// on what a virtual server can use, and the proxier probes the module at start.
var IPVSSchedulers = []string{
	"rr",    // round robin (the default when empty)
	"wrr",   // weighted round robin
	"lc",    // least connection
	"wlc",   // weighted least connection
	"lblc",  // locality-based least connection
	"lblcr", // locality-based least connection with replication
	"dh",    // destination hashing
	"sh",    // source hashing
	"sed",   // shortest expected delay
	"nq",    // never queue
	"fo",    // weighted failover
	"ovf",   // weighted overflow
	"mh",    // maglev hashing
	"twos",  // weighted random twos choice (Linux 6.7)
}

// IsSupportedMode reports whether this daemon runs the given proxy mode.
func IsSupportedMode(mode v1alpha1.ProxyMode) bool {
	return mode == "" || mode == ProxyModeIPVS
}

// Validate checks everything the ipvs daemon reads from cfg. fg is the effective
// feature gate, used to validate the logging options.
func Validate(cfg *v1alpha1.KubeProxyConfiguration, fg featuregate.FeatureGate) field.ErrorList {
	var errs field.ErrorList

	if !IsSupportedMode(cfg.Mode) {
		errs = append(errs, field.Invalid(field.NewPath("mode"), string(cfg.Mode),
			`this daemon implements the ipvs mode only (set "ipvs" or leave it empty)`))
	}

	errs = append(errs, validateIPVS(&cfg.IPVS, field.NewPath("ipvs"))...)
	errs = append(errs, validateMasqueradeBit(cfg.IPTables.MasqueradeBit, field.NewPath("iptables", "masqueradeBit"))...)
	errs = append(errs, validateConntrack(&cfg.Conntrack, field.NewPath("conntrack"))...)

	if cfg.OOMScoreAdj != nil && (*cfg.OOMScoreAdj < -1000 || *cfg.OOMScoreAdj > 1000) {
		errs = append(errs, field.Invalid(field.NewPath("oomScoreAdj"), *cfg.OOMScoreAdj, "must be within the range [-1000, 1000]"))
	}
	if cfg.ConfigSyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("configSyncPeriod"), cfg.ConfigSyncPeriod.Duration.String(), "must be greater than 0"))
	}

	cc := field.NewPath("clientConnection")
	if cfg.ClientConnection.Burst < 0 {
		errs = append(errs, field.Invalid(cc.Child("burst"), cfg.ClientConnection.Burst, "must be greater than or equal to 0"))
	}
	if cfg.ClientConnection.QPS < 0 {
		errs = append(errs, field.Invalid(cc.Child("qps"), cfg.ClientConnection.QPS, "must be greater than or equal to 0"))
	}

	if net.ParseIP(cfg.BindAddress) == nil {
		errs = append(errs, field.Invalid(field.NewPath("bindAddress"), cfg.BindAddress, "must be a valid IP address"))
	}
	if cfg.HealthzBindAddress != "" {
		errs = append(errs, validateHostPort(cfg.HealthzBindAddress, field.NewPath("healthzBindAddress"))...)
	}
	if cfg.MetricsBindAddress != "" {
		errs = append(errs, validateHostPort(cfg.MetricsBindAddress, field.NewPath("metricsBindAddress"))...)
	}

	errs = append(errs, validateClusterCIDR(cfg.ClusterCIDR, field.NewPath("clusterCIDR"))...)
	errs = append(errs, validateDetectLocal(cfg, field.NewPath("detectLocalMode"))...)
	errs = append(errs, validateNodePortAddresses(cfg.NodePortAddresses, field.NewPath("nodePortAddresses"))...)
	errs = append(errs, validateShowHiddenMetricsVersion(cfg.ShowHiddenMetricsForVersion, field.NewPath("showHiddenMetricsForVersion"))...)

	if cfg.PortRange != "" {
		// Unused since the userspace proxier was removed; upstream still rejects garbage.
		if !validPortRange(cfg.PortRange) {
			errs = append(errs, field.Invalid(field.NewPath("portRange"), cfg.PortRange, "must be a valid port range (e.g. 300-2000)"))
		}
	}

	errs = append(errs, logsapi.Validate(&cfg.Logging, fg, field.NewPath("logging"))...)
	return errs
}

func validateIPVS(c *v1alpha1.KubeProxyIPVSConfiguration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.SyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(path.Child("syncPeriod"), c.SyncPeriod.Duration.String(), "must be greater than 0"))
	}
	if c.MinSyncPeriod.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("minSyncPeriod"), c.MinSyncPeriod.Duration.String(), "must be greater than or equal to 0"))
	}
	if c.SyncPeriod.Duration > 0 && c.MinSyncPeriod.Duration > c.SyncPeriod.Duration {
		errs = append(errs, field.Invalid(path.Child("minSyncPeriod"), c.MinSyncPeriod.Duration.String(),
			fmt.Sprintf("must be less than or equal to %s (%s)", path.Child("syncPeriod"), c.SyncPeriod.Duration)))
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"tcpTimeout", c.TCPTimeout.Duration},
		{"tcpFinTimeout", c.TCPFinTimeout.Duration},
		{"udpTimeout", c.UDPTimeout.Duration},
	} {
		if t.d < 0 {
			errs = append(errs, field.Invalid(path.Child(t.name), t.d.String(), "must be greater than or equal to 0"))
		}
	}
	if c.Scheduler != "" && !contains(IPVSSchedulers, c.Scheduler) {
		errs = append(errs, field.NotSupported(path.Child("scheduler"), c.Scheduler, IPVSSchedulers))
	}
	for i, cidr := range c.ExcludeCIDRs {
		if _, _, err := netutils.ParseCIDRSloppy(strings.TrimSpace(cidr)); err != nil {
			errs = append(errs, field.Invalid(path.Child("excludeCIDRs").Index(i), cidr, "must be a valid CIDR (e.g. 10.0.0.0/8)"))
		}
	}
	return errs
}

func validateMasqueradeBit(bit *int32, path *field.Path) field.ErrorList {
	if bit != nil && (*bit < 0 || *bit > 31) {
		return field.ErrorList{field.Invalid(path, *bit, "must be within the range [0, 31]")}
	}
	return nil
}

func validateConntrack(c *v1alpha1.KubeProxyConntrackConfiguration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.MaxPerCore != nil && *c.MaxPerCore < 0 {
		errs = append(errs, field.Invalid(path.Child("maxPerCore"), *c.MaxPerCore, "must be greater than or equal to 0"))
	}
	if c.Min != nil && *c.Min < 0 {
		errs = append(errs, field.Invalid(path.Child("min"), *c.Min, "must be greater than or equal to 0"))
	}
	if c.TCPEstablishedTimeout != nil && c.TCPEstablishedTimeout.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("tcpEstablishedTimeout"), c.TCPEstablishedTimeout.Duration.String(), "must be greater than or equal to 0"))
	}
	if c.TCPCloseWaitTimeout != nil && c.TCPCloseWaitTimeout.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("tcpCloseWaitTimeout"), c.TCPCloseWaitTimeout.Duration.String(), "must be greater than or equal to 0"))
	}
	if c.UDPTimeout.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("udpTimeout"), c.UDPTimeout.Duration.String(), "must be greater than or equal to 0"))
	}
	if c.UDPStreamTimeout.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("udpStreamTimeout"), c.UDPStreamTimeout.Duration.String(), "must be greater than or equal to 0"))
	}
	return errs
}

// validateHostPort accepts IP:port with a port in 0-65535 (0 lets the kernel
// pick, which only tests want, but upstream's flag accepts it).
func validateHostPort(input string, path *field.Path) field.ErrorList {
	host, port, err := net.SplitHostPort(input)
	if err != nil {
		return field.ErrorList{field.Invalid(path, input, "must be IP:port (e.g. 0.0.0.0:10256 or [::]:10256)")}
	}
	var errs field.ErrorList
	if net.ParseIP(host) == nil {
		errs = append(errs, field.Invalid(path, input, fmt.Sprintf("%q is not a valid IP address", host)))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		errs = append(errs, field.Invalid(path, input, fmt.Sprintf("%q is not a valid port", port)))
	}
	return errs
}

func validateClusterCIDR(value string, path *field.Path) field.ErrorList {
	if value == "" {
		return nil
	}
	cidrs := strings.Split(value, ",")
	if len(cidrs) > 2 {
		return field.ErrorList{field.Invalid(path, value, "must be one CIDR or a dual-stack pair (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)")}
	}
	for _, c := range cidrs {
		if _, _, err := netutils.ParseCIDRSloppy(strings.TrimSpace(c)); err != nil {
			return field.ErrorList{field.Invalid(path, value, fmt.Sprintf("%q is not a valid CIDR (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)", c))}
		}
	}
	if len(cidrs) == 2 {
		if dual, err := netutils.IsDualStackCIDRStrings(trimAll(cidrs)); err != nil || !dual {
			return field.ErrorList{field.Invalid(path, value, "two CIDRs must be one IPv4 and one IPv6 (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)")}
		}
	}
	return nil
}

func validateDetectLocal(cfg *v1alpha1.KubeProxyConfiguration, path *field.Path) field.ErrorList {
	switch cfg.DetectLocalMode {
	case "", LocalModeClusterCIDR, LocalModeNodeCIDR:
		return nil
	case LocalModeBridgeInterface:
		p := field.NewPath("detectLocal", "bridgeInterface")
		if cfg.DetectLocal.BridgeInterface == "" {
			return field.ErrorList{field.Required(p, "required when detectLocalMode is BridgeInterface")}
		}
		if err := ValidateInterfaceName(cfg.DetectLocal.BridgeInterface, false); err != nil {
			return field.ErrorList{field.Invalid(p, cfg.DetectLocal.BridgeInterface, err.Error())}
		}
		return nil
	case LocalModeInterfaceNamePrefix:
		p := field.NewPath("detectLocal", "interfaceNamePrefix")
		if cfg.DetectLocal.InterfaceNamePrefix == "" {
			return field.ErrorList{field.Required(p, "required when detectLocalMode is InterfaceNamePrefix")}
		}
		if err := ValidateInterfaceName(cfg.DetectLocal.InterfaceNamePrefix, true); err != nil {
			return field.ErrorList{field.Invalid(p, cfg.DetectLocal.InterfaceNamePrefix, err.Error())}
		}
		return nil
	default:
		return field.ErrorList{field.NotSupported(path, string(cfg.DetectLocalMode), []string{
			string(LocalModeClusterCIDR), string(LocalModeNodeCIDR), string(LocalModeBridgeInterface), string(LocalModeInterfaceNamePrefix)})}
	}
}

// maxInterfaceNameLen is IFNAMSIZ - 1: the kernel's limit on a link name and
// iptables' on the argument of -i.
const maxInterfaceNameLen = 15

// ValidateInterfaceName checks a detectLocal interface name (or, with prefix, the
// name prefix that iptables matches as "PREFIX+") before it goes into iptables
// rules: what the kernel accepts as a link name (1-15 bytes, not "." or "..", no
// '/', ':' or whitespace), restricted to printable ASCII without quotes,
// backslash or '!' so that the iptables-restore text stays one plain word. A
// bridge name may not end in '+', which iptables would read as a prefix match.
func ValidateInterfaceName(name string, prefix bool) error {
	maxLen := maxInterfaceNameLen
	if prefix {
		maxLen-- // iptables matches PREFIX+, itself at most 15 bytes
	}
	switch {
	case name == "":
		return fmt.Errorf("must not be empty")
	case len(name) > maxLen:
		return fmt.Errorf("must be at most %d characters (Linux interface names are at most 15)", maxLen)
	case name == "." || name == "..":
		return fmt.Errorf("is not a valid Linux interface name")
	case !prefix && strings.HasSuffix(name, "+"):
		return fmt.Errorf("must not end in '+', which iptables reads as a prefix match (use detectLocalMode InterfaceNamePrefix)")
	}
	for _, r := range name {
		if r <= ' ' || r > '~' || strings.ContainsRune(`/:"'\!`, r) {
			return fmt.Errorf("contains %q: a Linux interface name here is printable ASCII without whitespace, '/', ':', quotes, '\\' or '!'", r)
		}
	}
	return nil
}

func validateNodePortAddresses(values []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, v := range values {
		switch v {
		case NodePortAddressesPrimary, NodePortAddressesLocalhost, NodePortAddressesAll:
			continue
		}
		if _, _, err := netutils.ParseCIDRSloppy(v); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), v, "must be a CIDR (e.g. 192.168.0.0/16) or one of 'primary', 'localhost', 'all'"))
		}
	}
	return errs
}

// validateShowHiddenMetricsVersion accepts only the previous minor release, as
// component-base does; we emulate Kubernetes 1.37.
func validateShowHiddenMetricsVersion(v string, path *field.Path) field.ErrorList {
	if v == "" {
		return nil
	}
	const previous = "1.36"
	if v != previous {
		return field.ErrorList{field.Invalid(path, v, fmt.Sprintf("only the previous minor version %s is allowed (format <major>.<minor>)", previous))}
	}
	return nil
}

func validPortRange(s string) bool {
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		lo, hi, found = strings.Cut(s, "+")
		if found {
			base, err1 := strconv.Atoi(lo)
			off, err2 := strconv.Atoi(hi)
			return err1 == nil && err2 == nil && base >= 0 && off >= 0 && base+off <= 65535
		}
		p, err := strconv.Atoi(s)
		return err == nil && p >= 0 && p <= 65535
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	return err1 == nil && err2 == nil && a >= 0 && b >= a && b <= 65535
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func trimAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = strings.TrimSpace(s)
	}
	return out
}
