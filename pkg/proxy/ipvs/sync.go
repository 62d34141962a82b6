package ipvs

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/conntrack"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// appliedState is what the proxier believes the kernel holds for its family: read from
// the kernel on a full sync, then kept up to date with every successful write.
type appliedState struct {
	vs       map[vsKey]*appliedVS
	entries  sets.Set[setEntry]
	addrs    sets.Set[string]
	iptables []byte
	sets     map[string]*ipset.Set // family name -> header, of the sets that exist
}

type appliedVS struct {
	vs *ipvs.VirtualServer
	// rs is sorted by key and unique. It is never changed in place: once a virtual
	// server matches its desired state it shares the desired list, so the applied state
	// costs no memory of its own at steady state.
	rs []desiredRS
}

// weight returns the applied weight of real server k.
func (a *appliedVS) weight(k rsKey) (int32, bool) {
	i, ok := slices.BinarySearchFunc(a.rs, k, func(e desiredRS, k rsKey) int { return compareRSKeys(e.key, k) })
	if !ok {
		return 0, false
	}
	return a.rs[i].weight, true
}

// conntrackTarget is a UDP/SCTP virtual server whose real servers changed: flows to it
// whose reply source is not one of its current real servers are stale.
type conntrackTarget struct {
	protocol string
	addr     string
	port     uint16
}

// sync runs one sync. It returns the first error; state written before the error is
// reflected in p.applied, but the caller discards p.applied on error anyway.
func (p *Proxier) sync(ctx context.Context, full bool) (SyncStats, error) {
	var stats SyncStats
	svcResult := p.svcPortMap.Update(p.serviceChanges)
	epResult := p.endpointsMap.Update(p.endpointsChanges)
	observeChangesApplied()

	rebuildAll := full || p.nodeLabelsChanged
	p.bc.nodeLabels = p.nodeLabels
	p.nodeLabelsChanged = false

	// Node addresses: one netlink dump per sync. NodePort, externalIP and LB decisions
	// depend on them, so a change rebuilds every Service.
	localAddrs, nodePortIPs, err := p.nodeAddresses(ctx)
	if err != nil {
		return stats, err
	}
	if !localAddrs.Equal(p.bc.localAddrs) || !sameIPs(nodePortIPs, p.bc.nodePortIPs) {
		p.bc.localAddrs, p.bc.nodePortIPs = localAddrs, nodePortIPs
		rebuildAll = true
	}

	t := newTouched()
	var changed sets.Set[types.NamespacedName]
	if rebuildAll {
		changed = sets.New[types.NamespacedName]()
		for n := range p.index.services {
			changed.Insert(n)
		}
		p.portsMu.Lock()
		for n := range p.portsByService {
			changed.Insert(n)
		}
		p.portsMu.Unlock()
	} else {
		changed = svcResult.UpdatedServices.Union(epResult.UpdatedServices)
	}
	for name := range changed {
		p.index.set(name, p.buildService(name), t)
	}
	stats.Services = changed.Len()

	if full {
		observed, err := p.observe(ctx)
		if err != nil {
			return stats, err
		}
		// With a trusted memory of the kernel, whatever a full sync has to write is
		// drift: someone else changed the kernel (or we missed an event).
		stats.DriftCheck = p.applied != nil && !p.needFull
		p.applied = observed
		t = p.index.allTouched()
		for k := range observed.vs {
			t.vs.Insert(k)
		}
		for e := range observed.entries {
			t.entries.Insert(e)
		}
		for a := range observed.addrs {
			t.addrs.Insert(a)
		}
		if err := p.ensureSets(ctx, &stats); err != nil {
			return stats, err
		}
	}

	var ct []conntrackTarget
	if err := p.apply(ctx, t, full, &stats, &ct); err != nil {
		return stats, err
	}
	if err := p.processDraining(ctx, &stats); err != nil {
		return stats, err
	}
	if t.health || !p.hcSynced {
		p.syncHealthServers()
	}
	p.cleanConntrack(ctx, ct, full)
	observeEndpointLatency(p.opts.IPFamily, epResult.LastChangeTriggerTimes)
	observeNoLocal(p.opts.IPFamily, p.index.noLocalIntern.Len(), p.index.noLocalExtern.Len())
	return stats, nil
}

