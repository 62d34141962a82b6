package ipvs

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// FlagSourceHash is the flag upstream sets on every virtual server when the scheduler is
// "mh" (IP_VS_SVC_F_SCHED_MH_PORT: hash the source port too).
const FlagSourceHash = ipvs.FlagSchedSH2

// buildContext is everything the desired-state builder needs besides a service's ports
// and endpoints. It is read-only during a build.
type buildContext struct {
	family     v1.IPFamily
	nodeName   string
	nodeLabels map[string]string
	// nodeIP is the node's primary address of this family; a LoadBalancer source range
	// that contains it lets the node itself reach the LB address.
	nodeIP net.IP
	// nodePortIPs are the addresses NodePort virtual servers listen on.
	nodePortIPs []net.IP
	// localAddrs are the node's own addresses (not those on kube-ipvs0): an external or
	// LB address that is already local is not bound to kube-ipvs0.
	localAddrs sets.Set[string]
	scheduler  string
	// drainTerminating keeps TCP endpoints that are terminating as weight-0 real servers
	// so their connections finish (kubernetes#57841). Off on kernels where weight 0 does
	// not stop port reuse from landing on them (conn_reuse_mode, kubernetes#81775).
	drainTerminating bool
	// clusterOwner maps every ClusterIP virtual server key to its Service: an external or
	// LoadBalancer address of another Service that collides with one is not programmed
	// (a Service's own ClusterIP wins; the CVE-2020-8554 class of hijack).
	// The name is the one in the owner's port list (svcPorts, never written): a
	// pointer is 8 bytes of the map's entry where the name took 32.
	clusterOwner map[vsKey]*types.NamespacedName
}

// serviceState is the desired kernel state of every port of one Service. It is built by
// a pure function and compared against the previous one to find what a sync must touch.
type serviceState struct {
	virtualServers []*desiredVS   // sorted by key
	setEntries     []rules.Member // sorted
	bindAddrs      []string       // sorted, de-duplicated
	// The fields most Services leave empty, behind one pointer (a serviceState per
	// Service: at 50k Services this halves them). Read them as st.refused etc.; a
	// built state whose extras are all empty shares noStateExtras, which nothing
	// writes.
	*stateExtras
}

// stateExtras are the parts of a serviceState most Services do not have.
type stateExtras struct {
	outFilterRules []rules.OutFilter // sorted
	// healthCheckNodePort and localEndpoints feed the per-service health server.
	healthCheckNodePort int
	localEndpoints      int
	noLocalInternal     bool
	noLocalExternal     bool
	// refused lists the values that are not programmed, for one Event each.
	refused []refusal
	// externalKeys are the keys of every external and LoadBalancer virtual server the
	// Service asks for (refused ones included), so that a ClusterIP appearing or
	// vanishing on one of them rebuilds it.
	externalKeys []vsKey
}

// noStateExtras are the extras of every state that has none; never written.
var noStateExtras = &stateExtras{}

// empty reports whether x holds nothing.
func (x *stateExtras) empty() bool {
	return len(x.outFilterRules) == 0 && x.healthCheckNodePort == 0 && x.localEndpoints == 0 &&
		!x.noLocalInternal && !x.noLocalExternal && len(x.refused) == 0 && len(x.externalKeys) == 0
}

// refusal is one value of a Service (or of its endpoints) that is not programmed.
type refusal struct {
	field  string
	value  string
	reason string
	since  time.Time
}

// desiredVS is one virtual server with the real servers it should have.
type desiredVS struct {
	// port is the Service port it serves (for metrics); shared, never written.
	port *proxy.ServicePortName
	vs   *ipvs.VirtualServer
	key  vsKey
	// cluster: the key is one of the Service's ClusterIP keys (clusterKeys).
	cluster     bool
	realServers []desiredRS // sorted by key, unique
	// next chains other Services' claims on the same key in the desired index (rare:
	// a shared external IP and port).
	next *desiredVS
}

// clusterKeys are the keys of the ClusterIP virtual servers of st (nil), sorted.
func (st *serviceState) clusterKeys() []vsKey {
	if st == nil {
		return nil
	}
	var keys []vsKey
	for _, d := range st.virtualServers {
		if d.cluster {
			keys = append(keys, d.key)
		}
	}
	return keys
}

