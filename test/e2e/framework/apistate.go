package framework

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeState is the part of a node's kernel state that follows from the API
// objects: IPVS virtual servers with their real servers, the Service ipsets
// (in the nftables pass, the elements of the sets that hold their members),
// and the addresses on kube-ipvs0.
type NodeState struct {
	// VS maps "TCP 10.96.0.10:80" to its active (weight > 0) real servers
	// "ip:port", sorted.
	VS map[string][]string
	// Draining maps a virtual server to its weight-0 real servers (removed
	// endpoints whose connections drain); never part of a comparison.
	Draining map[string][]string
	// IPSets maps a set name to its members as `ipset save` prints them.
	IPSets map[string]map[string]bool
	// Addrs are the addresses on kube-ipvs0.
	Addrs map[string]bool
	// NodeAddrs are the node's own IPv4 addresses (all but kube-ipvs0 and lo).
	NodeAddrs []string
	// KubeRules counts the iptables rules (all tables) in or jumping to a
	// KUBE- chain, and KubeChains the KUBE- chains.
	KubeRules, KubeChains int
}

// ComparedSets are the ipsets whose members follow from the Services alone.
var ComparedSets = []string{"KUBE-CLUSTER-IP", "KUBE-EXTERNAL-IP", "KUBE-LOAD-BALANCER", "KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT-UDP", "KUBE-IPVS-IPS"}

// ReadNodeState reads a node's kernel state in one guest call.
func ReadNodeState(ctx context.Context, n *ClusterNode) (*NodeState, error) {
	sets := "ipset save"
	if NFTablesPass() {
		// The nftables backend's elements, in `ipset save`'s form.
		var b strings.Builder
		for _, s := range ComparedSets {
			fmt.Fprintf(&b, "{ %s; } | sed 's/^/add %s /'\n", ListSet(s), s)
		}
		sets = b.String()
	}
	out, err := n.Sh(ctx, `echo '#IPVS'; ipvsadm -Ln; echo '#IPSET'; `+sets+`
echo '#ADDR'; ip -4 -o addr show dev kube-ipvs0;
echo '#NODEADDR'; ip -4 -o addr show | grep -v -w -e kube-ipvs0 -e lo; echo '#IPT'; iptables-save`)
	if err != nil {
		return nil, err
	}
	return ParseNodeState(out), nil
}

// ParseNodeState parses ReadNodeState's script output.
func ParseNodeState(out string) *NodeState {
	st := &NodeState{VS: map[string][]string{}, Draining: map[string][]string{}, IPSets: map[string]map[string]bool{}, Addrs: map[string]bool{}}
	for _, s := range ComparedSets {
		st.IPSets[s] = map[string]bool{}
	}
	section := ""
	var ipvs strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "#") && !strings.Contains(line, " ") {
			section = line
			continue
		}
		f := strings.Fields(line)
		switch section {
		case "#IPVS":
			ipvs.WriteString(line + "\n")
		case "#IPSET":
			if len(f) == 3 && f[0] == "add" {
				if m, ok := st.IPSets[f[1]]; ok {
					m[f[2]] = true
				}
			}
		case "#ADDR", "#NODEADDR":
			for i, w := range f {
				if w == "inet" && i+1 < len(f) {
					ip, _, _ := strings.Cut(f[i+1], "/")
					if section == "#ADDR" {
						st.Addrs[ip] = true
					} else {
						st.NodeAddrs = append(st.NodeAddrs, ip)
					}
				}
			}
		case "#IPT":
			switch {
			case strings.HasPrefix(line, ":KUBE-"):
				st.KubeChains++
			case strings.HasPrefix(line, "-A KUBE-"), strings.HasPrefix(line, "-A ") && strings.Contains(line, " -j KUBE-"):
				st.KubeRules++
			}
		}
	}
	for vs, rss := range ParseIPVSTable(ipvs.String()) {
		st.VS[vs] = []string{}
		for _, r := range rss {
			f := strings.Fields(r) // ip:port forward weight
			if len(f) == 3 && f[2] == "0" {
				st.Draining[vs] = append(st.Draining[vs], f[0])
			} else {
				st.VS[vs] = append(st.VS[vs], f[0])
			}
		}
		sort.Strings(st.VS[vs])
	}
	return st
}

// APIObjects are the Services and EndpointSlices of the whole cluster.
type APIObjects struct {
	Services []corev1.Service
	Slices   []discoveryv1.EndpointSlice
}

// ListAPIObjects lists every Service and EndpointSlice.
func ListAPIObjects(ctx context.Context, c kubernetes.Interface) (*APIObjects, error) {
	svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	slices, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return &APIObjects{Services: svcs.Items, Slices: slices.Items}, nil
}

