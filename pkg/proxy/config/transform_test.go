package config

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Test addresses: cluster IPs 10.96.0.0/16 and fd00:96::/112, pods 10.244.0.0/16,
// external and LB addresses 203.0.113.0/24.

// fullMeta is object metadata with every field set, as a real apiserver returns it.
func fullMeta(labels, annotations map[string]string) metav1.ObjectMeta {
	now := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	return metav1.ObjectMeta{
		//lint:ignore SA1019 the transform must drop it: an old apiserver still fills it in
		Name: "web", GenerateName: "web-", Namespace: "ns", SelfLink: "/api/v1/x", UID: "uid-1",
		ResourceVersion: "42", Generation: 3, CreationTimestamp: now, DeletionTimestamp: &now,
		DeletionGracePeriodSeconds: ptr.To[int64](30),
		Labels:                     labels,
		Annotations:                annotations,
		OwnerReferences:            []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "uid-0", Controller: ptr.To(true)}},
		Finalizers:                 []string{"service.kubernetes.io/load-balancer-cleanup"},
		ManagedFields:              []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
	}
}

// fullService is a Service with every field set.
func fullService() *v1.Service {
	return &v1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: fullMeta(
			map[string]string{"app": "web", "helm.sh/chart": "web-1.0"},
			map[string]string{lastAppliedAnnotation: "{...}", "kube-proxy-ipvs.io/scheduler": "sh", "kube-proxy-ipvs.io/scheduler-flags": "flag-1",
				"kube-router.io/service.scheduler": "lc", "kube-router.io/service.schedflags": "x", "other": "y"}),
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer,
			Ports: []v1.ServicePort{
				{Name: "http", Protocol: v1.ProtocolTCP, AppProtocol: ptr.To("http"), Port: 80, TargetPort: intstr.FromString("web"), NodePort: 30080},
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353), NodePort: 30053},
			},
			Selector:                      map[string]string{"app": "web"},
			ClusterIP:                     "10.96.0.10",
			ClusterIPs:                    []string{"10.96.0.10", "fd00:96::10"},
			ExternalIPs:                   []string{"203.0.113.5"},
			SessionAffinity:               v1.ServiceAffinityClientIP,
			LoadBalancerIP:                "203.0.113.9",
			LoadBalancerSourceRanges:      []string{"198.18.0.0/15"},
			ExternalName:                  "web.example.com",
			ExternalTrafficPolicy:         v1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort:           32000,
			PublishNotReadyAddresses:      true,
			SessionAffinityConfig:         &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}},
			IPFamilies:                    []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
			IPFamilyPolicy:                ptr.To(v1.IPFamilyPolicyPreferDualStack),
			AllocateLoadBalancerNodePorts: ptr.To(true),
			LoadBalancerClass:             ptr.To("example.com/lb"),
			InternalTrafficPolicy:         ptr.To(v1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:           ptr.To(v1.ServiceTrafficDistributionPreferClose),
		},
		Status: v1.ServiceStatus{
			LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
				{IP: "203.0.113.10", Hostname: "lb.example.com", IPMode: ptr.To(v1.LoadBalancerIPModeVIP), Ports: []v1.PortStatus{{Port: 80, Protocol: v1.ProtocolTCP}}},
				{IP: "203.0.113.11", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
				{Hostname: "only-a-name.example.com"},
			}},
			Conditions: []metav1.Condition{{Type: "LoadBalancerReady", Status: metav1.ConditionTrue}},
		},
	}
}

func fullSlice() *discovery.EndpointSlice {
	ep := func(ip, node string, ready, serving, term bool) discovery.Endpoint {
		return discovery.Endpoint{
			Addresses:          []string{ip},
			Conditions:         discovery.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(term)},
			Hostname:           ptr.To("pod"),
			TargetRef:          &v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod", UID: "uid-p"},
			DeprecatedTopology: map[string]string{"k": "v"},
			NodeName:           ptr.To(node),
			Zone:               ptr.To("zone-a"),
			Hints: &discovery.EndpointHints{
				ForZones: []discovery.ForZone{{Name: "zone-a"}},
				ForNodes: []discovery.ForNode{{Name: node}},
			},
		}
	}
	return &discovery.EndpointSlice{
		TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"},
		ObjectMeta: fullMeta(
			map[string]string{discovery.LabelServiceName: "web", discovery.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web"},
			map[string]string{lastAppliedAnnotation: "{...}", v1.EndpointsLastChangeTriggerTime: "2026-12-01T00:00:00Z"}),
		AddressType: discovery.AddressTypeIPv4,
		Endpoints: []discovery.Endpoint{
			ep("10.244.1.5", "node-a", true, true, false),
			ep("10.244.2.7", "node-b", false, true, true),
			{Addresses: []string{"10.244.2.8"}}, // nothing but an address: nil stays nil
		},
		Ports: []discovery.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080), AppProtocol: ptr.To("http")},
			{Name: ptr.To("dns"), Protocol: ptr.To(v1.ProtocolUDP), Port: ptr.To[int32](5353)},
		},
	}
}