// buildService collects one Service's ports and builds its desired state (nil when the
// Service has no ports left in this family).
func (p *Proxier) buildService(name types.NamespacedName) *serviceState {
	// The ports built last time (a removed port must be rebuilt away) and the ports the
	// Service declares now; a Service has a handful, so a list beats a set.
	candidates := slices.Clone(p.builtPorts[name])
	p.portsMu.Lock()
	for _, spn := range p.portsByService[name] {
		if !slices.Contains(candidates, spn) {
			candidates = append(candidates, spn)
		}
	}
	p.portsMu.Unlock()
	var ports []servicePort
	var found []proxy.ServicePortName
	for _, spn := range candidates {
		info, ok := p.svcPortMap[spn]
		if !ok {
			continue
		}
		found = append(found, spn)
		ports = append(ports, servicePort{name: spn, info: info, endpoints: p.endpointsMap[spn]})
	}
	if len(ports) == 0 {
		delete(p.builtPorts, name)
		return nil
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].name.String() < ports[j].name.String() })
	p.builtPorts[name] = found
	return buildServiceState(&p.bc, ports)
}

// nodeAddresses returns the node's local addresses of this family (not on kube-ipvs0)
// and the subset NodePort virtual servers listen on.
func (p *Proxier) nodeAddresses(ctx context.Context) (sets.Set[string], []net.IP, error) {
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

func (p *Proxier) ourFamily(ip net.IP) bool {
	return (ip.To4() != nil) == (p.opts.IPFamily == v1.IPv4Protocol)
}

func (p *Proxier) excluded(ip net.IP) bool {
	for _, c := range p.opts.ExcludeCIDRs {
		if c.Contains(ip) {
			return true
		}
	}
	return false
}

// observe reads what the kernel holds for this family: one IPVS service dump plus one
// destination dump per virtual server, one `ipset save`, one address dump.
func (p *Proxier) observe(ctx context.Context) (*appliedState, error) {
	st := &appliedState{
		vs:      map[vsKey]*appliedVS{},
		entries: sets.New[setEntry](),
		addrs:   sets.New[string](),
		sets:    map[string]*ipset.Set{},
	}
	vss, err := p.kernel.IPVS.GetVirtualServers(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing IPVS virtual servers: %w", err)
	}
	for _, vs := range vss {
		if !p.ourFamily(vs.Address) || p.excluded(vs.Address) {
			continue
		}
		rss, err := p.kernel.IPVS.GetRealServers(ctx, vs)
		if err != nil {
			return nil, fmt.Errorf("listing real servers of %s: %w", vs, err)
		}
		a := &appliedVS{vs: vs, rs: make([]desiredRS, 0, len(rss))}
		for _, rs := range rss {
			a.rs = append(a.rs, desiredRS{key: keyOfRS(rs.Address, rs.Port), weight: int32(rs.Weight)})
		}
		slices.SortFunc(a.rs, func(x, y desiredRS) int { return compareRSKeys(x.key, y.key) })
		a.rs = slices.CompactFunc(a.rs, func(x, y desiredRS) bool { return x.key == y.key })
		st.vs[keyOfVS(vs)] = a
	}
	all, err := p.kernel.IPSet.SaveAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	for name, s := range all {
		base, ours := p.reverse[name]
		if !ours {
			continue
		}
		hdr := s.Set
		st.sets[name] = &hdr
		for _, e := range s.Entries {
			st.entries.Insert(setEntry{base, e})
		}
	}
	// The device is created here, before its addresses are read, so a first start
	// and a device someone deleted look alike: empty.
	if _, err := p.kernel.Netlink.EnsureDummyDevice(ctx, netlink.DefaultDummyDevice); err != nil {
		return nil, fmt.Errorf("ensuring dummy device %s: %w", netlink.DefaultDummyDevice, err)
	}
	addrs, err := p.kernel.Netlink.ListBindAddress(ctx, netlink.DefaultDummyDevice)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", netlink.DefaultDummyDevice, err)
	}
	for _, a := range addrs {
		if p.ourFamily(a) {
			st.addrs.Insert(a.String())
		}
	}
	return st, nil
}

