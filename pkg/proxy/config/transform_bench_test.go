package config

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// realisticService is a Service as a typical chart installs it and the apiserver
// returns it: labels, a selector, managed fields of the client and the apiserver.
func realisticService(i int) *v1.Service {
	name := fmt.Sprintf("svc-%05d", i)
	labels := map[string]string{
		"app.kubernetes.io/name": name, "app.kubernetes.io/instance": "release-1",
		"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "web-1.2.3",
	}
	now := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "team-a", UID: "5f0c7b6e-8f7d-4a59-a2a1-3c6f0d1e2b3a", ResourceVersion: "123456789",
			CreationTimestamp: now, Labels: labels,
			Annotations: map[string]string{"meta.helm.sh/release-name": "release-1", "meta.helm.sh/release-namespace": "team-a"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:meta.helm.sh/release-name":{},"f:meta.helm.sh/release-namespace":{}},"f:labels":{".":{},"f:app.kubernetes.io/instance":{},"f:app.kubernetes.io/managed-by":{},"f:app.kubernetes.io/name":{},"f:helm.sh/chart":{}}},"f:spec":{"f:internalTrafficPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:selector":{},"f:sessionAffinity":{},"f:type":{}}}`),
			}},
		},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeClusterIP,
			Ports:                 []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}},
			Selector:              map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/instance": "release-1"},
			ClusterIP:             fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			ClusterIPs:            []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			SessionAffinity:       v1.ServiceAffinityNone,
			IPFamilies:            []v1.IPFamily{v1.IPv4Protocol},
			IPFamilyPolicy:        ptr.To(v1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy: ptr.To(v1.ServiceInternalTrafficPolicyCluster),
		},
	}
}

// realisticSlice is the endpoint slice controller's slice for realisticService(i),
// with n endpoints (pods with targetRefs, on 100 nodes in 3 zones).
func realisticSlice(i, n int) *discovery.EndpointSlice {
	svc := realisticService(i)
	labels := map[string]string{discovery.LabelServiceName: svc.Name, discovery.LabelManagedBy: "endpointslice-controller.k8s.io"}
	for k, v := range svc.Labels {
		labels[k] = v // the controller copies the Service's labels
	}
	now := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name + "-x7k2p", GenerateName: svc.Name + "-", Namespace: "team-a", UID: "0b8e1c2d-3f4a-4b5c-8d6e-7f8091a2b3c4",
			ResourceVersion: "123456790", Generation: 4, CreationTimestamp: now, Labels: labels,
			Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: "2026-12-01T00:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "discovery.k8s.io/v1", Time: &now, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:annotations":{".":{},"f:endpoints.kubernetes.io/last-change-trigger-time":{}},"f:generateName":{},"f:labels":{".":{},"f:app.kubernetes.io/instance":{},"f:app.kubernetes.io/managed-by":{},"f:app.kubernetes.io/name":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:helm.sh/chart":{},"f:kubernetes.io/service-name":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"5f0c7b6e-8f7d-4a59-a2a1-3c6f0d1e2b3a\"}":{}}},"f:ports":{}}`),
			}},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for j := range n {
		pod := fmt.Sprintf("%s-7d9f8b6c5-%05d", svc.Name, j)
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 64+(i*n+j)/65536, (i*n+j)/256%256, (i*n+j)%256)},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("node-%03d", (i+j)%100)),
			Zone:       ptr.To(fmt.Sprintf("zone-%c", 'a'+(i+j)%3)),
			TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: "team-a", Name: pod, UID: "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"},
		})
	}
	return s
}

type protoObject interface {
	Marshal() ([]byte, error)
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	sm := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sm)
	return sm[0].Value.Uint64()
}

// BenchmarkCachedObjectBytes measures what the informer cache holds per object of
// realistic Services and EndpointSlices (10 endpoints), decoded from protobuf one at a
// time as the informers do, whole and as the records their transforms make
// (ReduceServices, ReduceEndpointSlices; a slice's record includes the endpoints,
// which the proxier's change tracker shares). The scale benchmarks' generated
// objects carry none of what is dropped; this shows what it saves on a real
// cluster's objects. Run with -benchtime 1x.
func BenchmarkCachedObjectBytes(b *testing.B) {
	const n = 5000
	encode := func(o protoObject) []byte {
		data, err := o.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	svcData, sliceData := make([][]byte, n), make([][]byte, n)
	for i := range n {
		svcData[i] = encode(realisticService(i))
		sliceData[i] = encode(realisticSlice(i, 10))
	}
	for _, trim := range []bool{false, true} {
		name := "whole"
		if trim {
			name = "record"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				measure := func(decode func(i int) any, transform cache.TransformFunc) float64 {
					objs := make([]any, n)
					base := liveHeap()
					for i := range n {
						objs[i] = decode(i)
						if trim {
							var err error
							if objs[i], err = transform(objs[i]); err != nil {
								b.Fatal(err)
							}
						}
					}
					used := liveHeap() - base
					runtime.KeepAlive(objs)
					return float64(used) / n
				}
				svcBytes := measure(func(i int) any {
					s := &v1.Service{}
					if err := s.Unmarshal(svcData[i]); err != nil {
						b.Fatal(err)
					}
					return s
				}, ReduceServices)
				sliceBytes := measure(func(i int) any {
					s := &discovery.EndpointSlice{}
					if err := s.Unmarshal(sliceData[i]); err != nil {
						b.Fatal(err)
					}
					return s
				}, ReduceEndpointSlices("node-1"))
				b.ReportMetric(svcBytes, "service-B")
				b.ReportMetric(sliceBytes, "slice-B")
			}
		})
	}
}