// Expected is what the API objects imply for node nodeName whose own
// addresses are nodeAddrs (node ports open on each): virtual servers with
// their real servers, the Service ipsets and the kube-ipvs0 addresses. It
// covers what the soak creates (TCP/UDP, traffic policies, no topology).
func (o *APIObjects) Expected(nodeName string, nodeAddrs []string) *NodeState {
	st := &NodeState{VS: map[string][]string{}, Draining: map[string][]string{}, IPSets: map[string]map[string]bool{}, Addrs: map[string]bool{}}
	for _, s := range ComparedSets {
		st.IPSets[s] = map[string]bool{}
	}
	for _, svc := range o.Services {
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		if _, ok := svc.Labels["service.kubernetes.io/service-proxy-name"]; ok {
			continue
		}
		if _, ok := svc.Labels["service.kubernetes.io/headless"]; ok {
			continue
		}
		var lbIPs []string
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" && (ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeProxy) {
				lbIPs = append(lbIPs, ing.IP)
			}
		}
		for _, p := range svc.Spec.Ports {
			proto := string(p.Protocol)
			lproto := strings.ToLower(proto)
			all, local := o.endpoints(svc, p.Name, nodeName)
			clusterRS := all
			if svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal {
				clusterRS = local
			}
			externalRS := all
			if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && len(local) > 0 {
				externalRS = local
			}
			add := func(ip string, port int32, rs []string) {
				st.VS[fmt.Sprintf("%s %s:%d", proto, ip, port)] = rs
			}
			add(svc.Spec.ClusterIP, p.Port, clusterRS)
			st.Addrs[svc.Spec.ClusterIP] = true
			st.IPSets["KUBE-CLUSTER-IP"][fmt.Sprintf("%s,%s:%d", svc.Spec.ClusterIP, lproto, p.Port)] = true
			for _, ip := range svc.Spec.ExternalIPs {
				add(ip, p.Port, externalRS)
				st.Addrs[ip] = true
				st.IPSets["KUBE-EXTERNAL-IP"][fmt.Sprintf("%s,%s:%d", ip, lproto, p.Port)] = true
			}
			for _, ip := range lbIPs {
				add(ip, p.Port, externalRS)
				st.Addrs[ip] = true
				st.IPSets["KUBE-LOAD-BALANCER"][fmt.Sprintf("%s,%s:%d", ip, lproto, p.Port)] = true
			}
			if p.NodePort != 0 {
				for _, ip := range nodeAddrs {
					add(ip, p.NodePort, externalRS)
				}
				if set, ok := st.IPSets["KUBE-NODE-PORT-"+proto]; ok {
					set[strconv.Itoa(int(p.NodePort))] = true
				}
			}
		}
	}
	for ip := range st.Addrs {
		st.IPSets["KUBE-IPVS-IPS"][ip] = true
	}
	return st
}

// endpoints returns the real servers ("ip:port") a port of svc has: the
// ready endpoints, or, when none is ready, the serving terminating ones;
// the same choice among this node's endpoints is the second value.
func (o *APIObjects) endpoints(svc corev1.Service, portName, nodeName string) ([]string, []string) {
	type ep struct {
		addr                        string
		local                       bool
		ready, serving, terminating bool
	}
	var eps []ep
	for _, s := range o.Slices {
		if s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name || s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		var port int32 = -1
		for _, p := range s.Ports {
			if p.Port != nil && ((p.Name == nil && portName == "") || (p.Name != nil && *p.Name == portName)) {
				port = *p.Port
			}
		}
		if port < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			c := e.Conditions
			ready := c.Ready == nil || *c.Ready
			serving := ready
			if c.Serving != nil {
				serving = *c.Serving
			}
			term := c.Terminating != nil && *c.Terminating
			for _, a := range e.Addresses {
				eps = append(eps, ep{fmt.Sprintf("%s:%d", a, port), e.NodeName != nil && *e.NodeName == nodeName, ready, serving, term})
			}
		}
	}
	choose := func(onlyLocal bool) []string {
		set := map[string]bool{}
		for _, e := range eps {
			if e.ready && (!onlyLocal || e.local) {
				set[e.addr] = true
			}
		}
		if len(set) == 0 {
			for _, e := range eps {
				if e.serving && e.terminating && (!onlyLocal || e.local) {
					set[e.addr] = true
				}
			}
		}
		out := []string{}
		for a := range set {
			out = append(out, a)
		}
		sort.Strings(out)
		return out
	}
	return choose(false), choose(true)
}

// Diff lists what got differs from want: missing and orphaned virtual
// servers, wrong real servers, ipset members and kube-ipvs0 addresses.
// Weight-0 (draining) real servers are not differences.
func (want *NodeState) Diff(got *NodeState) []string {
	var d []string
	for _, vs := range sortedKeys(want.VS) {
		rs, ok := got.VS[vs]
		switch {
		case !ok:
			d = append(d, "missing virtual server "+vs)
		case strings.Join(rs, ",") != strings.Join(want.VS[vs], ","):
			d = append(d, fmt.Sprintf("virtual server %s has real servers %v, want %v", vs, rs, want.VS[vs]))
		}
	}
	for _, vs := range sortedKeys(got.VS) {
		if _, ok := want.VS[vs]; !ok {
			d = append(d, fmt.Sprintf("orphaned virtual server %s (real servers %v)", vs, got.VS[vs]))
		}
	}
	for _, set := range ComparedSets {
		for _, m := range sortedKeys(want.IPSets[set]) {
			if !got.IPSets[set][m] {
				d = append(d, fmt.Sprintf("ipset %s lacks %s", set, m))
			}
		}
		for _, m := range sortedKeys(got.IPSets[set]) {
			if !want.IPSets[set][m] {
				d = append(d, fmt.Sprintf("ipset %s has orphaned %s", set, m))
			}
		}
	}
	for _, a := range sortedKeys(want.Addrs) {
		if !got.Addrs[a] {
			d = append(d, "kube-ipvs0 lacks "+a)
		}
	}
	for _, a := range sortedKeys(got.Addrs) {
		if !want.Addrs[a] {
			d = append(d, "kube-ipvs0 has orphaned "+a)
		}
	}
	return d
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Gauge returns the value of an unlabelled metric on a /metrics page.
func Gauge(page, name string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			return v, err == nil
		}
	}
	return 0, false
}
