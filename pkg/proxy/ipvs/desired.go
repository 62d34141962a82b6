package ipvs

import (
	"cmp"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
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
}

// serviceState is the desired kernel state of every port of one Service. It is built by
// a pure function and compared against the previous one to find what a sync must touch.
type serviceState struct {
	virtualServers []*desiredVS // sorted by key
	setEntries     []setEntry   // sorted
	bindAddrs      []string     // sorted, de-duplicated
	outFilterRules []string     // KUBE-IPVS-OUT-FILTER rule bodies, sorted
	// healthCheckNodePort and localEndpoints feed the per-service health server.
	healthCheckNodePort int
	localEndpoints      int
	noLocalInternal     bool
	noLocalExternal     bool
}

// desiredVS is one virtual server with the real servers it should have.
type desiredVS struct {
	port        proxy.ServicePortName // the Service port it serves (for metrics)
	vs          *ipvs.VirtualServer
	key         vsKey
	realServers []desiredRS // sorted by key, unique
	// owner is the Service whose state holds this; next chains other Services' claims
	// on the same key in the desired index (rare: a shared external IP and port).
	owner types.NamespacedName
	next  *desiredVS
}

// setEntry is one member of one ipset, the set named by its base (IPv4) name.
type setEntry struct {
	set   string
	entry string
}

// servicePort is one port of a Service with its endpoints, as the builder consumes it.
type servicePort struct {
	name      proxy.ServicePortName
	info      *proxy.ServicePortInfo
	endpoints []*proxy.Endpoint
}

// buildServiceState computes the desired state of a Service from its ports. It does no
// I/O and depends only on its arguments.
func buildServiceState(bc *buildContext, ports []servicePort) *serviceState {
	st := &serviceState{}
	vss := map[vsKey]*desiredVS{}
	entries := sets.New[setEntry]()
	bind := sets.New[string]()
	outFilter := sets.New[string]()

	for _, sp := range ports {
		buildServicePort(bc, sp, st, vss, entries, bind, outFilter)
	}

	st.virtualServers = make([]*desiredVS, 0, len(vss))
	for _, d := range vss {
		st.virtualServers = append(st.virtualServers, d)
	}
	slices.SortFunc(st.virtualServers, func(a, b *desiredVS) int { return compareVSKeys(a.key, b.key) })
	st.setEntries = entries.UnsortedList()
	sort.Slice(st.setEntries, func(i, j int) bool {
		if st.setEntries[i].set != st.setEntries[j].set {
			return st.setEntries[i].set < st.setEntries[j].set
		}
		return st.setEntries[i].entry < st.setEntries[j].entry
	})
	st.bindAddrs = sets.List(bind)
	st.outFilterRules = sets.List(outFilter)
	return st
}

