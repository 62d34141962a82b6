package config

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
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

// TestReduceServices spells out what a Service's record keeps, seen through
// ServiceRecord.Service: every field kube-proxy reads (pkg/proxy serviceport.go, the
// proxier's Events) and nothing else. Values many records repeat are shared.
func TestReduceServices(t *testing.T) {
	want := fullService()
	want.TypeMeta = metav1.TypeMeta{}
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

	out, err := ReduceServices(fullService())
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := out.(*proxy.ServiceRecord)
	if !ok {
		t.Fatalf("transform returned %T, want a record", out)
	}
	if diff := cmp.Diff(want, rec.Service()); diff != "" {
		t.Errorf("Service (-want +got):\n%s", diff)
	}
	checkRecordInStore(t, ReduceServices, rec, fullSlice())

	// Only the clusterIP an old API server wrote: it is the record's clusterIPs.
	old := fullService()
	old.Spec.ClusterIPs = nil
	if got := proxy.NewServiceRecord(old).Service().Spec.ClusterIPs; !reflect.DeepEqual(got, []string{"10.96.0.10"}) {
		t.Errorf("clusterIPs from the singular field: %q", got)
	}

	// Namespaces and port names are shared.
	other := fullService()
	other.Namespace = string([]byte("ns")) // a separate copy, as a decoder makes
	other.Spec.Ports[0].Name = string([]byte("http"))
	a, b := rec.Service(), proxy.NewServiceRecord(other).Service()
	if unsafe.StringData(a.Namespace) != unsafe.StringData(b.Namespace) ||
		unsafe.StringData(a.Spec.Ports[0].Name) != unsafe.StringData(b.Spec.Ports[0].Name) {
		t.Errorf("namespaces and port names are not shared")
	}
}

// TestReduceEndpointSlices: the EndpointSlice informer's transform makes a record of
// a slice (its content is pkg/proxy's to test) and passes anything else through, a
// record included (an informer's resync hands cached objects back through it).
func TestReduceEndpointSlices(t *testing.T) {
	reduce := ReduceEndpointSlices("node-a")
	out, err := reduce(fullSlice())
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := out.(*proxy.EndpointSliceRecord)
	if !ok {
		t.Fatalf("transform returned %T, want a record", out)
	}
	want := &proxy.EndpointSliceRecord{RecordMeta: proxy.RecordMeta{Namespace: "ns", Name: "web", ResourceVersion: "42"}, Service: "web", AddressType: discovery.AddressTypeIPv4}
	if diff := cmp.Diff(want, rec, cmpopts.IgnoreUnexported(proxy.EndpointSliceRecord{})); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if got, want := rec.TriggerTime(), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("TriggerTime() = %v, want %v", got, want)
	}
	checkRecordInStore(t, reduce, rec, fullService())
}

// checkRecordInStore: an informer's store keys rec as ns/web, and the transform passes
// through rec (an informer's resync hands cached objects back through it), a
// tombstone of it, and other, an object of another kind.
func checkRecordInStore(t *testing.T, reduce cache.TransformFunc, rec, other any) {
	t.Helper()
	key, err := cache.MetaNamespaceKeyFunc(rec)
	if err != nil || key != "ns/web" {
		t.Errorf("store key %q, %v; want ns/web", key, err)
	}
	for _, obj := range []any{rec, cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: rec}, other} {
		if got, err := reduce(obj); err != nil || !reflect.DeepEqual(got, obj) {
			t.Errorf("transform(%T) = %T, %v; want it passed through", obj, got, err)
		}
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
	node := &v1.Node{ObjectMeta: fullMeta(nil, nil)}
	tomb := cache.DeletedFinalStateUnknown{Key: "web", Obj: node}
	if out, err := TrimForCache(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone: got %v, %v; want it passed through", out, err)
	}
	if node.ManagedFields == nil {
		t.Errorf("the tombstone's object was changed")
	}
	slice := fullSlice()
	if out, err := TrimForCache(slice); err != nil || out != any(slice) || !reflect.DeepEqual(slice, fullSlice()) {
		t.Errorf("EndpointSlice: got %v, %v; want it passed through unchanged (its informer caches records)", out, err)
	}
	if out, err := TrimForCache(fullService()); err != nil || !reflect.DeepEqual(out, fullService()) {
		t.Errorf("Service: got %v, %v; want it passed through unchanged (its informer caches records)", out, err)
	}
	if out, err := TrimForCache("x"); err != nil || out != "x" {
		t.Errorf("string: got %v, %v", out, err)
	}
}