// apply writes the differences for the touched keys, in an order that never sends
// traffic somewhere wrong: sets filled, addresses bound, iptables written, IPVS changed,
// addresses unbound.
func (p *Proxier) apply(ctx context.Context, t *touched, full bool, stats *SyncStats, ct *[]conntrackTarget) error {
	a := p.applied

	// 1. ipset members: one transaction.
	tx := &ipset.Transaction{}
	var added, removed []setEntry
	for e := range t.entries {
		want, have := p.index.hasEntry(e), a.entries.Has(e)
		switch {
		case want && !have:
			tx.Add(p.names[e.set], e.entry)
			added = append(added, e)
		case !want && have:
			tx.Del(p.names[e.set], e.entry)
			removed = append(removed, e)
		}
	}
	if tx.Len() > 0 {
		if err := p.kernel.IPSet.Apply(ctx, tx); err != nil {
			return fmt.Errorf("applying %d ipset changes: %w", tx.Len(), err)
		}
		stats.IPSetOps += tx.Len()
		for _, e := range added {
			a.entries.Insert(e)
		}
		for _, e := range removed {
			a.entries.Delete(e)
		}
	}

	// 2. bind new service addresses.
	addrs := sets.List(t.addrs)
	for _, addr := range addrs {
		if p.index.hasAddr(addr) && !a.addrs.Has(addr) {
			if _, err := p.kernel.Netlink.EnsureAddressBind(ctx, net.ParseIP(addr), netlink.DefaultDummyDevice); err != nil {
				return fmt.Errorf("binding %s to %s: %w", addr, netlink.DefaultDummyDevice, err)
			}
			a.addrs.Insert(addr)
			stats.AddressOps++
		}
	}

	// 3. iptables: our chains are rewritten whole, but only when their text changes
	// (or on a full sync, which also repairs tampering).
	rules := p.iptablesRules()
	if full || string(rules) != string(a.iptables) {
		if err := p.kernel.IPTables.RestoreAll(ctx, rules, iptables.NoFlushTables, iptables.RestoreCount); err != nil {
			observeIPTablesFailure(p.opts.IPFamily)
			return fmt.Errorf("writing iptables rules: %w", err)
		}
		a.iptables = rules
		stats.IPTablesWrite = true
	}
	if full {
		if err := p.ensureJumpRules(ctx); err != nil {
			return err
		}
	}

	// 4. IPVS.
	keys := t.vs.UnsortedList()
	slices.SortFunc(keys, compareVSKeys)
	for _, k := range keys {
		n, err := p.syncVirtualServer(ctx, k, ct)
		stats.IPVSOps += n
		if err != nil {
			return err
		}
	}

	// 5. unbind addresses no Service wants any more.
	for _, addr := range addrs {
		if !p.index.hasAddr(addr) && a.addrs.Has(addr) {
			if err := p.kernel.Netlink.UnbindAddress(ctx, net.ParseIP(addr), netlink.DefaultDummyDevice); err != nil {
				return fmt.Errorf("unbinding %s from %s: %w", addr, netlink.DefaultDummyDevice, err)
			}
			a.addrs.Delete(addr)
			stats.AddressOps++
		}
	}
	return nil
}

func (p *Proxier) iptablesRules() []byte {
	out := make([]string, 0, len(p.index.outRefs))
	for r := range p.index.outRefs {
		out = append(out, r)
	}
	return buildIPTablesRules(&rulesInput{
		family:            p.opts.IPFamily,
		names:             p.names,
		setEmpty:          p.index.setEmpty,
		masqueradeAll:     p.opts.MasqueradeAll,
		localDetectorArgs: p.opts.LocalDetectorArgs,
		masqueradeMark:    masqueradeMarkFor(p.opts.MasqueradeBit),
		outFilterRules:    out,
		randomFully:       p.randomFully,
	})
}

func (p *Proxier) ensureJumpRules(ctx context.Context) error {
	for _, j := range jumpRules {
		if _, err := p.kernel.IPTables.EnsureRule(ctx, iptables.Prepend, j.table, j.from,
			"-m", "comment", "--comment", j.comment, "-j", string(j.to)); err != nil {
			return fmt.Errorf("ensuring jump from %s/%s to %s: %w", j.table, j.from, j.to, err)
		}
	}
	return nil
}