// owner is the Service whose state holds d.
func (d *desiredVS) owner() types.NamespacedName { return d.port.NamespacedName }

// servicePort is one port of a Service with its endpoints, as the builder consumes it.
type servicePort struct {
	name      *proxy.ServicePortName // not written: desired virtual servers share it
	info      *proxy.ServicePortInfo
	endpoints []*proxy.Endpoint
}

// buildServiceState computes the desired state of a Service from its ports. It does no
// I/O and depends only on its arguments.
func buildServiceState(bc *buildContext, ports []servicePort) *serviceState {
	st := &serviceState{stateExtras: &stateExtras{}}
	vss := map[vsKey]*desiredVS{}
	entries := sets.New[rules.Member]()
	bind := sets.New[string]()
	outFilter := sets.New[rules.OutFilter]()

	for _, sp := range ports {
		buildServicePort(bc, sp, st, vss, entries, bind, outFilter)
	}
	slices.SortFunc(st.refused, func(a, b refusal) int {
		return cmp.Or(strings.Compare(a.field, b.field), strings.Compare(a.value, b.value))
	})
	st.refused = slices.CompactFunc(st.refused, func(a, b refusal) bool { return a.field == b.field && a.value == b.value })
	slices.SortFunc(st.externalKeys, compareVSKeys)
	st.externalKeys = slices.Compact(st.externalKeys)

	st.virtualServers = make([]*desiredVS, 0, len(vss))
	for _, d := range vss {
		st.virtualServers = append(st.virtualServers, d)
	}
	slices.SortFunc(st.virtualServers, func(a, b *desiredVS) int { return compareVSKeys(a.key, b.key) })
	st.setEntries = entries.UnsortedList()
	slices.SortFunc(st.setEntries, rules.Compare)
	st.bindAddrs = sets.List(bind)
	if outFilter.Len() > 0 {
		st.outFilterRules = outFilter.UnsortedList()
		slices.SortFunc(st.outFilterRules, rules.CompareOutFilters)
	}
	if st.stateExtras.empty() {
		st.stateExtras = noStateExtras
	}
	return st
}

func buildServicePort(bc *buildContext, sp servicePort, st *serviceState, vss map[vsKey]*desiredVS,
	entries sets.Set[rules.Member], bind sets.Set[string], outFilter sets.Set[rules.OutFilter]) {
	b := &portBuilder{bc: bc, sp: sp, st: st, vss: vss, entries: entries, bind: bind, outFilter: outFilter,
		proto: rules.ProtocolNumber(string(sp.info.Protocol)), port: uint16(sp.info.Port)}
	b.sp.endpoints = b.usableEndpoints()
	b.hairpin()
	b.clusterEps, b.localEps, _, b.hasAny = proxy.CategorizeEndpoints(b.sp.endpoints, sp.info, bc.nodeName, bc.nodeLabels)
	var badSched []refusal
	b.scheduler, b.schedFlags, badSched = chooseScheduler(bc.scheduler, sp.info)
	st.refused = append(st.refused, badSched...)
	b.clusterIP()
	b.externalIPs()
	b.loadBalancers()
	b.nodePorts()
	b.healthCheck()
}

// portBuilder builds the desired state of one Service port.
type portBuilder struct {
	bc        *buildContext
	sp        servicePort
	st        *serviceState
	vss       map[vsKey]*desiredVS
	entries   sets.Set[rules.Member]
	bind      sets.Set[string]
	outFilter sets.Set[rules.OutFilter]
	proto     uint8
	port      uint16

	clusterEps, localEps []*proxy.Endpoint
	hasAny               bool
	scheduler            string
	schedFlags           uint32
	// The port's virtual servers that choose the same endpoints share one list of
	// real servers (lists are never changed in place): a NodePort Service's ClusterIP
	// and node-port virtual servers hold one list, or two when a traffic policy is
	// Local. By whether only local endpoints were chosen:
	rsLists [2][]desiredRS
	rsBuilt [2]bool
}

