package ipvs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
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

// upstreamChains is every iptables chain upstream kube-proxy 1.37 creates in its
// ipvs and iptables modes (pkg/proxy/ipvs/proxier.go iptablesChains,
// pkg/proxy/iptables/proxier.go and its CleanupLeftovers), by table. --cleanup
// removes these and nothing else: other software uses the KUBE- prefix too
// (the kubelet's KUBE-FIREWALL and KUBE-KUBELET-CANARY, kube-router's
// KUBE-ROUTER-* and KUBE-NWPLCY-*, ...).
var upstreamChains = map[iptables.Table][]iptables.Chain{
	iptables.TableNAT: {
		chainServices,       // ipvs and iptables modes
		chainPostrouting,    // ipvs and iptables modes
		chainMarkMasq,       // ipvs and iptables modes
		chainNodePort,       // ipvs mode
		chainLoadBalancer,   // ipvs mode
		"KUBE-NODEPORTS",    // iptables mode
		"KUBE-PROXY-CANARY", // iptables mode: the rule-flush canary
	},
	iptables.TableFilter: {
		chainForward,             // ipvs and iptables modes
		chainProxyFirewall,       // ipvs and iptables modes
		chainNodePort,            // ipvs mode: health check node ports
		chainSourceRangesFW,      // ipvs mode
		chainIPVSFilter,          // ipvs mode
		chainIPVSOutFilter,       // ipvs mode
		"KUBE-SERVICES",          // iptables mode: REJECT for Services without endpoints
		"KUBE-EXTERNAL-SERVICES", // iptables mode
		"KUBE-NODEPORTS",         // iptables mode: health check node ports
		"KUBE-PROXY-CANARY",      // iptables mode
	},
	iptables.TableMangle: {
		"KUBE-PROXY-CANARY", // iptables mode
	},
}

// iptablesModeServiceChain matches the per-Service and per-endpoint chains of
// upstream's iptables mode: a fixed prefix and the first 16 characters of a
// base32-encoded SHA-256 (servicePortChainName, servicePortEndpointChainName, ...).
var iptablesModeServiceChain = regexp.MustCompile(`^KUBE-(SVC|SVL|EXT|FW|SEP)-[A-Z2-7]{16}$`)

// isKubeProxyChain says whether chain in table is one upstream kube-proxy (or this
// daemon) creates.
func isKubeProxyChain(table iptables.Table, chain string) bool {
	for _, c := range upstreamChains[table] {
		if string(c) == chain {
			return true
		}
	}
	return table == iptables.TableNAT && iptablesModeServiceChain.MatchString(chain)
}

// kubeProxySetNames is every ipset name upstream's ipvs mode creates, in both
// families (KUBE-6-* for IPv6), plus the temporary names this daemon uses while it
// replaces a set of the wrong type.
func kubeProxySetNames() sets.Set[string] {
	names := sets.New[string]()
	for _, s := range ipsetTable {
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			name := familySetName(s.name, family)
			names.Insert(name, ipset.TempName(name))
		}
	}
	return names
}

// serviceSets hold (ip, protocol, port) of service virtual servers.
var serviceSets = []rules.Set{setClusterIP, setExternalIP, setExternalIPLocal, setLoadBalancer}

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
			if err := cleanupTable(ctx, ipt, table); err != nil {
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
		ours := kubeProxySetNames()
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
		f := newNFTFamily(family)
		for _, s := range nftSetTable {
			elems, err := r.ListElements(ctx, f.name(s.name))
			if nftables.IsNotFound(err) {
				continue
			}
			if err != nil {
				return out, fmt.Errorf("listing nftables set %s: %w", f.name(s.name), err)
			}
			for _, fields := range elems {
				e, ok := nftEntry(s, fields)
				if !ok {
					continue
				}
				name := familySetName(e.Set, family)
				if out[name] == nil {
					out[name] = &ipset.SetWithEntries{Set: ipset.Set{Name: name}}
				}
				out[name].Entries = append(out[name].Entries, ipsetEntry(e))
			}
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
		base := name
		if strings.HasPrefix(name, ipv6SetPrefix) {
			base = upstreamSetPrefix + strings.TrimPrefix(name, ipv6SetPrefix)
		}
		switch {
		case base == setIPVSIPs.String():
			bound.Insert(s.Entries...)
		case slices.ContainsFunc(serviceSets, func(s rules.Set) bool { return s.String() == base }), strings.HasPrefix(base, "KUBE-NODE-PORT-SCTP"), strings.HasPrefix(base, "KUBE-NODE-PORT-LOCAL-SCTP"):
			for _, e := range s.Entries {
				if key, ok := entryServiceKey(e); ok {
					servicePorts.Insert(key)
				}
			}
		case strings.HasPrefix(base, "KUBE-NODE-PORT-"):
			proto := "tcp"
			if strings.HasSuffix(base, "UDP") {
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func inCIDRs(ip net.IP, cidrs []*net.IPNet) bool {
	for _, c := range cidrs {
		if c.Contains(ip) {
			return true
		}
	}
	return false
}

// cleanupTable removes, in one iptables-restore, kube-proxy's chains of table
// (isKubeProxyChain) and every rule of another chain that jumps to one of them.
func cleanupTable(ctx context.Context, ipt iptables.Interface, table iptables.Table) error {
	_, err := removeChains(ctx, ipt, table, func(chain string) bool { return isKubeProxyChain(table, chain) }, nil)
	return err
}

// removeChains removes, in one iptables-restore, the chains of table that
// isChain selects, every rule of another chain that jumps to one of them, and
// every rule isRule selects (a whole "-A CHAIN ..." line of iptables-save;
// isRule may be nil). It returns the chains it removed.
func removeChains(ctx context.Context, ipt iptables.Interface, table iptables.Table, isChain func(string) bool, isRule func(string) bool) ([]string, error) {
	var buf bytes.Buffer
	if err := ipt.SaveInto(ctx, table, &buf); err != nil {
		return nil, err
	}
	var chains []string
	var deletes []string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(line[1:])[0]
			if isChain(name) {
				chains = append(chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			// Rules of the chains being removed go with them; any other chain (built-in
			// or someone else's) loses only its jumps into them.
			if len(fields) < 2 || isChain(fields[1]) {
				continue
			}
			if isChain(jumpTarget(fields)) || (isRule != nil && isRule(line)) {
				deletes = append(deletes, "-D"+line[2:])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading iptables-save output: %w", err)
	}
	if len(chains) == 0 && len(deletes) == 0 {
		return nil, nil
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "*%s\n", table)
	for _, c := range chains {
		fmt.Fprintf(&out, ":%s - [0:0]\n", c) // declaring flushes it
	}
	for _, d := range deletes {
		out.WriteString(d + "\n")
	}
	for _, c := range chains {
		fmt.Fprintf(&out, "-X %s\n", c)
	}
	out.WriteString("COMMIT\n")
	if err := ipt.RestoreAll(ctx, out.Bytes(), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
		return nil, err
	}
	return chains, nil
}

func jumpTarget(fields []string) string {
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "-j" || fields[i] == "-g" {
			return fields[i+1]
		}
	}
	return ""
}
