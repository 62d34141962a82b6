// Package cluster generates the synthetic clusters the scale benchmarks run against:
// n Services with one TCP port each and a fixed number of endpoints in one
// EndpointSlice, a tenth of them NodePort and half of those externalTrafficPolicy
// Local, so that every kind of kernel object the proxier writes is present.
//
// Address ranges (disjoint from the unit tests' fixed ranges except the node's own):
//
//	cluster IPs:      10.96.0.0/16 (Service i gets the (i+1)-th address)
//	remote endpoints: 10.64.0.0/13 (Service i, endpoint j gets address i*per+j)
//	churn endpoints:  10.72.0.0/13 (fresh addresses handed out by NextEndpointIP)
//	this node:        "node-a"; one endpoint of every NodePort Service runs here
package cluster

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const (
	// Namespace holds every generated object.
	Namespace = "scale"
	// LocalNode is the node the proxier under test runs on.
	LocalNode = "node-a"
	// RemoteNode hosts every endpoint that is not on LocalNode.
	RemoteNode = "node-b"
	// PortName, ServicePort and TargetPort describe the single port of every Service.
	PortName    = "http"
	ServicePort = 80
	TargetPort  = 8080
	// NodePortEvery makes every NodePortEvery-th Service a NodePort Service (10%).
	NodePortEvery = 10
	// LocalPolicyEvery makes every LocalPolicyEvery-th Service eTP=Local (5%, all of
	// them NodePort Services).
	LocalPolicyEvery = 20
	firstNodePort    = 30000
	firstHealthPort  = 40000
)

var (
	clusterIPBase = netip.MustParseAddr("10.96.0.0")
	endpointBase  = netip.MustParseAddr("10.64.0.0")
	churnBase     = netip.MustParseAddr("10.72.0.0")
)

// Spec says how big a cluster to build.
type Spec struct {
	Services            int
	EndpointsPerService int
	// AllLocal puts every endpoint on LocalNode (as the VM's scale test does): each
	// is then also a KUBE-LOOP-BACK member.
	AllLocal bool
}

// Cluster is a generated set of Services and their EndpointSlices (Slices[i] belongs
// to Services[i]).
type Cluster struct {
	Spec     Spec
	Services []*v1.Service
	Slices   []*discovery.EndpointSlice
	churned  uint32
}

// New builds the cluster described by spec.
func New(spec Spec) *Cluster {
	if spec.Services > 65000 || spec.Services*spec.EndpointsPerService > 1<<19 {
		panic(fmt.Sprintf("cluster %+v does not fit the address ranges", spec))
	}
	c := &Cluster{Spec: spec, Services: make([]*v1.Service, spec.Services), Slices: make([]*discovery.EndpointSlice, spec.Services)}
	for i := range spec.Services {
		c.Services[i] = c.service(i)
		eps := make([]discovery.Endpoint, spec.EndpointsPerService)
		for j := range eps {
			node := RemoteNode
			if spec.AllLocal || j == 0 && i%NodePortEvery == 0 {
				node = LocalNode
			}
			eps[j] = Endpoint(addrAt(endpointBase, uint32(i*spec.EndpointsPerService+j)).String(), node)
		}
		c.Slices[i] = Slice(ServiceName(i), eps)
	}
	return c
}

// ServiceName is the name of Service i.
func ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// ClusterIP is the cluster IP of Service i.
func ClusterIP(i int) string { return addrAt(clusterIPBase, uint32(i+1)).String() }

func (c *Cluster) service(i int) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ServiceName(i), ResourceVersion: "1"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  ClusterIP(i),
			ClusterIPs: []string{ClusterIP(i)},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports: []v1.ServicePort{{
				Name: PortName, Protocol: v1.ProtocolTCP, Port: ServicePort, TargetPort: intstr.FromInt32(TargetPort),
			}},
		},
	}
	if i%NodePortEvery == 0 {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = int32(firstNodePort + i/NodePortEvery)
	}
	if i%LocalPolicyEvery == 0 {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = int32(firstHealthPort + i/LocalPolicyEvery)
	}
	return s
}

// Endpoint is a ready endpoint with address ip on node.
func Endpoint(ip, node string) discovery.Endpoint {
	return discovery.Endpoint{
		Addresses:  []string{ip},
		NodeName:   ptr.To(node),
		Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
	}
}

// Slice is the single EndpointSlice of Service svc.
func Slice(svc string, eps []discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: Namespace, Name: svc + "-1", ResourceVersion: "1", Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discovery.EndpointPort{{Name: ptr.To(PortName), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(int32(TargetPort))}},
	}
}

// NextEndpointIP hands out a fresh remote endpoint address for churn (not safe for
// concurrent use).
func (c *Cluster) NextEndpointIP() string {
	ip := addrAt(churnBase, c.churned)
	c.churned++
	return ip.String()
}

// WithEndpoint returns a copy of Slice i whose endpoint j has address ip (j beyond the
// current endpoints appends one); Slices[i] is replaced by the copy.
func (c *Cluster) WithEndpoint(i, j int, ip string) *discovery.EndpointSlice {
	s := c.Slices[i].DeepCopy()
	ep := Endpoint(ip, RemoteNode)
	if j < len(s.Endpoints) {
		s.Endpoints[j] = ep
	} else {
		s.Endpoints = append(s.Endpoints, ep)
	}
	c.Slices[i] = s
	return s
}

// WithoutEndpoint returns a copy of Slice i without its endpoint j; Slices[i] is
// replaced by the copy.
func (c *Cluster) WithoutEndpoint(i, j int) *discovery.EndpointSlice {
	s := c.Slices[i].DeepCopy()
	s.Endpoints = append(s.Endpoints[:j], s.Endpoints[j+1:]...)
	c.Slices[i] = s
	return s
}

func addrAt(base netip.Addr, off uint32) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += off
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
