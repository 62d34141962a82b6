package proxy

import (
	"fmt"
	"net"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

const (
	// defaultStickyMaxAgeSeconds is the ClientIP affinity timeout the API server
	// defaults to (3 hours).
	defaultStickyMaxAgeSeconds = int(v1.DefaultClientIPServiceAffinitySeconds)
	// maxStickyMaxAgeSeconds is the API's upper bound for the affinity timeout (1 day).
	maxStickyMaxAgeSeconds = 86400

	// eventReasonInvalidValue is the reason of the Warning event emitted on a Service
	// when part of it cannot be programmed.
	eventReasonInvalidValue = "KubeProxyInvalidValue"
	eventActionProcess      = "ProcessService"
)

// Per-Service IPVS scheduling, ours and kube-router's (honoured so a cluster moving
// from kube-router keeps its choices; ours win when both are present).
const (
	AnnotationScheduler            = "kube-proxy-ipvs.io/scheduler"
	AnnotationSchedulerFlags       = "kube-proxy-ipvs.io/scheduler-flags"
	AnnotationKubeRouterScheduler  = "kube-router.io/service.scheduler"
	AnnotationKubeRouterSchedFlags = "kube-router.io/service.schedflags"
)

// supportedProtocols are the Service protocols IPVS can balance.
var supportedProtocols = sets.New(v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP)

// servicePortBuilder turns one Service into its ServicePortInfos for one family,
// logging (and, for invalid values, reporting as an event) every piece it skips.
type servicePortBuilder struct {
	svc      *v1.Service
	family   v1.IPFamily
	recorder events.EventRecorder
	logger   klog.Logger
}

// serviceToServicePorts returns the ports of svc that the proxier for family must
// program, or nil if the Service has nothing for this family (no cluster IP of the
// family, headless, ExternalName).
func serviceToServicePorts(svc *v1.Service, family v1.IPFamily, recorder events.EventRecorder) ServicePortMap {
	if svc == nil {
		return nil
	}
	b := &servicePortBuilder{
		svc:      svc,
		family:   family,
		recorder: recorder,
		logger:   klog.LoggerWithValues(klog.Background(), "service", klog.KObj(svc), "ipFamily", family),
	}
	return b.build()
}

func (b *servicePortBuilder) build() ServicePortMap {
	if b.svc.Spec.Type == v1.ServiceTypeExternalName {
		b.logger.V(3).Info("Skipping service of type ExternalName")
		return nil
	}
	clusterIP := b.clusterIP()
	if clusterIP == nil {
		return nil
	}

	template := ServicePortInfo{
		ClusterIP:           clusterIP,
		ExternalPolicyLocal: externallyAccessibleService(b.svc) && b.svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal,
		InternalPolicyLocal: b.svc.Spec.InternalTrafficPolicy != nil && *b.svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
		UID:                 b.svc.UID,
	}
	ext := ServicePortExternal{
		ExternalIPs:              b.externalIPs(),
		LoadBalancerVIPs:         b.loadBalancerVIPs(),
		LoadBalancerSourceRanges: b.loadBalancerSourceRanges(),
	}
	template.SessionAffinityType, template.StickyMaxAgeSeconds = b.sessionAffinity()
	template.Scheduler, template.SchedulerFlags, template.SchedulerSource = schedulerAnnotations(b.svc.Annotations)
	if b.svc.Spec.Type == v1.ServiceTypeLoadBalancer && template.ExternalPolicyLocal {
		ext.HealthCheckNodePort = b.healthCheckNodePort()
	}
	if b.svc.Spec.TrafficDistribution != nil {
		ext.TrafficDistribution = *b.svc.Spec.TrafficDistribution
	}
	if len(ext.ExternalIPs) > 0 || len(ext.LoadBalancerVIPs) > 0 || len(ext.LoadBalancerSourceRanges) > 0 ||
		ext.HealthCheckNodePort != 0 || ext.TrafficDistribution != "" {
		template.External = &ext // shared by the ports
	}

	nn := types.NamespacedName{Namespace: b.svc.Namespace, Name: b.svc.Name}
	ports := make(ServicePortMap, len(b.svc.Spec.Ports))
	type portKey struct {
		port     int32
		protocol v1.Protocol
	}
	seen := sets.New[portKey]()
	for i := range b.svc.Spec.Ports {
		sp := &b.svc.Spec.Ports[i]
		protocol := sp.Protocol
		if protocol == "" {
			// The API server defaults an unset protocol to TCP.
			protocol = v1.ProtocolTCP
		}
		switch {
		case !supportedProtocols.Has(protocol):
			b.invalid("ports", string(protocol), "unsupported protocol")
			continue
		case sp.Port < 1 || sp.Port > 65535:
			b.invalid("ports", fmt.Sprint(sp.Port), "port out of range")
			continue
		case seen.Has(portKey{sp.Port, protocol}):
			b.invalid("ports", fmt.Sprintf("%d/%s", sp.Port, protocol), "duplicate port")
			continue
		}
		name := ServicePortName{NamespacedName: nn, Port: sp.Name, Protocol: protocol}
		if _, dup := ports[name]; dup {
			b.invalid("ports", name.String(), "duplicate port name")
			continue
		}
		seen.Insert(portKey{sp.Port, protocol})

		info := template
		info.Port = int(sp.Port)
		info.Protocol = protocol
		if sp.NodePort < 0 || sp.NodePort > 65535 {
			b.invalid("nodePort", fmt.Sprint(sp.NodePort), "node port out of range")
		} else {
			info.NodePort = int(sp.NodePort)
		}
		ports[name] = &info
	}
	if len(ports) == 0 {
		return nil
	}
	return ports
}

// clusterIP is the Service's cluster IP of b.family, or nil.
func (b *servicePortBuilder) clusterIP() net.IP {
	candidates := b.svc.Spec.ClusterIPs
	if len(candidates) == 0 {
		// Objects written by old API servers carry only the singular field.
		candidates = []string{b.svc.Spec.ClusterIP}
	}
	if candidates[0] == "" || candidates[0] == v1.ClusterIPNone {
		b.logger.V(3).Info("Skipping service without a cluster IP", "clusterIP", candidates[0])
		return nil
	}
	for _, s := range candidates {
		ip := netutils.ParseIPSloppy(s)
		if ip == nil {
			b.invalid("clusterIPs", s, "invalid IP address")
			continue
		}
		if ipFamilyOf(ip) == b.family {
			return canonicalIP(ip)
		}
	}
	b.logger.V(4).Info("Service has no cluster IP of this family", "clusterIPs", candidates)
	return nil
}

func (b *servicePortBuilder) externalIPs() []net.IP {
	return b.ipsOfFamily("externalIPs", b.svc.Spec.ExternalIPs)
}

// loadBalancerVIPs are the ingress IPs a VIP-style load balancer delivers to the node
// unchanged; ipMode Proxy means the LB terminates the connection itself.
func (b *servicePortBuilder) loadBalancerVIPs() []net.IP {
	var vips []string
	for _, ing := range b.svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		if ing.IPMode != nil && *ing.IPMode != v1.LoadBalancerIPModeVIP {
			b.logger.V(4).Info("Ignoring load balancer ingress IP that is not in VIP mode", "ip", ing.IP, "ipMode", *ing.IPMode)
			continue
		}
		vips = append(vips, ing.IP)
	}
	return b.ipsOfFamily("status.loadBalancer.ingress", vips)
}