// syncVirtualServer makes one virtual server match its desired state; it returns the
// number of IPVS operations issued.
func (p *Proxier) syncVirtualServer(ctx context.Context, key vsKey, ct *[]conntrackTarget) (int, error) {
	d := p.index.virtualServer(key)
	a := p.applied.vs[key]
	ops := 0
	switch {
	case d == nil && a == nil:
		return 0, nil
	case d == nil:
		if err := p.kernel.IPVS.DeleteVirtualServer(ctx, a.vs); err != nil && !ipvs.IsNotFound(err) {
			return 1, err
		}
		delete(p.applied.vs, key)
		for _, r := range a.rs {
			delete(p.draining, drainKey{key, r.key})
		}
		p.noteConntrack(a.vs, ct)
		return 1, nil
	case p.excluded(d.vs.Address):
		return 0, nil
	case a == nil:
		ops++
		if err := p.kernel.IPVS.AddVirtualServer(ctx, d.vs); err != nil {
			if !ipvs.IsExists(err) {
				return ops, err
			}
			// Someone else created it since we looked: take it over.
			ops++
			if err := p.kernel.IPVS.UpdateVirtualServer(ctx, d.vs); err != nil {
				return ops, err
			}
		}
		a = &appliedVS{vs: d.vs}
		p.applied.vs[key] = a
	case !a.vs.Equal(d.vs):
		ops++
		if err := p.kernel.IPVS.UpdateVirtualServer(ctx, d.vs); err != nil {
			return ops, err
		}
		a.vs = d.vs
	}
	if slices.Equal(a.rs, d.realServers) {
		// The usual case of a full sync: nothing to do but share the desired list.
		a.rs = d.realServers
		if len(p.draining) > 0 {
			for _, want := range d.realServers {
				delete(p.draining, drainKey{key, want.key})
			}
		}
		return ops, nil
	}

	// Walk both sorted lists: desired only -> add, both -> fix the weight, applied only
	// -> stale. Stale ones are handled after every add, so that replacing a Service's
	// only endpoint never leaves it without one. out is the new applied list.
	out := make([]desiredRS, 0, max(len(a.rs), len(d.realServers)))
	var stale []desiredRS
	changedRS := false
	have, want := a.rs, d.realServers
	for len(have) > 0 || len(want) > 0 {
		c := 0
		switch {
		case len(have) == 0:
			c = 1
		case len(want) == 0:
			c = -1
		default:
			c = compareRSKeys(have[0].key, want[0].key)
		}
		switch {
		case c < 0:
			stale = append(stale, have[0])
			have = have[1:]
			continue
		case c > 0: // desired, not in the kernel
			w := want[0]
			want = want[1:]
			ops++
			if err := p.kernel.IPVS.AddRealServer(ctx, a.vs, w.key.realServer(w.weight)); err != nil {
				return ops, err
			}
			out = append(out, w)
			changedRS = true
		default:
			h, w := have[0], want[0]
			have, want = have[1:], want[1:]
			if h.weight != w.weight {
				ops++
				if err := p.kernel.IPVS.UpdateRealServer(ctx, a.vs, w.key.realServer(w.weight)); err != nil {
					return ops, err
				}
				changedRS = true
			}
			out = append(out, w)
		}
		if len(p.draining) > 0 {
			delete(p.draining, drainKey{key, out[len(out)-1].key})
		}
	}
	kept := false
	for _, h := range stale {
		if _, draining := p.draining[drainKey{key, h.key}]; draining {
			out, kept = append(out, h), true
			continue
		}
		// TCP real servers that still serve traffic drain at weight 0; one already at
		// weight 0 was terminating and its pod is now gone, and UDP/SCTP real servers go
		// at once (kubernetes#71514: a weight-0 UDP destination keeps receiving a client's
		// datagrams until its IPVS entry expires).
		if a.vs.Protocol == ipvs.TCP && p.bc.drainTerminating && h.weight > 0 {
			ops++
			if err := p.kernel.IPVS.UpdateRealServer(ctx, a.vs, h.key.realServer(0)); err != nil {
				return ops, fmt.Errorf("draining: %w", err)
			}
			p.draining[drainKey{key, h.key}] = p.clock.Now().Add(p.opts.DrainTimeout).UnixNano()
			out, kept = append(out, desiredRS{key: h.key, weight: 0}), true
			continue
		}
		ops++
		if err := p.kernel.IPVS.DeleteRealServer(ctx, a.vs, h.key.realServer(h.weight)); err != nil && !ipvs.IsNotFound(err) {
			return ops, err
		}
		changedRS = true
	}
	if kept {
		slices.SortFunc(out, func(x, y desiredRS) int { return compareRSKeys(x.key, y.key) })
	}
	if slices.Equal(out, d.realServers) {
		out = d.realServers
	}
	a.rs = out
	if changedRS {
		p.noteConntrack(a.vs, ct)
	}
	return ops, nil
}