// TestTrimForCache spells out what survives the transform: every field kube-proxy
// reads (pkg/proxy: serviceport.go, endpointslicecache.go, endpointschangetracker.go;
// the proxier's Events) and nothing else.
func TestTrimForCache(t *testing.T) {
	svc := fullService()
	want := fullService()
	want.ObjectMeta = metav1.ObjectMeta{
		Name: "web", Namespace: "ns", UID: "uid-1", ResourceVersion: "42",
		Annotations: map[string]string{"kube-proxy-ipvs.io/scheduler": "sh", "kube-proxy-ipvs.io/scheduler-flags": "flag-1",
			"kube-router.io/service.scheduler": "lc", "kube-router.io/service.schedflags": "x"},
	}
	want.Spec.Ports[0].AppProtocol = nil
	want.Spec.Ports[0].TargetPort = intstr.IntOrString{}
	want.Spec.Ports[1].TargetPort = intstr.IntOrString{}
	want.Spec.Selector = nil
	want.Spec.LoadBalancerIP = ""
	want.Spec.ExternalName = ""
	want.Spec.PublishNotReadyAddresses = false
	want.Spec.IPFamilies = nil
	want.Spec.IPFamilyPolicy = nil
	want.Spec.AllocateLoadBalancerNodePorts = nil
	want.Spec.LoadBalancerClass = nil
	want.Status = v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
		{IP: "203.0.113.10", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)},
		{IP: "203.0.113.11", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
		{},
	}}}

	slice := fullSlice()
	wantSlice := fullSlice()
	wantSlice.ObjectMeta = metav1.ObjectMeta{
		Name: "web", Namespace: "ns", ResourceVersion: "42",
		Labels:      map[string]string{discovery.LabelServiceName: "web"},
		Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: "2026-12-01T00:00:00Z"},
	}
	for i := range wantSlice.Endpoints {
		ep := &wantSlice.Endpoints[i]
		ep.Hostname, ep.TargetRef, ep.DeprecatedTopology = nil, nil, nil
	}
	wantSlice.Ports[0].AppProtocol = nil

	for range 2 { // idempotent
		for _, obj := range []any{svc, slice} {
			out, err := TrimForCache(obj)
			if err != nil || out != obj {
				t.Fatalf("TrimForCache(%T) = %v, %v; want the object changed in place", obj, out, err)
			}
		}
		if diff := cmp.Diff(want, svc); diff != "" {
			t.Errorf("Service (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantSlice, slice); diff != "" {
			t.Errorf("EndpointSlice (-want +got):\n%s", diff)
		}
	}

	// Values many objects repeat are shared, and trimmed objects stay deep-copyable.
	other := fullSlice()
	other.Namespace = string([]byte("ns")) // a separate copy, as a decoder makes
	if _, err := TrimForCache(other); err != nil {
		t.Fatal(err)
	}
	if other.Endpoints[0].NodeName != slice.Endpoints[0].NodeName || other.Endpoints[0].Conditions.Ready != slice.Endpoints[0].Conditions.Ready ||
		other.Ports[0].Protocol != slice.Ports[0].Protocol || other.Ports[0].Name != slice.Ports[0].Name {
		t.Errorf("node names, conditions, port names and protocols are not shared")
	}
	if unsafe.StringData(other.Namespace) != unsafe.StringData(slice.Namespace) {
		t.Errorf("namespaces are not shared")
	}
	spare := fullSlice()
	spare.Endpoints = append(make([]discovery.Endpoint, 0, 16), spare.Endpoints...)
	if _, err := TrimForCache(spare); err != nil {
		t.Fatal(err)
	}
	if len(spare.Endpoints) != 3 || cap(spare.Endpoints) != 3 {
		t.Errorf("endpoints: len %d cap %d, want the array without spare capacity", len(spare.Endpoints), cap(spare.Endpoints))
	}
	if diff := cmp.Diff(slice, slice.DeepCopy()); diff != "" {
		t.Errorf("deep copy differs:\n%s", diff)
	}
}

func TestTrimForCacheNode(t *testing.T) {
	node := &v1.Node{
		ObjectMeta: fullMeta(map[string]string{v1.LabelTopologyZone: "zone-a"}, map[string]string{lastAppliedAnnotation: "{...}", "a": "b"}),
		Status: v1.NodeStatus{
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.10"}},
			Images:    []v1.ContainerImage{{Names: []string{"big"}}},
		},
	}
	want := node.DeepCopy()
	want.ManagedFields = nil
	delete(want.Annotations, lastAppliedAnnotation)
	want.Status.Images = nil
	if _, err := TrimForCache(node); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, node); diff != "" {
		t.Errorf("Node (-want +got):\n%s", diff)
	}
}

func TestTrimForCachePassesOthersThrough(t *testing.T) {
	svc := fullService()
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: svc}
	if out, err := TrimForCache(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone: got %v, %v; want it passed through", out, err)
	}
	if svc.ManagedFields == nil {
		t.Errorf("the tombstone's object was changed")
	}
	if out, err := TrimForCache("x"); err != nil || out != "x" {
		t.Errorf("string: got %v, %v", out, err)
	}
}

// TestTrimForCacheSharedStringsBounded: the table of shared names starts again when
// full, and what it handed out before stays valid.
func TestTrimForCacheSharedStringsBounded(t *testing.T) {
	first := internPtr(ptr.To("node-0"))
	for i := range maxSharedStrings + 10 {
		internPtr(ptr.To(fmt.Sprintf("node-%d", i+1)))
	}
	stringPtrs.Lock()
	n := len(stringPtrs.m)
	stringPtrs.Unlock()
	if n > maxSharedStrings {
		t.Errorf("%d shared strings, want at most %d", n, maxSharedStrings)
	}
	if *first != "node-0" {
		t.Errorf("a handed-out name changed: %q", *first)
	}
}
