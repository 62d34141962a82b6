package ipvs

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// nodeAddresses returns the node's local addresses of this family (not on kube-ipvs0)
// and the subset NodePort virtual servers listen on.
func (p *Proxier) nodeAddresses(ctx context.Context, stats *SyncStats) (sets.Set[string], []net.IP, error) {
	stats.count(opDumpAddresses)
	all, err := p.kernel.Netlink.GetLocalAddresses(ctx, netlink.DefaultDummyDevice)
	if err != nil {
		return nil, nil, fmt.Errorf("listing node addresses: %w", err)
	}
	local := sets.New[string]()
	var ips []net.IP
	for _, ip := range all {
		if !p.ourFamily(ip) {
			continue
		}
		local.Insert(ip.String())
		ips = append(ips, ip)
	}
	sort.Slice(ips, func(i, j int) bool { return ips[i].String() < ips[j].String() })
	return local, filterNodePortIPs(ips, p.opts.NodePortAddresses, p.opts.NodeIP), nil
}

// filterNodePortIPs applies nodePortAddresses: empty selects every address, otherwise
// addresses inside one of the CIDRs, and "primary" selects the node's primary IP.
func filterNodePortIPs(ips []net.IP, selectors []string, nodeIP net.IP) []net.IP {
	if len(selectors) == 0 {
		return ips
	}
	var out []net.IP
	for _, ip := range ips {
		for _, s := range selectors {
			if s == "primary" {
				if nodeIP != nil && ip.Equal(nodeIP) {
					out = append(out, ip)
					break
				}
				continue
			}
			if _, cidr, err := net.ParseCIDR(s); err == nil && cidr.Contains(ip) {
				out = append(out, ip)
				break
			}
		}
	}
	return out
}

func sameIPs(a, b []net.IP) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func (p *Proxier) ourFamily(ip net.IP) bool { return p.family().Has(ip) }

// family is this proxier's family for the kernel reads that leave the other out.
func (p *Proxier) family() ipfamily.Family {
	if p.opts.IPFamily == v1.IPv6Protocol {
		return ipfamily.IPv6
	}
	return ipfamily.IPv4
}

func (p *Proxier) excluded(ip net.IP) bool {
	for _, c := range p.opts.ExcludeCIDRs {
		if c.Contains(ip) {
			return true
		}
	}
	return false
}

// observe reads what the kernel holds for this family: one bulk IPVS read (GetAll:
// the virtual servers and every real server, not one destination dump per virtual
// server), the sets of the rules backend (one `ipset save`, or a listing of each
// nftables set), one address dump.
// It runs in the sync loop or, for a periodic resync, beside it (with handles of its
// own): it reads only what does not change after construction.
func (p *Proxier) observe(ctx context.Context, ipvsH ipvs.Interface, nl netlink.Handle, read rules.ReadFunc, stats *SyncStats) (*appliedState, error) {
	st := &appliedState{
		vs:      map[vsKey]*appliedVS{},
		entries: sets.New[rules.Member](),
		addrs:   sets.New[string](),
	}
	stats.count(opDumpIPVS)
	// Only this family's, so the IPv6 proxier of an IPv4-only node reads no real
	// server at all.
	all, err := ipvsH.GetAll(ctx, p.family(), func(vs *ipvs.VirtualServer) bool {
		return !p.excluded(vs.Address)
	})
	if err != nil {
		return nil, fmt.Errorf("listing IPVS virtual servers: %w", err)
	}
	for _, d := range all {
		vs, rss := d.VirtualServer, d.RealServers
		a := &appliedVS{vs: vs, rs: make([]desiredRS, 0, len(rss))}
		for _, rs := range rss {
			a.rs = append(a.rs, desiredRS{key: keyOfRS(rs.Address, rs.Port), weight: int32(rs.Weight)})
		}
		slices.SortFunc(a.rs, func(x, y desiredRS) int { return compareRSKeys(x.key, y.key) })
		a.rs = slices.CompactFunc(a.rs, func(x, y desiredRS) bool { return x.key == y.key })
		st.vs[keyOfVS(vs)] = a
	}
	stats.phase(p.clock.Now(), "observe-ipvs")
	o, err := read(ctx, stats)
	if err != nil {
		return nil, err
	}
	st.entries, st.rules, st.rulesChecked = o.Members, o, o.RulesChecked
	stats.phase(p.clock.Now(), "observe-sets")
	// A first start and a device someone deleted look alike: no address. The full
	// sync's plan makes the device before it binds any (deviceStep).
	stats.count(opDumpAddresses)
	addrs, err := nl.ListBindAddress(ctx, netlink.DefaultDummyDevice, p.family())
	if err != nil && !netlink.IsNotFound(err) {
		return nil, fmt.Errorf("listing addresses of %s: %w", netlink.DefaultDummyDevice, err)
	}
	for _, a := range addrs {
		st.addrs.Insert(a.String())
	}
	return st, nil
}
