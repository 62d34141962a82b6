package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	iptablesrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/iptables"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// CleanupKernel is what --cleanup needs: IPVS, ipset, netlink and one iptables
// interface per family that exists on the node.
type CleanupKernel struct {
	IPVS     ipvs.Interface // nil when the kernel has no IPVS
	IPSet    ipset.Interface
	IPTables []iptables.Interface
	Netlink  netlink.Handle
	NFTables nftables.Interface // nil when nft is not installed
	// NFTRules is the nftables rules backend's table (both families' objects);
	// nil when nftables cannot be reached.
	NFTRules nftables.Ruleset
}

// upstreamNFTablesTables hold all of upstream's nftables-mode state.
var upstreamNFTablesTables = []nftables.Table{
	{Family: nftables.FamilyIPv4, Name: "kube-proxy"},
	{Family: nftables.FamilyIPv6, Name: "kube-proxy"},
}

// CleanupNFTablesMode deletes the tables of upstream's nftables mode, as
// upstream's ipvs mode does when it starts and on --cleanup. It returns the
// tables it deleted.
func CleanupNFTablesMode(ctx context.Context, nft nftables.Interface) ([]nftables.Table, error) {
	var deleted []nftables.Table
	var errs []error
	for _, t := range upstreamNFTablesTables {
		existed, err := nft.DeleteTable(ctx, t)
		if err != nil {
			errs = append(errs, err)
		}
		if existed && err == nil {
			deleted = append(deleted, t)
		}
	}
	return deleted, errors.Join(errs...)
}