// usableEndpoints leaves out the endpoints IPVS cannot use as destinations (the
// kernel refuses a multicast or broadcast real server with EINVAL; the others cannot
// be reached), each with a refusal.
func (b *portBuilder) usableEndpoints() []*proxy.Endpoint {
	all := b.sp.endpoints
	endpoints := all
	for i, ep := range all {
		if reason := unusableEndpoint(ep); reason != "" {
			b.st.refused = append(b.st.refused, refusal{field: "endpoint", value: ep.IP(), reason: reason})
			if len(endpoints) == len(all) {
				endpoints = slices.Clone(all[:i])
			}
			continue
		}
		if len(endpoints) != len(all) {
			endpoints = append(endpoints, ep)
		}
	}
	return endpoints
}

// hairpin: a local endpoint reaching itself through the service is masqueraded.
func (b *portBuilder) hairpin() {
	for _, ep := range b.sp.endpoints {
		if !ep.IsLocal {
			continue
		}
		a := ep.Addr()
		b.entries.Insert(rules.SourceMember(rules.LoopBack, a, b.proto, uint16(ep.Port), netip.PrefixFrom(a, a.BitLen())))
	}
}

// pick chooses the endpoints of a virtual server: the local ones for a Local traffic
// policy, falling back to the cluster's when there is none (upstream,
// kubernetes#97081: local pods still reach the service); local says which it chose.
func (b *portBuilder) pick(onlyLocal bool) (eps []*proxy.Endpoint, local bool) {
	if !onlyLocal {
		return b.clusterEps, false
	}
	if len(b.localEps) > 0 {
		return b.localEps, true
	}
	return b.clusterEps, false
}

func (b *portBuilder) newVS(addr net.IP, port int) *ipvs.VirtualServer {
	svc := b.sp.info
	vs := &ipvs.VirtualServer{Address: addr, Protocol: string(svc.Protocol), Port: uint16(port), Scheduler: b.scheduler, Flags: b.schedFlags}
	if svc.SessionAffinityType == v1.ServiceAffinityClientIP {
		vs.Flags |= ipvs.FlagPersistent
		vs.Timeout = uint32(svc.StickyMaxAgeSeconds)
	}
	return vs
}

// addVS records a virtual server; internal says it is the ClusterIP one, governed by
// internalTrafficPolicy rather than externalTrafficPolicy.
func (b *portBuilder) addVS(vs *ipvs.VirtualServer, onlyLocal, internal bool) {
	eps, local := b.pick(onlyLocal)
	if onlyLocal && !local && b.hasAny {
		if internal {
			b.st.noLocalInternal = true
		} else {
			b.st.noLocalExternal = true
		}
	}
	i := 0
	if local {
		i = 1
	}
	if !b.rsBuilt[i] {
		b.rsLists[i], b.rsBuilt[i] = realServersFor(b.bc, b.sp.info, eps, b.sp.endpoints, local), true
	}
	k := keyOfVS(vs)
	// A Service's external address can be its own ClusterIP: the key stays a
	// ClusterIP key.
	cluster := internal
	if prev := b.vss[k]; prev != nil {
		cluster = cluster || prev.cluster
	}
	b.vss[k] = &desiredVS{port: b.sp.name, vs: vs, key: k, realServers: b.rsLists[i], cluster: cluster}
}

// usableVIP refuses an address no virtual server can serve, and an external or LB
// address:port that is another Service's ClusterIP:port.
func (b *portBuilder) usableVIP(field string, ip net.IP, port int, external bool) bool {
	svc := b.sp.info
	if reason := unusableAddress(ip); reason != "" {
		b.st.refused = append(b.st.refused, refusal{field: field, value: ip.String(), reason: reason})
		return false
	}
	if !external {
		return true
	}
	k := makeVSKey(string(svc.Protocol), ip, uint16(port))
	b.st.externalKeys = append(b.st.externalKeys, k)
	if owner, ok := b.bc.clusterOwner[k]; ok && *owner != b.sp.name.NamespacedName {
		b.st.refused = append(b.st.refused, refusal{field: field, value: ip.String() + " " + strconv.Itoa(port) + "/" + string(svc.Protocol),
			reason: "it is the ClusterIP and port of Service " + owner.String()})
		return false
	}
	return true
}

