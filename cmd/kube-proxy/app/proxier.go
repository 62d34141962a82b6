package app

import (
	"context"
	"fmt"
	"net"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"
	utilexec "k8s.io/utils/exec"
	netutils "k8s.io/utils/net"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/healthcheck"
	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metaproxier"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// createProxier builds the ipvs proxier (one per family in s.IPFamilies behind a
// meta-proxier when dual-stack) over the real kernel interfaces, opened by the first
// call and shared by the proxiers built after it (s.handles). Its SyncLoop returns
// when ctx ends. It sets s.HeldBack, s.virtualServerStats and s.releaseProxier.
func createProxier(ctx context.Context, s *ProxyServer) (proxy.Provider, error) {
	logger := klog.FromContext(ctx)
	cfg := s.Config
	// The tools first: a node without them fails here with one clear line,
	// before anything touches IPVS, sets or rules.
	exec := utilexec.New()
	mode, err := checkRulesTools(ctx, s, exec)
	if err != nil {
		return nil, err
	}
	nftBackend := s.RulesBackend == ipvsproxy.RulesBackendNFTables
	if s.handles == nil {
		if s.handles, err = openProxierHandles(ctx, logger, cfg.IPVS.Scheduler, nftBackend, exec); err != nil {
			return nil, err
		}
	}
	excludeCIDRs, err := parseCIDRs(cfg.IPVS.ExcludeCIDRs)
	if err != nil {
		return nil, err
	}

	proxiers := map[v1.IPFamily]proxy.Provider{}
	var all []*ipvsproxy.Proxier
	var healthServers []healthcheck.ServiceHealthServer
	for _, family := range s.IPFamilies {
		listenIPs := nodePortListenIPs(s.NodePortAddresses, family)
		serviceHealth := healthcheck.NewServiceHealthServerForFamily(s.NodeName, s.Recorder, family, listenIPs, s.HealthzServer)
		healthServers = append(healthServers, serviceHealth)
		opts := proxierOptions(logger, s, family, excludeCIDRs, serviceHealth)
		p, err := ipvsproxy.NewProxier(ctx, opts, familyKernel(logger, s, family, mode, exec), nil)
		if err != nil {
			return nil, fmt.Errorf("creating the %s proxier: %w", family, err)
		}
		proxiers[family] = p
		all = append(all, p)
	}
	s.exposeProxiers(logger, all, healthServers)
	if len(proxiers) == 2 {
		return metaproxier.New(proxiers[v1.IPv4Protocol], proxiers[v1.IPv6Protocol]), nil
	}
	return proxiers[s.IPFamilies[0]], nil
}

// checkRulesTools chooses the iptables backend and, with the iptables rules
// backend, checks the tools each family needs (s.IPFamilies keeps the families
// that have them).
func checkRulesTools(ctx context.Context, s *ProxyServer, exec utilexec.Interface) (iptables.Mode, error) {
	logger := klog.FromContext(ctx)
	mode, err := iptables.DetectMode(ctx, exec)
	if err != nil {
		return "", fmt.Errorf("choosing the iptables backend: %w", err)
	}
	if s.RulesBackend == ipvsproxy.RulesBackendNFTables {
		// Neither ipset nor iptables is needed; where they are installed they are
		// used once, to remove what the iptables rules backend left.
		logger.Info("Using the nftables rules backend", "table", ipvsproxy.NFTRulesTable().String())
		return mode, nil
	}
	logger.Info("Using iptables backend", "mode", mode)
	if s.IPFamilies, err = checkTools(logger, s.IPFamilies, mode, exec.LookPath); err != nil {
		return "", err
	}
	return mode, nil
}

// proxierOptions are the proxier settings of one family, from the configuration.
func proxierOptions(logger klog.Logger, s *ProxyServer, family v1.IPFamily, excludeCIDRs []*net.IPNet, serviceHealth healthcheck.ServiceHealthServer) ipvsproxy.Options {
	cfg := s.Config
	masqBit := 14
	if cfg.IPTables.MasqueradeBit != nil {
		masqBit = int(*cfg.IPTables.MasqueradeBit)
	}
	var hz ipvsproxy.HealthzUpdater
	if s.HealthzServer != nil {
		hz = s.HealthzServer
	}
	return ipvsproxy.Options{
		IPFamily:          family,
		NodeName:          s.NodeName,
		NodeIP:            s.NodeIPs[family],
		SyncPeriod:        cfg.IPVS.SyncPeriod.Duration,
		MinSyncPeriod:     cfg.IPVS.MinSyncPeriod.Duration,
		Scheduler:         cfg.IPVS.Scheduler,
		ExcludeCIDRs:      excludeCIDRs,
		StrictARP:         cfg.IPVS.StrictARP,
		TCPTimeout:        cfg.IPVS.TCPTimeout.Duration,
		TCPFinTimeout:     cfg.IPVS.TCPFinTimeout.Duration,
		UDPTimeout:        cfg.IPVS.UDPTimeout.Duration,
		MasqueradeAll:     cfg.IPTables.MasqueradeAll,
		MasqueradeBit:     masqBit,
		LocalDetectorArgs: localDetectorArgs(logger, cfg, s.PodCIDRs, family),
		NodePortAddresses: familyCIDRs(s.NodePortAddresses, family),
		Recorder:          s.Recorder,
		HealthzServer:     hz,
		WarmStart:         s.WarmStart,
		ServiceHealth:     serviceHealth,
		KernelVersion:     s.handles.kernelRelease,
		RulesBackend:      s.RulesBackend,
	}
}

// familyKernel is one family's view of the shared kernel handles (s.handles). With
// the nftables rules backend it has iptables only where the family's tools are
// installed, to remove what the iptables rules backend left.
func familyKernel(logger klog.Logger, s *ProxyServer, family v1.IPFamily, mode iptables.Mode, exec utilexec.Interface) ipvsproxy.Kernel {
	h := s.handles
	nftBackend := s.RulesBackend == ipvsproxy.RulesBackendNFTables
	var ipt iptables.Interface
	if !nftBackend || len(missingTools(familyTools(mode, family), exec.LookPath)) == 0 {
		ipt = iptables.New(exec, iptablesProtocol(family), mode)
	}
	return ipvsproxy.Kernel{
		IPVS: h.ipvs, IPSet: h.ipset, IPTables: ipt, Netlink: h.netlink, Sysctl: s.Sysctl, Conntrack: h.conntrackFor(logger, family), NFTables: h.nft,
		NFTRules: h.nftRules, Reader: h.readerFor(logger, family, nftBackend && h.nftRules != nil, exec),
	}
}

// exposeProxiers sets what the rest of the server reads from the proxiers: what
// they hold back, their virtual servers' counters, and how to release their
// health check node ports.
func (s *ProxyServer) exposeProxiers(logger klog.Logger, all []*ipvsproxy.Proxier, healthServers []healthcheck.ServiceHealthServer) {
	s.HeldBack = func() any {
		out := []ipvsproxy.HeldBackObject{}
		for _, p := range all {
			out = append(out, p.HeldBack()...)
		}
		return out
	}
	s.Explain = func(ctx context.Context, namespace, name string) (any, string, bool, error) {
		var out []*ipvsproxy.Explanation
		var text strings.Builder
		for _, p := range all {
			x, err := p.Explain(ctx, types.NamespacedName{Namespace: namespace, Name: name})
			if err != nil {
				return nil, "", false, err
			}
			if x != nil {
				out = append(out, x)
				text.WriteString(x.Text())
			}
		}
		return out, text.String(), len(out) > 0, nil
	}
	s.virtualServerStats = func() []metrics.VirtualServerStats {
		var out []metrics.VirtualServerStats
		for _, p := range all {
			out = append(out, p.VirtualServerStats()...)
		}
		return out
	}
	s.releaseProxier = func() {
		// The health check node ports close, so that the next proxier can open them.
		for _, hs := range healthServers {
			if err := hs.SyncServices(nil); err != nil {
				logger.Error(err, "Failed to close the health check node ports of a stopped proxier")
			}
		}
	}
}

func iptablesProtocol(family v1.IPFamily) iptables.Protocol {
	if family == v1.IPv6Protocol {
		return iptables.ProtocolIPv6
	}
	return iptables.ProtocolIPv4
}

func parseCIDRs(list []string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, s := range list {
		_, c, err := net.ParseCIDR(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("invalid CIDR %q: %w", s, err)
		}
		out = append(out, ipfamily.CanonicalCIDR(c))
	}
	return out, nil
}

// familyCIDRs keeps the entries of one family (CIDRs and the "primary" keyword),
// each CIDR in its family's canonical form. A CIDR's family is that of its address,
// as upstream classifies it: ::ffff:10.0.0.0/104 is the IPv4 10.0.0.0/8.
func familyCIDRs(list []string, family v1.IPFamily) []string {
	var out []string
	for _, s := range list {
		if s == "primary" {
			out = append(out, s)
			continue
		}
		_, c, err := netutils.ParseCIDRSloppy(strings.TrimSpace(s))
		if err != nil {
			continue // validation refused it before a proxier was made
		}
		if c = ipfamily.CanonicalCIDR(c); (ipfamily.OfCIDR(c) == ipfamily.IPv6) == (family == v1.IPv6Protocol) {
			out = append(out, c.String())
		}
	}
	return out
}

// nodePortListenIPs are the addresses health check servers listen on: the IPs of
// host-length nodePortAddresses, or every address (nil) otherwise, as upstream.
func nodePortListenIPs(list []string, family v1.IPFamily) []net.IP {
	var ips []net.IP
	for _, s := range familyCIDRs(list, family) {
		_, c, err := net.ParseCIDR(s)
		if err != nil {
			continue
		}
		ones, bits := c.Mask.Size()
		if ones != bits {
			return nil
		}
		ips = append(ips, c.IP)
	}
	return ips
}

// localDetectorArgs returns iptables arguments matching traffic that does not come
// from a local pod, per detectLocalMode; nil when it cannot be detected.
func localDetectorArgs(logger klog.Logger, cfg *v1alpha1.KubeProxyConfiguration, podCIDRs []string, family v1.IPFamily) []string {
	// pick returns the first CIDR of family in canonical form; only a parsed CIDR
	// reaches the iptables text, an invalid one is logged and skipped.
	pick := func(source string, cidrs []string) string {
		for _, c := range cidrs {
			c = strings.TrimSpace(c)
			if c == "" {
				continue
			}
			_, n, err := netutils.ParseCIDRSloppy(c)
			if err != nil {
				logger.Error(err, "Ignoring an invalid CIDR for local traffic detection", "source", source, "cidr", c, "ipFamily", family)
				continue
			}
			if n = ipfamily.CanonicalCIDR(n); (ipfamily.OfCIDR(n) == ipfamily.IPv6) == (family == v1.IPv6Protocol) {
				return n.String()
			}
		}
		return ""
	}
	switch cfg.DetectLocalMode {
	case "ClusterCIDR", "":
		if c := pick("clusterCIDR", strings.Split(cfg.ClusterCIDR, ",")); c != "" {
			return []string{"!", "-s", c}
		}
		logger.Info("Detect-local-mode set to ClusterCIDR, but no cluster CIDR for family", "ipFamily", family)
	case "NodeCIDR":
		if c := pick("node spec.podCIDRs", podCIDRs); c != "" {
			return []string{"!", "-s", c}
		}
		logger.Info("Detect-local-mode set to NodeCIDR, but no PodCIDR defined at node for family", "ipFamily", family)
	case "BridgeInterface":
		return []string{"!", "-i", cfg.DetectLocal.BridgeInterface}
	case "InterfaceNamePrefix":
		return []string{"!", "-i", cfg.DetectLocal.InterfaceNamePrefix + "+"}
	}
	return nil
}

// resyncReader opens the sockets a family's periodic resync reads the kernel on, so
// that the writes of the syncs running meanwhile never wait behind its dumps. nil
// (the reads then share the sync loop's sockets) when they cannot be opened.
func resyncReader(logger klog.Logger, family v1.IPFamily, nft bool, exec utilexec.Interface) *ipvsproxy.KernelReader {
	h, err := ipvs.New("")
	if err != nil {
		logger.Error(err, "Failed to open an IPVS socket for resync reads; they share the sync loop's", "ipFamily", family)
		return nil
	}
	nl, err := netlink.New()
	if err != nil {
		h.Close()
		logger.Error(err, "Failed to open an rtnetlink socket for resync reads; they share the sync loop's", "ipFamily", family)
		return nil
	}
	r := &ipvsproxy.KernelReader{IPVS: h, Netlink: nl}
	if nft {
		// The nftables backend's set listings, on a socket of their own.
		rs, err := nftables.NewNetlink(ipvsproxy.NFTRulesTable(), exec)
		if err != nil {
			logger.Error(err, "Failed to open an nftables socket for resync reads; they share the sync loop's", "ipFamily", family)
		} else {
			r.NFTRules = rs
		}
	}
	return r
}

// openNFTRules opens the nftables rules backend's table over netlink. The
// nftables backend needs it. With the iptables backend it is wired into the
// proxiers only when the table exists (the node ran the nftables backend before),
// so that each removes its family's objects once its own rules are written.
func openNFTRules(ctx context.Context, logger klog.Logger, required bool, exec utilexec.Interface) (nftables.Ruleset, error) {
	rs, err := nftables.NewNetlink(ipvsproxy.NFTRulesTable(), exec)
	if err != nil {
		if required {
			return nil, fmt.Errorf("the nftables rules backend needs nftables in the kernel: %w", err)
		}
		logger.Info("Cannot reach nftables; a table of the nftables rules backend, if any, is left in place", "err", err)
		return nil, nil
	}
	if required {
		return rs, nil
	}
	chains, sets, err := rs.List(ctx)
	switch {
	case err != nil:
		logger.Info("Cannot read nftables; a table of the nftables rules backend, if any, is left in place", "err", err)
		return nil, nil
	case len(chains)+len(sets) == 0:
		return nil, nil
	}
	logger.Info("The nftables rules backend's table is present; each family removes its objects once its iptables rules are written",
		"table", ipvsproxy.NFTRulesTable().String())
	return rs, nil
}