func buildServicePort(bc *buildContext, sp servicePort, st *serviceState, vss map[vsKey]*desiredVS,
	entries sets.Set[setEntry], bind sets.Set[string], outFilter sets.Set[string]) {
	svc := sp.info
	proto := strings.ToLower(string(svc.Protocol))

	// Hairpin: a local endpoint reaching itself through the service is masqueraded.
	for _, ep := range sp.endpoints {
		if ep.IsLocal {
			entries.Insert(setEntry{setLoopBack, ipPortIPEntry(ep.IP, proto, ep.Port, ep.IP)})
		}
	}

	clusterEps, localEps, _, hasAny := proxy.CategorizeEndpoints(sp.endpoints, svc, bc.nodeName, bc.nodeLabels)
	pick := func(onlyLocal bool) ([]*proxy.Endpoint, bool) {
		if !onlyLocal {
			return clusterEps, false
		}
		if len(localEps) > 0 {
			return localEps, true
		}
		// Upstream (kubernetes#97081): with no local endpoint, fall back to the cluster
		// endpoints so that local pods still reach the service.
		return clusterEps, false
	}

	newVS := func(addr net.IP, port int) *ipvs.VirtualServer {
		vs := &ipvs.VirtualServer{Address: addr, Protocol: string(svc.Protocol), Port: uint16(port), Scheduler: bc.scheduler}
		if svc.SessionAffinityType == v1.ServiceAffinityClientIP {
			vs.Flags |= ipvs.FlagPersistent
			vs.Timeout = uint32(svc.StickyMaxAgeSeconds)
		}
		if bc.scheduler == "mh" {
			vs.Flags |= FlagSourceHash
		}
		return vs
	}
	// addVS records a virtual server; internal says it is the ClusterIP one, governed by
	// internalTrafficPolicy rather than externalTrafficPolicy.
	addVS := func(vs *ipvs.VirtualServer, onlyLocal, internal bool) {
		eps, local := pick(onlyLocal)
		if onlyLocal && !local && hasAny {
			if internal {
				st.noLocalInternal = true
			} else {
				st.noLocalExternal = true
			}
		}
		k := keyOfVS(vs)
		vss[k] = &desiredVS{port: sp.name, vs: vs, key: k, realServers: realServersFor(bc, svc, eps, sp.endpoints, local)}
	}

	// ClusterIP.
	if svc.ClusterIP != nil {
		entries.Insert(setEntry{setClusterIP, ipPortEntry(svc.ClusterIP.String(), proto, svc.Port)})
		addVS(newVS(svc.ClusterIP, svc.Port), svc.InternalPolicyLocal, true)
		bind.Insert(svc.ClusterIP.String())
	}

	// externalIPs.
	for _, ip := range svc.ExternalIPs {
		e := ipPortEntry(ip.String(), proto, svc.Port)
		if svc.ExternalPolicyLocal {
			entries.Insert(setEntry{setExternalIPLocal, e})
		} else {
			entries.Insert(setEntry{setExternalIP, e})
		}
		addVS(newVS(ip, svc.Port), svc.ExternalPolicyLocal, false)
		if !bc.localAddrs.Has(ip.String()) {
			bind.Insert(ip.String())
		}
	}

	// LoadBalancer ingress addresses.
	for _, ip := range svc.LoadBalancerVIPs {
		e := ipPortEntry(ip.String(), proto, svc.Port)
		entries.Insert(setEntry{setLoadBalancer, e})
		if svc.ExternalPolicyLocal {
			entries.Insert(setEntry{setLoadBalancerLocal, e})
		}
		if len(svc.LoadBalancerSourceRanges) > 0 {
			entries.Insert(setEntry{setLoadBalancerFW, e})
			allowFromNode := false
			for _, cidr := range svc.LoadBalancerSourceRanges {
				entries.Insert(setEntry{setLoadBalancerSourceCIDR, ipPortNetEntry(ip.String(), proto, svc.Port, cidr)})
				if bc.nodeIP != nil && cidr.Contains(bc.nodeIP) {
					allowFromNode = true
				}
			}
			if allowFromNode {
				// The node reaches an LB address it hosts with that address as source.
				entries.Insert(setEntry{setLoadBalancerSourceIP, ipPortIPEntry(ip.String(), proto, svc.Port, ip.String())})
			} else {
				// kubernetes#119656: the node is not an allowed source, so its own access to
				// the LB address (source and destination both the LB address) is dropped.
				outFilter.Insert("-s " + ip.String() + " -m ipvs --vaddr " + ip.String() +
					" --vproto " + proto + " --vport " + strconv.Itoa(svc.Port) + " -j DROP")
			}
		}
		addVS(newVS(ip, svc.Port), svc.ExternalPolicyLocal, false)
		if !bc.localAddrs.Has(ip.String()) {
			bind.Insert(ip.String())
		}
	}

	// NodePort.
	if svc.NodePort != 0 && len(bc.nodePortIPs) > 0 {
		var npEntries []string
		var npSet, npLocalSet string
		switch svc.Protocol {
		case v1.ProtocolTCP:
			npSet, npLocalSet = setNodePortTCP, setNodePortLocalTCP
			npEntries = []string{strconv.Itoa(svc.NodePort)}
		case v1.ProtocolUDP:
			npSet, npLocalSet = setNodePortUDP, setNodePortLocalUDP
			npEntries = []string{strconv.Itoa(svc.NodePort)}
		case v1.ProtocolSCTP:
			// SCTP node ports use hash:ip,port with every node address.
			npSet, npLocalSet = setNodePortSCTP, setNodePortLocalSCTP
			for _, ip := range bc.nodePortIPs {
				npEntries = append(npEntries, ipPortEntry(ip.String(), proto, svc.NodePort))
			}
		}
		for _, e := range npEntries {
			entries.Insert(setEntry{npSet, e})
			if svc.ExternalPolicyLocal {
				entries.Insert(setEntry{npLocalSet, e})
			}
		}
		for _, ip := range bc.nodePortIPs {
			addVS(newVS(ip, svc.NodePort), svc.ExternalPolicyLocal, false)
		}
	}

	if svc.HealthCheckNodePort != 0 {
		entries.Insert(setEntry{setHealthCheckNodePort, strconv.Itoa(svc.HealthCheckNodePort)})
		st.healthCheckNodePort = svc.HealthCheckNodePort
		n := 0
		for _, ep := range sp.endpoints {
			if ep.IsLocal && ep.Ready {
				n++
			}
		}
		if n > st.localEndpoints {
			st.localEndpoints = n
		}
	}
}

// realServersFor turns the chosen endpoints into weight-1 real servers and, for TCP,
// keeps terminating endpoints that were not chosen as weight-0 real servers so that
// their established connections drain while the pod shuts down.
func realServersFor(bc *buildContext, svc *proxy.ServicePortInfo, chosen, all []*proxy.Endpoint, onlyLocal bool) []desiredRS {
	rss := make([]desiredRS, 0, len(chosen))
	for _, ep := range chosen {
		if k, ok := parseRSKey(ep.IP, ep.Port); ok {
			rss = append(rss, desiredRS{key: k, weight: 1})
		}
	}
	if bc.drainTerminating && svc.Protocol == v1.ProtocolTCP {
		for _, ep := range all {
			if !ep.Terminating || (onlyLocal && !ep.IsLocal) {
				continue
			}
			if k, ok := parseRSKey(ep.IP, ep.Port); ok {
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

// Entries in the text form `ipset save` prints, so that full syncs compare exactly.
func ipPortEntry(ip, proto string, port int) string {
	return ip + "," + proto + ":" + strconv.Itoa(port)
}

func ipPortIPEntry(ip, proto string, port int, ip2 string) string {
	return ipPortEntry(ip, proto, port) + "," + ip2
}

func ipPortNetEntry(ip, proto string, port int, cidr *net.IPNet) string {
	ones, bits := cidr.Mask.Size()
	net := cidr.IP.Mask(cidr.Mask).String()
	if ones != bits {
		// ipset prints host-length networks without a prefix.
		net += "/" + strconv.Itoa(ones)
	}
	return ipPortEntry(ip, proto, port) + "," + net
}