// ipsOfFamily parses ips, skipping invalid ones, duplicates and those of the other
// family.
func (b *servicePortBuilder) ipsOfFamily(field string, ips []string) []net.IP {
	var out []net.IP
	seen := sets.New[string]()
	var otherFamily []string
	for _, s := range ips {
		ip := netutils.ParseIPSloppy(strings.TrimSpace(s))
		if ip == nil {
			b.invalid(field, s, "invalid IP address")
			continue
		}
		if ipFamilyOf(ip) != b.family {
			otherFamily = append(otherFamily, s)
			continue
		}
		ip = canonicalIP(ip)
		if seen.Has(ip.String()) {
			continue
		}
		seen.Insert(ip.String())
		out = append(out, ip)
	}
	if len(otherFamily) > 0 {
		b.logger.V(4).Info("Ignoring IPs of the other family", "field", field, "ips", otherFamily)
	}
	return out
}

// loadBalancerSourceRanges reads spec.loadBalancerSourceRanges. Like upstream
// kube-proxy it ignores the legacy service.beta.kubernetes.io/load-balancer-source-ranges
// annotation, which only cloud load balancers honour. Validation used to allow
// whitespace around the values, so they are trimmed.
func (b *servicePortBuilder) loadBalancerSourceRanges() []*net.IPNet {
	field := "loadBalancerSourceRanges"
	ranges := b.svc.Spec.LoadBalancerSourceRanges
	var out []*net.IPNet
	seen := sets.New[string]()
	for _, s := range ranges {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		_, cidr, err := netutils.ParseCIDRSloppy(s)
		if err != nil {
			b.invalid(field, s, "invalid CIDR")
			continue
		}
		cidr = ipfamily.CanonicalCIDR(cidr)
		if cidrFamilyOf(cidr) != b.family || seen.Has(cidr.String()) {
			continue
		}
		if ones, _ := cidr.Mask.Size(); ones == 0 {
			// A range holding every address means "everyone may connect": no filter at
			// all, as upstream programs it (the address goes in KUBE-LOAD-BALANCER only).
			// ipset could not hold it anyway: hash:ip,port,net refuses a /0.
			b.logger.V(4).Info("Load balancer source range allows every address; not filtering", "range", s)
			return nil
		}
		seen.Insert(cidr.String())
		out = append(out, cidr)
	}
	return out
}