// Cleanup removes everything kube-proxy (ours, or upstream's ipvs and iptables modes)
// programs on a node: its IPVS virtual servers (never third-party ones, never inside
// excludeCIDRs), kube-ipvs0, upstream's nftables-mode tables, the nftables rules
// backend's table, the chains upstream creates in nat, filter and mangle
// for every family (upstreamChains) with every rule that jumps to them, and the
// ipsets of upstream's ipvs mode in both families. Chains and sets of other software
// survive even when their names start with KUBE-. It is idempotent; the error names
// everything that could not be removed.
func Cleanup(ctx context.Context, k CleanupKernel, excludeCIDRs []*net.IPNet) error {
	var errs []error
	var all map[string]*ipset.SetWithEntries
	if k.IPSet != nil {
		var err error
		if all, err = k.IPSet.SaveAll(ctx); err != nil {
			errs = append(errs, fmt.Errorf("listing ipsets: %w", err))
		}
	}
	// With the nftables rules backend, the addresses and ports of our virtual
	// servers are in its sets: read them as the ipsets they stand for.
	vsSets := all
	if k.NFTRules != nil {
		fromNFT, err := nftSetsAsIPSets(ctx, k.NFTRules)
		if err != nil {
			errs = append(errs, err)
		}
		if len(fromNFT) > 0 {
			vsSets = make(map[string]*ipset.SetWithEntries, len(all)+len(fromNFT))
			for name, s := range all {
				vsSets[name] = s
			}
			for name, s := range fromNFT {
				if have, ok := vsSets[name]; ok {
					s = &ipset.SetWithEntries{Set: have.Set, Entries: append(slices.Clone(have.Entries), s.Entries...)}
				}
				vsSets[name] = s
			}
		}
	}
	if k.IPVS != nil {
		errs = append(errs, cleanupVirtualServers(ctx, k, vsSets, excludeCIDRs)...)
	}
	if k.Netlink != nil {
		if err := k.Netlink.DeleteDummyDevice(ctx, netlink.DefaultDummyDevice); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", netlink.DefaultDummyDevice, err))
		}
	}
	for _, ipt := range k.IPTables {
		for _, table := range []iptables.Table{iptables.TableNAT, iptables.TableFilter, iptables.TableMangle} {
			if err := iptablesrules.CleanupTable(ctx, ipt, table); err != nil {
				errs = append(errs, fmt.Errorf("removing %s %s rules: %w", ipt.Protocol(), table, err))
			}
		}
	}
	if k.NFTables != nil {
		if _, err := CleanupNFTablesMode(ctx, k.NFTables); err != nil {
			errs = append(errs, err)
		}
	}
	if k.NFTRules != nil {
		tx := nftables.NewTransaction()
		tx.DeleteTable()
		if err := k.NFTRules.Run(ctx, tx); err != nil && !nftables.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting table %s: %w", k.NFTRules.Table(), err))
		}
	}
	// Sets last: the kernel refuses to destroy a set an iptables rule still uses.
	if all != nil {
		ours := iptablesrules.KubeProxySetNames()
		names := make([]string, 0, len(all))
		for name := range all {
			if ours.Has(name) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			tx := &ipset.Transaction{}
			tx.Destroy(name)
			if err := k.IPSet.Apply(ctx, tx); err != nil && !ipset.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("destroying ipset %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// nftSetsAsIPSets reads the nftables rules backend's sets of both families as the
// ipsets (family names) whose entries they hold; the source ranges are left out.
func nftSetsAsIPSets(ctx context.Context, r nftables.Ruleset) (map[string]*ipset.SetWithEntries, error) {
	out := map[string]*ipset.SetWithEntries{}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		members, err := nftrules.Members(ctx, r, family)
		for _, m := range members {
			name := iptablesrules.FamilySetName(m.Set, family)
			if out[name] == nil {
				out[name] = &ipset.SetWithEntries{Set: ipset.Set{Name: name}}
			}
			out[name].Entries = append(out[name].Entries, iptablesrules.IPSetEntry(m))
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// cleanupVirtualServers deletes the virtual servers kube-proxy made, and only those:
// address and port both ours. That is an address on kube-ipvs0 (the device is
// kube-proxy's own), an address:port in a service set, a node port of its protocol on
// one of the node's own addresses (kube-proxy puts node ports nowhere else: a
// keepalived VIP held by another node that uses the same port is not ours), and
// upstream's TEST-NET-2 probe.
func cleanupVirtualServers(ctx context.Context, k CleanupKernel, all map[string]*ipset.SetWithEntries, exclude []*net.IPNet) []error {
	var errs []error
	vss, err := k.IPVS.GetVirtualServers(ctx)
	if err != nil {
		return []error{fmt.Errorf("listing IPVS virtual servers: %w", err)}
	}
	bound := sets.New[string]()
	if k.Netlink != nil {
		if addrs, err := k.Netlink.ListBindAddress(ctx, netlink.DefaultDummyDevice, ipfamily.Any); err == nil {
			for _, a := range addrs {
				bound.Insert(a.String())
			}
		}
	}
	// The node's own addresses, where node port virtual servers are made; without
	// them (no netlink) no node port virtual server can be shown to be ours.
	local := sets.New[string]()
	if k.Netlink != nil {
		addrs, err := k.Netlink.GetLocalAddresses(ctx, netlink.DefaultDummyDevice)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the node's addresses for its node port virtual servers: %w", err))
		}
		for _, a := range addrs {
			local.Insert(a.String())
		}
	}
	servicePorts := sets.New[string]() // "tcp/ip:port"
	nodePorts := sets.New[string]()    // "tcp/port"
	for name, s := range all {
		set, _ := iptablesrules.SetOfName(name)
		switch set {
		case rules.IPVSIPs:
			bound.Insert(s.Entries...)
		case rules.ClusterIP, rules.ExternalIP, rules.ExternalIPLocal, rules.LoadBalancer, rules.NodePortSCTP, rules.NodePortLocalSCTP:
			for _, e := range s.Entries {
				if key, ok := entryServiceKey(e); ok {
					servicePorts.Insert(key)
				}
			}
		case rules.NodePortTCP, rules.NodePortLocalTCP, rules.NodePortUDP, rules.NodePortLocalUDP:
			proto := "tcp"
			if set == rules.NodePortUDP || set == rules.NodePortLocalUDP {
				proto = "udp"
			}
			for _, e := range s.Entries {
				nodePorts.Insert(proto + "/" + e)
			}
		}
	}
	for _, vs := range vss {
		if inCIDRs(vs.Address, exclude) {
			continue
		}
		proto := strings.ToLower(vs.Protocol)
		port := strconv.Itoa(int(vs.Port))
		ours := bound.Has(vs.Address.String()) ||
			servicePorts.Has(proto+"/"+net.JoinHostPort(vs.Address.String(), port)) ||
			(nodePorts.Has(proto+"/"+port) && local.Has(vs.Address.String())) ||
			(vs.Address.Equal(net.ParseIP("198.51.100.0")) && vs.Port == 20000)
		if !ours {
			continue
		}
		if err := k.IPVS.DeleteVirtualServer(ctx, vs); err != nil && !ipvs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting virtual server %s: %w", vs, err))
		}
	}
	return errs
}

// entryServiceKey turns "10.0.0.1,tcp:80[,...]" into "tcp/10.0.0.1:80".
func entryServiceKey(e string) (string, bool) {
	parts := strings.Split(e, ",")
	if len(parts) < 2 {
		return "", false
	}
	pp := strings.SplitN(parts[1], ":", 2)
	if len(pp) != 2 {
		return "", false
	}
	return pp[0] + "/" + net.JoinHostPort(parts[0], pp[1]), true
}

func inCIDRs(ip net.IP, cidrs []*net.IPNet) bool {
	for _, c := range cidrs {
		if c.Contains(ip) {
			return true
		}
	}
	return false
}
