package proxy

// Test address ranges used across this package's tests:
//   cluster IPs        10.0.0.0/16      fd00:10::/64
//   endpoints          10.1.0.0/16      fd00:1::/64
//   external IPs       192.0.2.0/24     2001:db8:2::/64
//   load balancer IPs  198.51.100.0/24  2001:db8:51::/64
//   source ranges      203.0.113.0/24   2001:db8:113::/64

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
)

// dumpServicePorts renders a ServicePortMap as sorted text, one port per line.
func dumpServicePorts(m ServicePortMap) string {
	var lines []string
	for name, info := range m {
		var b strings.Builder
		fmt.Fprintf(&b, "%s/%s %s", name.String(), name.Protocol, info.String())
		if info.NodePort != 0 {
			fmt.Fprintf(&b, " nodePort=%d", info.NodePort)
		}
		if len(info.ExternalIPs()) > 0 {
			fmt.Fprintf(&b, " externalIPs=%s", ipList(info.ExternalIPs()))
		}
		if len(info.LoadBalancerVIPs()) > 0 {
			fmt.Fprintf(&b, " lbVIPs=%s", ipList(info.LoadBalancerVIPs()))
		}
		if len(info.LoadBalancerSourceRanges()) > 0 {
			var cidrs []string
			for _, c := range info.LoadBalancerSourceRanges() {
				cidrs = append(cidrs, c.String())
			}
			fmt.Fprintf(&b, " sourceRanges=%s", strings.Join(cidrs, ","))
		}
		if info.SessionAffinityType != v1.ServiceAffinityNone {
			fmt.Fprintf(&b, " affinity=%s/%d", info.SessionAffinityType, info.StickyMaxAgeSeconds)
		}
		if info.ExternalPolicyLocal {
			b.WriteString(" eTP=Local")
		}
		if info.InternalPolicyLocal {
			b.WriteString(" iTP=Local")
		}
		if info.HealthCheckNodePort() != 0 {
			fmt.Fprintf(&b, " healthCheckNodePort=%d", info.HealthCheckNodePort())
		}
		if info.TrafficDistribution() != "" {
			fmt.Fprintf(&b, " trafficDistribution=%s", info.TrafficDistribution())
		}
		lines = append(lines, b.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func ipList(ips []net.IP) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	return strings.Join(s, ",")
}

// drainEvents returns the events a FakeRecorder holds.
func drainEvents(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

type svcOpt func(*v1.Service)

func makeService(name string, opts ...svcOpt) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  "10.0.0.1",
			ClusterIPs: []string{"10.0.0.1"},
			Ports:      []v1.ServicePort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, o := range opts {
		o(svc)
	}
	return svc
}

func clusterIPs(ips ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ClusterIPs = ips
		s.Spec.ClusterIP = ""
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
	}
}

func ports(p ...v1.ServicePort) svcOpt { return func(s *v1.Service) { s.Spec.Ports = p } }

func svcType(t v1.ServiceType) svcOpt { return func(s *v1.Service) { s.Spec.Type = t } }

func TestServiceToServicePorts(t *testing.T) {
	tcp := func(name string, port int32) v1.ServicePort {
		return v1.ServicePort{Name: name, Port: port, Protocol: v1.ProtocolTCP}
	}
	testCases := []struct {
		name   string
		svc    *v1.Service
		family v1.IPFamily
		want   string
		events []string
	}{
		{
			name:   "basic cluster IP",
			svc:    makeService("a"),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP",
		},
		{
			name:   "nil service",
			family: v1.IPv4Protocol,
		},
		{
			name:   "empty cluster IP",
			svc:    makeService("a", clusterIPs()),
			family: v1.IPv4Protocol,
		},
		{
			name:   "headless",
			svc:    makeService("a", clusterIPs(v1.ClusterIPNone)),
			family: v1.IPv4Protocol,
		},
		{
			name:   "invalid cluster IP",
			svc:    makeService("a", clusterIPs("10.0.0.300")),
			family: v1.IPv4Protocol,
			events: []string{`Warning KubeProxyInvalidValue clusterIPs "10.0.0.300" ignored by kube-proxy: invalid IP address`},
		},
		{
			name:   "invalid first cluster IP, valid second",
			svc:    makeService("a", clusterIPs("bogus", "10.0.0.2")),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.2:80/TCP",
			events: []string{`Warning KubeProxyInvalidValue clusterIPs "bogus" ignored by kube-proxy: invalid IP address`},
		},
		{
			name:   "legacy singular cluster IP",
			svc:    makeService("a", func(s *v1.Service) { s.Spec.ClusterIPs = nil; s.Spec.ClusterIP = "10.0.0.7" }),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.7:80/TCP",
		},
		{
			name:   "sloppy IPv4 with leading zeros is canonicalised",
			svc:    makeService("a", clusterIPs("010.000.000.011")),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.11:80/TCP",
		},
		{
			name:   "external name",
			svc:    makeService("a", svcType(v1.ServiceTypeExternalName)),
			family: v1.IPv4Protocol,
		},
		{
			name:   "IPv6-only service, IPv4 tracker",
			svc:    makeService("a", clusterIPs("fd00:10::1")),
			family: v1.IPv4Protocol,
		},
		{
			name:   "IPv6-only service, IPv6 tracker",
			svc:    makeService("a", clusterIPs("fd00:10::1")),
			family: v1.IPv6Protocol,
			want:   "ns/a:p/TCP [fd00:10::1]:80/TCP",
		},
		{
			name:   "dual-stack, IPv4 tracker",
			svc:    makeService("a", clusterIPs("10.0.0.1", "fd00:10::1")),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP",
		},
		{
			name:   "dual-stack, IPv6 tracker",
			svc:    makeService("a", clusterIPs("10.0.0.1", "fd00:10::1")),
			family: v1.IPv6Protocol,
			want:   "ns/a:p/TCP [fd00:10::1]:80/TCP",
		},
		{
			name: "bad ports skipped, good ones kept",
			svc: makeService("a", ports(
				tcp("zero", 0),
				tcp("big", 70000),
				v1.ServicePort{Name: "icmp", Port: 81, Protocol: "ICMP"},
				tcp("web", 80),
				tcp("web-dup", 80), // same port and protocol as "web"
				v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
				v1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP},
				v1.ServicePort{Name: "sctp", Port: 9000, Protocol: v1.ProtocolSCTP},
				v1.ServicePort{Name: "unset", Port: 8080}, // API default: TCP
				tcp("web", 8443), // duplicate name
			)),
			family: v1.IPv4Protocol,
			want: strings.Join([]string{
				"ns/a:dns-tcp/TCP 10.0.0.1:53/TCP",
				"ns/a:dns/UDP 10.0.0.1:53/UDP",
				"ns/a:sctp/SCTP 10.0.0.1:9000/SCTP",
				"ns/a:unset/TCP 10.0.0.1:8080/TCP",
				"ns/a:web/TCP 10.0.0.1:80/TCP",
			}, "\n"),
			events: []string{
				`Warning KubeProxyInvalidValue ports "0" ignored by kube-proxy: port out of range`,
				`Warning KubeProxyInvalidValue ports "70000" ignored by kube-proxy: port out of range`,
				`Warning KubeProxyInvalidValue ports "ICMP" ignored by kube-proxy: unsupported protocol`,
				`Warning KubeProxyInvalidValue ports "80/TCP" ignored by kube-proxy: duplicate port`,
				`Warning KubeProxyInvalidValue ports "ns/a:web" ignored by kube-proxy: duplicate port name`,
			},
		},
		{
			name:   "no valid port",
			svc:    makeService("a", ports(tcp("zero", 0))),
			family: v1.IPv4Protocol,
			events: []string{`Warning KubeProxyInvalidValue ports "0" ignored by kube-proxy: port out of range`},
		},
		{
			name: "node port, out-of-range node port dropped",
			svc: makeService("a", svcType(v1.ServiceTypeNodePort), ports(
				v1.ServicePort{Name: "a", Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP},
				v1.ServicePort{Name: "b", Port: 81, NodePort: 90000, Protocol: v1.ProtocolTCP},
			)),
			family: v1.IPv4Protocol,
			want:   "ns/a:a/TCP 10.0.0.1:80/TCP nodePort=30080\nns/a:b/TCP 10.0.0.1:81/TCP",
			events: []string{`Warning KubeProxyInvalidValue nodePort "90000" ignored by kube-proxy: node port out of range`},
		},
		{
			name: "external IPs of the family, invalid and duplicate skipped",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8:2::1", "not-an-ip", "192.0.2.1", " 192.0.2.2 "}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP externalIPs=192.0.2.1,192.0.2.2",
			events: []string{`Warning KubeProxyInvalidValue externalIPs "not-an-ip" ignored by kube-proxy: invalid IP address`},
		},
		{
			name: "external IPs, IPv6 tracker",
			svc: makeService("a", clusterIPs("10.0.0.1", "fd00:10::1"), func(s *v1.Service) {
				s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8:2::1"}
			}),
			family: v1.IPv6Protocol,
			want:   "ns/a:p/TCP [fd00:10::1]:80/TCP externalIPs=2001:db8:2::1",
		},
		{
			name: "load balancer VIPs: VIP mode and unset kept, Proxy mode and hostnames skipped",
			svc: makeService("a", svcType(v1.ServiceTypeLoadBalancer), func(s *v1.Service) {
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
					{IP: "198.51.100.1"},
					{IP: "198.51.100.2", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)},
					{IP: "198.51.100.3", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
					{Hostname: "lb.example.com"},
					{IP: "2001:db8:51::1"},
					{IP: "198.51.100.999"},
				}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP lbVIPs=198.51.100.1,198.51.100.2",
			events: []string{`Warning KubeProxyInvalidValue status.loadBalancer.ingress "198.51.100.999" ignored by kube-proxy: invalid IP address`},
		},
		{
			name: "source ranges from spec, trimmed, family-filtered",
			svc: makeService("a", svcType(v1.ServiceTypeLoadBalancer), func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.0/25 ", "2001:db8:113::/64", "203.0.113.128/25", "bogus/99", "203.0.113.0/25"}
				s.Annotations = map[string]string{v1.AnnotationLoadBalancerSourceRangesKey: "192.0.2.0/24"}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP sourceRanges=203.0.113.0/25,203.0.113.128/25",
			events: []string{`Warning KubeProxyInvalidValue loadBalancerSourceRanges "bogus/99" ignored by kube-proxy: invalid CIDR`},
		},
		{
			// Upstream kube-proxy reads only the field; the legacy annotation is for
			// cloud load balancers.
			name: "source-ranges annotation alone is not a firewall",
			svc: makeService("a", svcType(v1.ServiceTypeLoadBalancer), func(s *v1.Service) {
				s.Annotations = map[string]string{v1.AnnotationLoadBalancerSourceRangesKey: "203.0.113.0/24"}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP",
		},
		{
			name: "source range host bits are masked",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.7/24"}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP sourceRanges=203.0.113.0/24",
		},
		{
			name: "ClientIP affinity without config uses the default timeout",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP affinity=ClientIP/10800",
		},
		{
			name: "ClientIP affinity with a timeout",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP affinity=ClientIP/60",
		},
		{
			name: "ClientIP affinity with an out-of-range timeout",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](0)}}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP affinity=ClientIP/10800",
			events: []string{`Warning KubeProxyInvalidValue sessionAffinityConfig.clientIP.timeoutSeconds "0" ignored by kube-proxy: timeout out of range, using the default`},
		},
		{
			name: "unknown affinity",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.SessionAffinity = "Cookie"
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP",
			events: []string{`Warning KubeProxyInvalidValue sessionAffinity "Cookie" ignored by kube-proxy: unknown session affinity, using None`},
		},
		{
			name: "eTP Local on a ClusterIP service without external IPs means nothing",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP",
		},
		{
			name: "eTP Local on a ClusterIP service with external IPs",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.ExternalIPs = []string{"192.0.2.1"}
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP externalIPs=192.0.2.1 eTP=Local",
		},
		{
			name: "eTP Local on a NodePort service has no health check port",
			svc: makeService("a", svcType(v1.ServiceTypeNodePort), func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
				s.Spec.Ports[0].NodePort = 30080
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP nodePort=30080 eTP=Local",
		},
		{
			name: "eTP Local load balancer with health check node port",
			svc: makeService("a", svcType(v1.ServiceTypeLoadBalancer), func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
				s.Spec.Ports[0].NodePort = 30080
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP nodePort=30080 eTP=Local healthCheckNodePort=32000",
		},
		{
			name: "eTP Local load balancer missing its health check node port",
			svc: makeService("a", svcType(v1.ServiceTypeLoadBalancer), func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP eTP=Local",
		},
		{
			name: "iTP Local and traffic distribution",
			svc: makeService("a", func(s *v1.Service) {
				s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
				s.Spec.TrafficDistribution = ptr.To(v1.ServiceTrafficDistributionPreferSameZone)
			}),
			family: v1.IPv4Protocol,
			want:   "ns/a:p/TCP 10.0.0.1:80/TCP iTP=Local trafficDistribution=PreferSameZone",
		},
	}
	for _, tc := range testCases {
		// The object itself, and the Service as its record keeps it (what the
		// informer delivers): the same ports and Events.
		for _, via := range []string{"object", "record"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				svc := tc.svc
				if via == "record" {
					svc = NewServiceRecord(svc).Service()
				}
				recorder := events.NewFakeRecorder(100)
				got := serviceToServicePorts(svc, tc.family, recorder)
				if diff := cmp.Diff(tc.want, dumpServicePorts(got)); diff != "" {
					t.Errorf("ports (-want +got):\n%s", diff)
				}
				if tc.want == "" && got != nil {
					t.Errorf("want a nil map, got %v", got)
				}
				if diff := cmp.Diff(tc.events, drainEvents(recorder)); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestServiceToServicePortsNilRecorder(t *testing.T) {
	// Invalid values with no recorder are only logged.
	svc := makeService("a", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"bogus"} })
	if got := dumpServicePorts(serviceToServicePorts(svc, v1.IPv4Protocol, nil)); got != "ns/a:p/TCP 10.0.0.1:80/TCP" {
		t.Fatalf("got %q", got)
	}
}

func TestServicePortPolicies(t *testing.T) {
	// Rows: which endpoint sets a port needs, given its policies and exposure.
	testCases := []struct {
		name                       string
		svc                        *v1.Service
		wantCluster, wantLocal     bool
		wantExternallyAccessible   bool
		wantExternalPolicyLocal    bool
		wantInternalPolicyLocalSet bool
	}{
		{"cluster IP, default policies", makeService("a"), true, false, false, false, false},
		{"cluster IP, iTP Local", makeService("a", func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		}), false, true, false, false, true},
		{"node port, eTP Local", makeService("a", svcType(v1.ServiceTypeNodePort), func(s *v1.Service) {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.Ports[0].NodePort = 30080
		}), true, true, true, true, false},
		{"node port, eTP and iTP Local", makeService("a", svcType(v1.ServiceTypeNodePort), func(s *v1.Service) {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
			s.Spec.Ports[0].NodePort = 30080
		}), false, true, true, true, true},
		{"node port, iTP Local only", makeService("a", svcType(v1.ServiceTypeNodePort), func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
			s.Spec.Ports[0].NodePort = 30080
		}), true, true, true, false, true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			m := serviceToServicePorts(tc.svc, v1.IPv4Protocol, nil)
			if len(m) != 1 {
				t.Fatalf("want one port, got %v", dumpServicePorts(m))
			}
			for _, info := range m {
				got := []bool{info.UsesClusterEndpoints(), info.UsesLocalEndpoints(), info.ExternallyAccessible(), info.ExternalPolicyLocal, info.InternalPolicyLocal}
				want := []bool{tc.wantCluster, tc.wantLocal, tc.wantExternallyAccessible, tc.wantExternalPolicyLocal, tc.wantInternalPolicyLocalSet}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("[cluster local external eTPLocal iTPLocal] (-want +got):\n%s", diff)
				}
			}
		})
	}
}