func (p *Proxier) noteConntrack(vs *ipvs.VirtualServer, ct *[]conntrackTarget) {
	if vs.Protocol == ipvs.UDP || vs.Protocol == ipvs.SCTP {
		*ct = append(*ct, conntrackTarget{protocol: vs.Protocol, addr: vs.Address.String(), port: vs.Port})
	}
}

// processDraining deletes draining real servers whose connections have ended or whose
// deadline has passed: one destination dump per virtual server with draining entries.
func (p *Proxier) processDraining(ctx context.Context, stats *SyncStats) error {
	if len(p.draining) == 0 {
		return nil
	}
	byVS := map[vsKey][]rsKey{}
	for k := range p.draining {
		byVS[k.vs] = append(byVS[k.vs], k.rs)
	}
	now := p.clock.Now().UnixNano()
	vsKeys := make([]vsKey, 0, len(byVS))
	for k := range byVS {
		vsKeys = append(vsKeys, k)
	}
	slices.SortFunc(vsKeys, compareVSKeys)
	for _, vk := range vsKeys {
		rks := byVS[vk]
		slices.SortFunc(rks, compareRSKeys)
		a := p.applied.vs[vk]
		if a == nil {
			for _, rk := range rks {
				delete(p.draining, drainKey{vk, rk})
			}
			continue
		}
		live, err := p.kernel.IPVS.GetRealServers(ctx, a.vs)
		if err != nil {
			return err
		}
		conns := make(map[rsKey]int, len(live))
		for _, rs := range live {
			conns[keyOfRS(rs.Address, rs.Port)] = rs.ActiveConn + rs.InactiveConn
		}
		for _, rk := range rks {
			dk := drainKey{vk, rk}
			n, present := conns[rk]
			if present && n > 0 && now < p.draining[dk] {
				continue
			}
			if weight, ok := a.weight(rk); ok && present {
				stats.IPVSOps++
				if err := p.kernel.IPVS.DeleteRealServer(ctx, a.vs, rk.realServer(weight)); err != nil && !ipvs.IsNotFound(err) {
					return fmt.Errorf("removing drained real server: %w", err)
				}
			}
			// A copy: the list may be shared with the desired state.
			a.rs = slices.DeleteFunc(slices.Clone(a.rs), func(e desiredRS) bool { return e.key == rk })
			delete(p.draining, dk)
		}
	}
	observeDraining(p.opts.IPFamily, len(p.draining))
	return nil
}

// ensureSets creates missing sets and replaces sets of the wrong type (full syncs only).
func (p *Proxier) ensureSets(ctx context.Context, stats *SyncStats) error {
	tx := &ipset.Transaction{}
	var wrong []*ipset.Set
	for _, spec := range setSpecs(p.opts.IPFamily) {
		have, ok := p.applied.sets[spec.Name]
		switch {
		case !ok:
			tx.Create(spec)
		case ipset.NeedsReplace(have, spec):
			wrong = append(wrong, spec)
		}
	}
	if tx.Len() > 0 {
		if err := p.kernel.IPSet.Apply(ctx, tx); err != nil {
			return fmt.Errorf("creating ipsets: %w", err)
		}
		stats.IPSetOps += tx.Len()
		for _, spec := range setSpecs(p.opts.IPFamily) {
			if _, ok := p.applied.sets[spec.Name]; !ok {
				p.applied.sets[spec.Name] = spec
			}
		}
	}
	for _, spec := range wrong {
		if err := p.replaceSet(ctx, spec, stats); err != nil {
			return err
		}
	}
	return nil
}

