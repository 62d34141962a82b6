package app

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	ipvsproxy "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs"
	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/kernel"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// proxierHandles are the kernel sockets and tools the proxiers program through. The
// first createProxier opens them and every proxier built after it in the process (a
// rebuild for the Node's values, generation.go) shares them, so that replacing a
// proxier opens no socket and leaves none behind.
type proxierHandles struct {
	nftRules nftables.Ruleset // nil: no nftables rules backend table to write or remove
	ipvs     ipvs.Interface
	netlink  netlink.Handle
	ipset    ipset.Interface    // nil with the nftables backend on a node without ipset
	nft      nftables.Interface // nil without the nft binary
	// kernelRelease decides conn_reuse_mode handling ("" = assume a current kernel).
	kernelRelease string

	// Per family, opened when a proxier of the family is first built.
	conntrack map[v1.IPFamily]conntrack.Interface // nil entry: not available
	readers   map[v1.IPFamily]*ipvsproxy.KernelReader
}

// openProxierHandles opens what every proxier shares. A kernel without IPVS, or
// without nftables for the nftables rules backend, fails here with one clear line.
func openProxierHandles(ctx context.Context, logger klog.Logger, scheduler string, nftBackend bool, exec utilexec.Interface) (*proxierHandles, error) {
	h := &proxierHandles{conntrack: map[v1.IPFamily]conntrack.Interface{}, readers: map[v1.IPFamily]*ipvsproxy.KernelReader{}}
	var err error
	if h.nftRules, err = openNFTRules(ctx, logger, nftBackend, exec); err != nil {
		return nil, err
	}
	ipvsHandle, err := ipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("the ipvs proxy mode needs IPVS in the kernel: %w", err)
	}
	if err := ipvsproxy.CanUseIPVS(ctx, ipvsHandle, scheduler); err != nil {
		ipvsHandle.Close()
		return nil, err
	}
	nl, err := netlink.New()
	if err != nil {
		ipvsHandle.Close()
		return nil, fmt.Errorf("opening rtnetlink: %w", err)
	}
	h.ipvs, h.netlink = ipvsHandle, nl
	if _, err := exec.LookPath("ipset"); err == nil || !nftBackend {
		// Member changes go over netlink, not through a process.
		if h.ipset, err = ipset.NewNetlink(exec); err != nil {
			logger.Error(err, "Writing ipset members with `ipset restore` only")
			h.ipset = ipset.New(exec)
		}
	}
	if !nftBackend {
		// The set types' modules load beside the API server's lists, not in the
		// first sync's creates (a node's first start).
		go func() {
			if err := ipset.LoadTypes(ctx, iptablesrules.SetTypes()); err != nil {
				logger.V(2).Info("Could not load the ipset types ahead of the first sync; creating the sets loads them", "err", err)
			}
		}()
	}
	// Upstream's nftables mode keeps its rules in tables the proxiers remove once
	// they have synced (a node switched from that mode).
	if _, err := exec.LookPath("nft"); err == nil {
		h.nft = nftables.New(exec)
	} else {
		logger.Info("nft is not installed; tables of upstream's nftables mode, if any, are left in place")
	}
	if v, err := kernel.ReadVersion(kernel.DefaultRoot); err == nil {
		h.kernelRelease = v.String()
	} else {
		logger.Error(err, "Failed to read the kernel version; assuming a current kernel")
	}
	return h, nil
}

// conntrackFor returns the family's conntrack socket, nil when conntrack is not
// available (stale UDP flows then only expire).
func (h *proxierHandles) conntrackFor(logger klog.Logger, family v1.IPFamily) conntrack.Interface {
	if ct, opened := h.conntrack[family]; opened {
		return ct
	}
	af := uint8(unix.AF_INET)
	if family == v1.IPv6Protocol {
		af = unix.AF_INET6
	}
	var ct conntrack.Interface
	if c, err := conntrack.New(af); err == nil {
		ct = c
	} else {
		logger.Error(err, "Conntrack is not available; stale UDP flows will only expire", "ipFamily", family)
	}
	h.conntrack[family] = ct
	return ct
}

// readerFor returns the sockets the family's periodic resync reads the kernel on
// (resyncReader).
func (h *proxierHandles) readerFor(logger klog.Logger, family v1.IPFamily, nft bool, exec utilexec.Interface) *ipvsproxy.KernelReader {
	if r, opened := h.readers[family]; opened {
		return r
	}
	r := resyncReader(logger, family, nft, exec)
	h.readers[family] = r
	return r
}
