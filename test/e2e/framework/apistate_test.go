package framework

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestExpectedAndDiff(t *testing.T) {
	svc := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ExternalIPs: []string{"203.0.113.1"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}},
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.2"}}}},
	}
	headless := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}, Spec: corev1.ServiceSpec{ClusterIP: "None"}}
	ep := func(ip, node string, ready, term bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(true), Terminating: ptr.To(term)}}
	}
	slice := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints:   []discoveryv1.Endpoint{ep("10.244.0.5", "n1", true, false), ep("10.244.1.5", "n2", true, false), ep("10.244.1.6", "n2", false, true)},
	}
	o := &APIObjects{Services: []corev1.Service{svc, headless}, Slices: []discoveryv1.EndpointSlice{slice}}

	// n2: eTP=Local keeps only its ready local endpoint on the external VSs.
	want := o.Expected("n2", []string{"192.168.200.12"})
	if got := want.VS["TCP 10.96.0.10:80"]; strings.Join(got, ",") != "10.244.0.5:8080,10.244.1.5:8080" {
		t.Fatalf("cluster IP real servers %v", got)
	}
	for _, vs := range []string{"TCP 192.168.200.12:30080", "TCP 203.0.113.1:80", "TCP 203.0.113.2:80"} {
		if got := want.VS[vs]; strings.Join(got, ",") != "10.244.1.5:8080" {
			t.Fatalf("%s real servers %v, want the local one", vs, got)
		}
	}
	// n3 has no local endpoint: every endpoint (upstream's fallback).
	if got := o.Expected("n3", []string{"192.168.200.13"}).VS["TCP 192.168.200.13:30080"]; len(got) != 2 {
		t.Fatalf("fallback real servers %v", got)
	}
	if !want.IPSets["KUBE-CLUSTER-IP"]["10.96.0.10,tcp:80"] || !want.IPSets["KUBE-NODE-PORT-TCP"]["30080"] ||
		!want.IPSets["KUBE-LOAD-BALANCER"]["203.0.113.2,tcp:80"] || !want.IPSets["KUBE-EXTERNAL-IP"]["203.0.113.1,tcp:80"] {
		t.Fatalf("ipsets %v", want.IPSets)
	}
	if len(want.Addrs) != 3 || len(want.VS) != 4 {
		t.Fatalf("addrs %v vs %v", want.Addrs, want.VS)
	}

	got := ParseNodeState(`#IPVS
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.10:80 rr
  -> 10.244.0.5:8080              Masq    1      0          0
  -> 10.244.1.5:8080              Masq    1      0          0
  -> 10.244.1.9:8080              Masq    0      1          0
TCP  192.168.200.12:30080 rr
  -> 10.244.1.5:8080              Masq    1      0          0
TCP  203.0.113.1:80 rr
  -> 10.244.1.5:8080              Masq    1      0          0
TCP  10.96.0.99:80 rr
#IPSET
create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 10.96.0.10,tcp:80
add KUBE-NODE-PORT-TCP 30080
add KUBE-EXTERNAL-IP 203.0.113.1,tcp:80
add KUBE-LOAD-BALANCER 203.0.113.2,tcp:80
add KUBE-IPVS-IPS 10.96.0.10
add KUBE-IPVS-IPS 203.0.113.1
add KUBE-IPVS-IPS 203.0.113.2
#ADDR
5: kube-ipvs0    inet 10.96.0.10/32 scope global kube-ipvs0\       valid_lft forever preferred_lft forever
5: kube-ipvs0    inet 203.0.113.1/32 scope global kube-ipvs0\       valid_lft forever preferred_lft forever
#NODEADDR
2: eth0    inet 192.168.200.12/24 scope global eth0\       valid_lft forever preferred_lft forever
#IPT
:KUBE-SERVICES - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -j ACCEPT
`)
	if len(got.NodeAddrs) != 1 || got.NodeAddrs[0] != "192.168.200.12" || got.KubeChains != 1 || got.KubeRules != 2 {
		t.Fatalf("parsed %+v", got)
	}
	if strings.Join(got.Draining["TCP 10.96.0.10:80"], ",") != "10.244.1.9:8080" {
		t.Fatalf("draining %v", got.Draining)
	}
	d := strings.Join(want.Diff(got), "\n")
	for _, s := range []string{"missing virtual server TCP 203.0.113.2:80", "orphaned virtual server TCP 10.96.0.99:80", "kube-ipvs0 lacks 203.0.113.2"} {
		if !strings.Contains(d, s) {
			t.Errorf("diff lacks %q:\n%s", s, d)
		}
	}
	if n := len(want.Diff(got)); n != 3 {
		t.Errorf("diff has %d entries, want 3:\n%s", n, d)
	}
}