// replaceSet replaces a set of the wrong type or family (left by an older kube-proxy,
// kubernetes#77265) without a moment in which the rules that use it match nothing:
// the rules are pointed at a filled temporary set while the set is recreated.
func (p *Proxier) replaceSet(ctx context.Context, spec *ipset.Set, stats *SyncStats) error {
	base := p.reverse[spec.Name]
	var entries []string
	for e := range p.index.setRefs {
		if e.set == base {
			entries = append(entries, e.entry)
		}
	}
	sort.Strings(entries)
	r := ipset.NewReplacement(spec, entries)
	if err := p.kernel.IPSet.Apply(ctx, r.Stage1()); err != nil {
		return fmt.Errorf("preparing replacement %s for ipset %s: %w", r.Temp, spec.Name, err)
	}
	p.names[base] = r.Temp
	err := p.kernel.IPTables.RestoreAll(ctx, p.iptablesRules(), iptables.NoFlushTables, iptables.RestoreCount)
	p.names[base] = spec.Name
	if err != nil {
		return fmt.Errorf("pointing rules at temporary ipset %s: %w", r.Temp, err)
	}
	if err := p.kernel.IPSet.Apply(ctx, r.Stage2()); err != nil {
		return fmt.Errorf("recreating ipset %s as %s: %w", spec.Name, spec.Type, err)
	}
	if err := p.kernel.IPTables.RestoreAll(ctx, p.iptablesRules(), iptables.NoFlushTables, iptables.RestoreCount); err != nil {
		return fmt.Errorf("pointing rules back at ipset %s: %w", spec.Name, err)
	}
	if err := p.kernel.IPSet.Apply(ctx, r.Stage3()); err != nil {
		return fmt.Errorf("destroying temporary ipset %s: %w", r.Temp, err)
	}
	stats.IPSetOps += 3
	p.applied.sets[spec.Name] = spec
	for e := range p.applied.entries {
		if e.set == base {
			p.applied.entries.Delete(e)
		}
	}
	for _, e := range entries {
		p.applied.entries.Insert(setEntry{base, e})
	}
	p.logger.Info("Replaced ipset of the wrong type", "ipset", spec.Name, "type", spec.Type)
	return nil
}

// syncHealthServers hands the eTP=Local health check ports and local endpoint counts
// to the health server.
func (p *Proxier) syncHealthServers() {
	if p.opts.ServiceHealth == nil {
		return
	}
	svcs := make(map[types.NamespacedName]uint16, len(p.index.hcPorts))
	for k, v := range p.index.hcPorts {
		svcs[k] = v
	}
	eps := make(map[types.NamespacedName]int, len(p.index.hcEndpoints))
	for k, v := range p.index.hcEndpoints {
		eps[k] = v
	}
	if err := p.opts.ServiceHealth.SyncServices(svcs); err != nil {
		p.logger.Error(err, "Error syncing healthcheck services")
	}
	if err := p.opts.ServiceHealth.SyncEndpoints(eps); err != nil {
		p.logger.Error(err, "Error syncing healthcheck endpoints")
	}
	p.hcSynced = true
}

// cleanConntrack deletes UDP/SCTP flows to changed virtual servers whose reply source
// is no longer one of their serving real servers (kubernetes#71514, #76664); on a full
// sync every UDP/SCTP virtual server is checked.
func (p *Proxier) cleanConntrack(ctx context.Context, targets []conntrackTarget, full bool) {
	if p.kernel.Conntrack == nil {
		return
	}
	want := map[vsKey]bool{}
	for _, t := range targets {
		want[makeVSKey(t.protocol, net.ParseIP(t.addr), t.port)] = true
	}
	if full {
		for k, a := range p.applied.vs {
			if a.vs.Protocol != ipvs.TCP {
				want[k] = true
			}
		}
	}
	if len(want) == 0 {
		return
	}
	wantProto := map[uint8]bool{}
	for k := range want {
		wantProto[k.proto] = true
	}
	deleted := 0
	for _, proto := range []struct {
		name string
		num  uint8
	}{{ipvs.UDP, 17}, {ipvs.SCTP, 132}} {
		if !wantProto[proto.num] {
			continue // no flow of this protocol can be stale: skip the dump
		}
		flows, err := p.kernel.Conntrack.ListFlows(ctx, proto.num)
		if err != nil {
			p.logger.Error(err, "Failed to list conntrack flows", "protocol", proto.name)
			continue
		}
		var stale []conntrack.Flow
		for _, f := range flows {
			key := makeVSKey(proto.name, f.OrigDst, f.OrigDstPort)
			if !want[key] {
				continue
			}
			if a := p.applied.vs[key]; a != nil {
				if w, ok := a.weight(keyOfRS(f.ReplySrc, f.ReplySrcPort)); ok && w > 0 {
					continue
				}
			}
			stale = append(stale, f)
		}
		if len(stale) == 0 {
			continue
		}
		n, err := p.kernel.Conntrack.DeleteFlows(ctx, stale)
		if err != nil {
			p.logger.Error(err, "Failed to delete stale conntrack flows", "protocol", proto.name)
		}
		deleted += n
	}
	observeConntrackDeleted(p.opts.IPFamily, deleted)
}
