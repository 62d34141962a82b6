package app

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// runCleanup removes everything kube-proxy programmed on the node (--cleanup).
// Only s.Config and s.FeatureGate are set: cleanup needs no apiserver.
func runCleanup(ctx context.Context, s *ProxyServer) error {
	logger := klog.FromContext(ctx)
	exec := utilexec.New()
	k := ipvsproxy.CleanupKernel{IPSet: ipset.New(exec)}
	if h, err := ipvs.New(""); err == nil {
		k.IPVS = h
	} else {
		logger.Info("IPVS is not available; no virtual servers to remove", "err", err)
	}
	if nl, err := netlink.New(); err == nil {
		k.Netlink = nl
	} else {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	mode, err := iptables.DetectMode(ctx, exec)
	if err != nil {
		return fmt.Errorf("choosing the iptables backend: %w", err)
	}
	k.IPTables = []iptables.Interface{iptables.New(exec, iptables.ProtocolIPv4, mode)}
	if kernelSupportsFamily("IPv6") {
		k.IPTables = append(k.IPTables, iptables.New(exec, iptables.ProtocolIPv6, mode))
	}
	if _, err := exec.LookPath("nft"); err == nil {
		k.NFTables = nftables.New(exec)
	} else {
		logger.Info("nft is not installed; tables of upstream's nftables mode, if any, are left in place")
	}
	// The nftables rules backend's table is written over netlink, and removed so.
	rs, err := nftables.NewNetlink(ipvsproxy.NFTRulesTable(), exec)
	if err == nil {
		_, _, err = rs.List(ctx) // a kernel without nftables has no table to remove
	}
	if err == nil {
		k.NFTRules = rs
	} else {
		logger.Info("Cannot reach nftables; a table of the nftables rules backend, if any, is left in place", "err", err)
	}
	exclude, err := parseCIDRs(s.Config.IPVS.ExcludeCIDRs)
	if err != nil {
		return err
	}
	return ipvsproxy.Cleanup(ctx, k, exclude)
}
