package ipvs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// CleanupKernel is what --cleanup needs: IPVS, ipset, netlink and one iptables
// interface per family that exists on the node.
type CleanupKernel struct {
	IPVS     ipvs.Interface // nil when the kernel has no IPVS
	IPSet    ipset.Interface
	IPTables []iptables.Interface
	Netlink  netlink.Handle
}

// kubeletChains belong to the kubelet, which also uses the KUBE- prefix; --cleanup
// leaves them alone.
var kubeletChains = sets.New[string]("KUBE-KUBELET-CANARY", "KUBE-FIREWALL", "KUBE-MARK-DROP")

// serviceSets hold (ip, protocol, port) of service virtual servers.
var serviceSets = []string{setClusterIP, setExternalIP, setExternalIPLocal, setLoadBalancer}

// Cleanup removes everything kube-proxy (ours, or upstream's ipvs and iptables modes)
// programs on a node: its IPVS virtual servers (never third-party ones, never inside
// excludeCIDRs), kube-ipvs0, the jump rules and KUBE-* chains of nat, filter and mangle
// for every family, and every KUBE-* / KUBE-6-* ipset. It is idempotent; the error
// names everything that could not be removed.
func Cleanup(ctx context.Context, k CleanupKernel, excludeCIDRs []*net.IPNet) error {
	var errs []error
	var all map[string]*ipset.SetWithEntries
	if k.IPSet != nil {
		var err error
		if all, err = k.IPSet.SaveAll(ctx); err != nil {
			errs = append(errs, fmt.Errorf("listing ipsets: %w", err))
		}
	}
	if k.IPVS != nil {
		errs = append(errs, cleanupVirtualServers(ctx, k, all, excludeCIDRs)...)
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
	// Sets last: the kernel refuses to destroy a set an iptables rule still uses.
	if all != nil {
		names := make([]string, 0, len(all))
		for name := range all {
			if strings.HasPrefix(name, "KUBE-") {
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

// cleanupVirtualServers deletes the virtual servers kube-proxy made: those whose
// address was on kube-ipvs0, whose address:port is in a service set, whose port is a
// node port of its protocol, and upstream's TEST-NET-2 probe.
func cleanupVirtualServers(ctx context.Context, k CleanupKernel, all map[string]*ipset.SetWithEntries, exclude []*net.IPNet) []error {
	var errs []error
	vss, err := k.IPVS.GetVirtualServers(ctx)
	if err != nil {
		return []error{fmt.Errorf("listing IPVS virtual servers: %w", err)}
	}
	bound := sets.New[string]()
	if k.Netlink != nil {
		if addrs, err := k.Netlink.ListBindAddress(ctx, netlink.DefaultDummyDevice); err == nil {
			for _, a := range addrs {
				bound.Insert(a.String())
			}
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
		case base == setIPVSIPs:
			bound.Insert(s.Entries...)
		case contains(serviceSets, base), strings.HasPrefix(base, "KUBE-NODE-PORT-SCTP"), strings.HasPrefix(base, "KUBE-NODE-PORT-LOCAL-SCTP"):
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
			nodePorts.Has(proto+"/"+port) ||
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

// cleanupTable removes, in one iptables-restore, every rule that jumps to a KUBE-
// chain and every KUBE- chain (kubelet's excepted).
func cleanupTable(ctx context.Context, ipt iptables.Interface, table iptables.Table) error {
	var buf bytes.Buffer
	if err := ipt.SaveInto(ctx, table, &buf); err != nil {
		return err
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
			if strings.HasPrefix(name, "KUBE-") && !kubeletChains.Has(name) {
				chains = append(chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			fields := strings.Fields(line)
			// Rules of the chains being removed go with them; any other chain (built-in
			// or someone else's) loses only its jumps into them.
			if len(fields) < 2 || (strings.HasPrefix(fields[1], "KUBE-") && !kubeletChains.Has(fields[1])) {
				continue
			}
			target := jumpTarget(fields)
			if strings.HasPrefix(target, "KUBE-") && !kubeletChains.Has(target) {
				deletes = append(deletes, "-D"+line[2:])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading iptables-save output: %w", err)
	}
	if len(chains) == 0 && len(deletes) == 0 {
		return nil
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
	return ipt.RestoreAll(ctx, out.Bytes(), iptables.NoFlushTables, iptables.NoRestoreCount)
}

func jumpTarget(fields []string) string {
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "-j" || fields[i] == "-g" {
			return fields[i+1]
		}
	}
	return ""
}