func (b *portBuilder) clusterIP() {
	svc := b.sp.info
	if svc.ClusterIP != nil && b.usableVIP("clusterIP", svc.ClusterIP, svc.Port, false) {
		b.entries.Insert(rules.ServiceMember(rules.ClusterIP, addrOf(svc.ClusterIP), b.proto, b.port))
		b.addVS(b.newVS(svc.ClusterIP, svc.Port), svc.InternalPolicyLocal, true)
		b.bind.Insert(svc.ClusterIP.String())
	}
}

func (b *portBuilder) externalIPs() {
	svc := b.sp.info
	for _, ip := range svc.ExternalIPs() {
		if !b.usableVIP("externalIPs", ip, svc.Port, true) {
			continue
		}
		set := rules.ExternalIP
		if svc.ExternalPolicyLocal {
			set = rules.ExternalIPLocal
		}
		b.entries.Insert(rules.ServiceMember(set, addrOf(ip), b.proto, b.port))
		b.addVS(b.newVS(ip, svc.Port), svc.ExternalPolicyLocal, false)
		if !b.bc.localAddrs.Has(ip.String()) {
			b.bind.Insert(ip.String())
		}
	}
}

func (b *portBuilder) loadBalancers() {
	svc := b.sp.info
	for _, ip := range svc.LoadBalancerVIPs() {
		if !b.usableVIP("status.loadBalancer.ingress", ip, svc.Port, true) {
			continue
		}
		a := addrOf(ip)
		b.entries.Insert(rules.ServiceMember(rules.LoadBalancer, a, b.proto, b.port))
		if svc.ExternalPolicyLocal {
			b.entries.Insert(rules.ServiceMember(rules.LoadBalancerLocal, a, b.proto, b.port))
		}
		if len(svc.LoadBalancerSourceRanges()) > 0 {
			b.sourceRanges(a)
		}
		b.addVS(b.newVS(ip, svc.Port), svc.ExternalPolicyLocal, false)
		if !b.bc.localAddrs.Has(ip.String()) {
			b.bind.Insert(ip.String())
		}
	}
}

// sourceRanges lets only the Service's source ranges reach LoadBalancer address a.
func (b *portBuilder) sourceRanges(a netip.Addr) {
	b.entries.Insert(rules.ServiceMember(rules.LoadBalancerFW, a, b.proto, b.port))
	allowFromNode := false
	for _, cidr := range b.sp.info.LoadBalancerSourceRanges() {
		b.entries.Insert(rules.SourceMember(rules.LoadBalancerSourceCIDR, a, b.proto, b.port, prefixOf(cidr)))
		if b.bc.nodeIP != nil && cidr.Contains(b.bc.nodeIP) {
			allowFromNode = true
		}
	}
	if allowFromNode {
		// The node reaches an LB address it hosts with that address as source.
		b.entries.Insert(rules.SourceMember(rules.LoadBalancerSourceIP, a, b.proto, b.port, netip.PrefixFrom(a, a.BitLen())))
	} else {
		// kubernetes#119656: the node is not an allowed source, so its own access to
		// the LB address (source and destination both the LB address) is dropped.
		b.outFilter.Insert(rules.OutFilter{Source: a.As16(), VAddr: a.As16(), Proto: b.proto, Port: b.port})
	}
}

func (b *portBuilder) nodePorts() {
	svc := b.sp.info
	if svc.NodePort == 0 || len(b.bc.nodePortIPs) == 0 {
		return
	}
	var npEntries []rules.Member
	switch svc.Protocol {
	case v1.ProtocolTCP:
		npEntries = []rules.Member{rules.PortMember(rules.NodePortTCP, uint16(svc.NodePort))}
	case v1.ProtocolUDP:
		npEntries = []rules.Member{rules.PortMember(rules.NodePortUDP, uint16(svc.NodePort))}
	case v1.ProtocolSCTP:
		// SCTP node ports use hash:ip,port with every node address.
		for _, ip := range b.bc.nodePortIPs {
			npEntries = append(npEntries, rules.ServiceMember(rules.NodePortSCTP, addrOf(ip), b.proto, uint16(svc.NodePort)))
		}
	}
	for _, e := range npEntries {
		b.entries.Insert(e)
		if svc.ExternalPolicyLocal {
			e.Set = localNodePortSet[e.Set]
			b.entries.Insert(e)
		}
	}
	for _, ip := range b.bc.nodePortIPs {
		b.addVS(b.newVS(ip, svc.NodePort), svc.ExternalPolicyLocal, false)
	}
}