func (b *servicePortBuilder) sessionAffinity() (v1.ServiceAffinity, int) {
	switch b.svc.Spec.SessionAffinity {
	case v1.ServiceAffinityClientIP:
	case "", v1.ServiceAffinityNone:
		return v1.ServiceAffinityNone, 0
	default:
		b.invalid("sessionAffinity", string(b.svc.Spec.SessionAffinity), "unknown session affinity, using None")
		return v1.ServiceAffinityNone, 0
	}
	timeout := defaultStickyMaxAgeSeconds
	if cfg := b.svc.Spec.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
		t := int(*cfg.ClientIP.TimeoutSeconds)
		if t < 1 || t > maxStickyMaxAgeSeconds {
			b.invalid("sessionAffinityConfig.clientIP.timeoutSeconds", fmt.Sprint(t), "timeout out of range, using the default")
		} else {
			timeout = t
		}
	}
	return v1.ServiceAffinityClientIP, timeout
}

func (b *servicePortBuilder) healthCheckNodePort() int {
	p := b.svc.Spec.HealthCheckNodePort
	if p < 1 || p > 65535 {
		b.logger.Error(nil, "Service has no valid health check node port", "healthCheckNodePort", p)
		return 0
	}
	return int(p)
}

// invalid logs a value that cannot be programmed and reports it on the Service.
func (b *servicePortBuilder) invalid(field, value, reason string) {
	b.logger.Info("Ignoring invalid service value", "field", field, "value", value, "reason", reason)
	if b.recorder != nil {
		b.recorder.Eventf(b.svc, nil, v1.EventTypeWarning, eventReasonInvalidValue, eventActionProcess,
			"%s %q ignored by kube-proxy: %s", field, value, reason)
	}
}

// externallyAccessibleService is upstream's definition: reachable other than through
// the cluster IP, judged on the whole Service (not one family's view of it).
func externallyAccessibleService(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeLoadBalancer ||
		svc.Spec.Type == v1.ServiceTypeNodePort ||
		((svc.Spec.Type == v1.ServiceTypeClusterIP || svc.Spec.Type == "") && len(svc.Spec.ExternalIPs) > 0)
}

// ipFamilyOf classifies an IP the way the kernel does: IPv4-mapped IPv6 is IPv4.
func ipFamilyOf(ip net.IP) v1.IPFamily {
	if ip.To4() != nil {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// cidrFamilyOf classifies a CIDR by its address, as upstream does
// (k8s.io/utils/net.IPFamilyOfCIDR): an IPv4-mapped IPv6 prefix such as
// ::ffff:198.18.0.0/111 is IPv4, so the IPv6 proxier leaves it out and the IPv4 one
// programs it in its canonical form (198.18.0.0/15, ipfamily.CanonicalCIDR).
func cidrFamilyOf(cidr *net.IPNet) v1.IPFamily {
	if ipfamily.OfCIDR(cidr) == ipfamily.IPv4 {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// canonicalIP returns the 4-byte form of IPv4 addresses so equal IPs compare equal.
func canonicalIP(ip net.IP) net.IP {
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	return ip.To16()
}

// schedulerAnnotations picks the per-Service scheduler annotations: ours if either is
// present, else kube-router's.
func schedulerAnnotations(a map[string]string) (scheduler, flags, source string) {
	s, okS := a[AnnotationScheduler]
	f, okF := a[AnnotationSchedulerFlags]
	if okS || okF {
		return strings.TrimSpace(s), strings.TrimSpace(f), AnnotationScheduler
	}
	s, okS = a[AnnotationKubeRouterScheduler]
	f, okF = a[AnnotationKubeRouterSchedFlags]
	if okS || okF {
		return strings.TrimSpace(s), strings.TrimSpace(f), AnnotationKubeRouterScheduler
	}
	return "", "", ""
}
