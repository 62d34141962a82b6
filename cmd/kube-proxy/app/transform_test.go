package app

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestTrimForCache(t *testing.T) {
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: "web", Namespace: "ns",
			Labels:        map[string]string{discovery.LabelServiceName: "web"},
			Annotations:   map[string]string{lastAppliedAnnotation: "{...}", "endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T00:00:00Z"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		}
	}
	svc := &v1.Service{ObjectMeta: meta(), Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []v1.ServicePort{{Port: 80}}}}
	slice := &discovery.EndpointSlice{ObjectMeta: meta(), Endpoints: []discovery.Endpoint{{
		Addresses: []string{"10.244.0.5"}, NodeName: ptr.To("node-a"), Zone: ptr.To("z1"),
		Hostname: ptr.To("pod-a"), TargetRef: &v1.ObjectReference{Kind: "Pod", Name: "pod-a"},
		DeprecatedTopology: map[string]string{"k": "v"},
		Hints:              &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z1"}}},
	}}}
	node := &v1.Node{ObjectMeta: meta(), Status: v1.NodeStatus{
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.10"}},
		Images:    []v1.ContainerImage{{Names: []string{"big"}}},
	}}

	for _, obj := range []metav1.Object{svc, slice, node} {
		for range 2 { // idempotent
			if _, err := trimForCache(obj); err != nil {
				t.Fatal(err)
			}
		}
		if obj.GetManagedFields() != nil {
			t.Errorf("%T keeps managed fields", obj)
		}
		if _, ok := obj.GetAnnotations()[lastAppliedAnnotation]; ok {
			t.Errorf("%T keeps the last-applied annotation", obj)
		}
		if obj.GetAnnotations()["endpoints.kubernetes.io/last-change-trigger-time"] == "" || obj.GetLabels()[discovery.LabelServiceName] != "web" {
			t.Errorf("%T lost labels or annotations kube-proxy reads: %v %v", obj, obj.GetLabels(), obj.GetAnnotations())
		}
	}
	if svc.Spec.ClusterIP != "10.96.0.1" || len(svc.Spec.Ports) != 1 {
		t.Errorf("service spec changed: %+v", svc.Spec)
	}
	ep := slice.Endpoints[0]
	if ep.TargetRef != nil || ep.Hostname != nil || ep.DeprecatedTopology != nil {
		t.Errorf("endpoint keeps unused fields: %+v", ep)
	}
	if ep.Addresses[0] != "10.244.0.5" || *ep.NodeName != "node-a" || *ep.Zone != "z1" || ep.Hints == nil {
		t.Errorf("endpoint lost fields kube-proxy reads: %+v", ep)
	}
	if node.Status.Images != nil || len(node.Status.Addresses) != 1 {
		t.Errorf("node status: %+v", node.Status)
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: svc}
	if out, err := trimForCache(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone: got %v, %v; want it passed through", out, err)
	}
}