func (b *portBuilder) healthCheck() {
	svc := b.sp.info
	if svc.HealthCheckNodePort() == 0 {
		return
	}
	b.entries.Insert(rules.PortMember(rules.HealthCheckNodePort, uint16(svc.HealthCheckNodePort())))
	b.st.healthCheckNodePort = svc.HealthCheckNodePort()
	n := 0
	for _, ep := range b.sp.endpoints {
		if ep.IsLocal && ep.Ready {
			n++
		}
	}
	if n > b.st.localEndpoints {
		b.st.localEndpoints = n
	}
}

// realServersFor turns the chosen endpoints into weight-1 real servers and, for TCP,
// keeps terminating endpoints that were not chosen as weight-0 real servers so that
// their established connections drain while the pod shuts down.
func realServersFor(bc *buildContext, svc *proxy.ServicePortInfo, chosen, all []*proxy.Endpoint, onlyLocal bool) []desiredRS {
	rss := make([]desiredRS, 0, len(chosen))
	for _, ep := range chosen {
		if k, ok := rsKeyOf(ep); ok {
			rss = append(rss, desiredRS{key: k, weight: 1})
		}
	}
	if bc.drainTerminating && svc.Protocol == v1.ProtocolTCP {
		for _, ep := range all {
			if !ep.Terminating || (onlyLocal && !ep.IsLocal) {
				continue
			}
			if k, ok := rsKeyOf(ep); ok {
				rss = append(rss, desiredRS{key: k, weight: 0})
			}
		}
	}
	// Sorted by key, a chosen (weight 1) copy before a weight-0 one; keep the first.
	slices.SortStableFunc(rss, func(a, b desiredRS) int {
		return cmp.Or(compareRSKeys(a.key, b.key), cmp.Compare(b.weight, a.weight))
	})
	return slices.CompactFunc(rss, func(a, b desiredRS) bool { return a.key == b.key })
}

// localNodePortSet is the set of a node port set's members whose traffic policy is
// Local.
var localNodePortSet = map[rules.Set]rules.Set{
	rules.NodePortTCP:  rules.NodePortLocalTCP,
	rules.NodePortUDP:  rules.NodePortLocalUDP,
	rules.NodePortSCTP: rules.NodePortLocalSCTP,
}

// addrOf is ip as a netip.Addr, IPv4 unmapped.
func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// prefixOf is a CIDR as a netip.Prefix, IPv4 unmapped.
func prefixOf(cidr *net.IPNet) netip.Prefix {
	ones, _ := cidr.Mask.Size()
	return netip.PrefixFrom(addrOf(cidr.IP), ones).Masked()
}

// unusableAddress says why a service address (ClusterIP, external or LoadBalancer IP)
// cannot be programmed, or "" if it can: the kernel refuses to bind some of them to
// kube-ipvs0 or to put them in a set (IPv6 multicast, 0.0.0.0), and none of them is an
// address a client can reach a Service on.
func unusableAddress(ip net.IP) string {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return "not an IP address"
	}
	return unusableReason(a.Unmap())
}

// unusableEndpoint is unusableAddress for an endpoint.
func unusableEndpoint(ep *proxy.Endpoint) string {
	return unusableReason(ep.Addr())
}

func unusableReason(a netip.Addr) string {
	switch {
	case a.IsUnspecified():
		return "unspecified address"
	case a.IsMulticast():
		return "multicast address"
	case a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast address"
	case a.IsLoopback():
		return "loopback address"
	case a.IsLinkLocalUnicast():
		return "link-local address"
	}
	return ""
}
