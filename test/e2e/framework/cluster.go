package framework

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// CreateNode registers the VM as a Node (there is no kubelet to do it).
func CreateNode(ctx context.Context, c kubernetes.Interface) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{"kubernetes.io/hostname": NodeName}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24", "fd00:244::/64"}},
	}
	created, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = c.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", NodeName, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: NodeIP},
		{Type: corev1.NodeInternalIP, Address: NodeIP6},
		{Type: corev1.NodeHostName, Address: NodeName},
	}
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "E2E",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting the addresses of Node %s: %w", NodeName, err)
	}
	return nil
}

// CreateNamespace creates a namespace for one scenario.
func CreateNamespace(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// ServicePort is one port of a test Service; targets are the pods' port 8080.
type ServicePort struct {
	Name     string
	Protocol corev1.Protocol
	Port     int32
}

// CreateService creates a Service whose ports all target 8080 and returns it
// with the ClusterIP (and NodePorts) the apiserver allocated.
func CreateService(ctx context.Context, c kubernetes.Interface, ns, name string, typ corev1.ServiceType, ports ...ServicePort) (*corev1.Service, error) {
	return CreateServiceWith(ctx, c, ns, name, typ, nil, ports...)
}

// CreateServiceWith is CreateService with mutate applied to the Service
// before it is created (session affinity, external IPs, traffic policies...).
func CreateServiceWith(ctx context.Context, c kubernetes.Interface, ns, name string, typ corev1.ServiceType, mutate func(*corev1.Service), ports ...ServicePort) (*corev1.Service, error) {
	svc := newService(ns, name, typ, ports...)
	if mutate != nil {
		mutate(svc)
	}
	out, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating Service %s/%s: %w", ns, name, err)
	}
	return out, nil
}

// newService is the Service CreateService sends: ports targeting 8080 and a
// selector app=NAME (no controller acts on it: the tests write the slices).
func newService(ns, name string, typ corev1.ServiceType, ports ...ServicePort) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Type: typ, Selector: map[string]string{"app": name}},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: intstr.FromInt32(8080),
		})
	}
	return svc
}

// Endpoint is one endpoint (a pod) of a Service: ready and on this node
// unless the optional fields say otherwise.
type Endpoint struct {
	PodName string
	IP      string

	Node        string   // "" = this node (NodeName)
	Zone        string   // the endpoint's zone, if any
	ZoneHints   []string // topology hints (forZones)
	Terminating bool     // terminating: not ready, serving unless NotServing
	NotServing  bool     // with Terminating: a terminating pod past its readiness
}

// discoveryEndpoint is what the endpointslice controller writes for e.
func discoveryEndpoint(ns string, e Endpoint) discoveryv1.Endpoint {
	node := e.Node
	if node == "" {
		node = NodeName
	}
	ready := !e.Terminating
	serving := !e.Terminating || !e.NotServing
	out := discoveryv1.Endpoint{
		Addresses:  []string{e.IP},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(e.Terminating)},
		NodeName:   ptr.To(node),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.PodName},
	}
	if e.Zone != "" {
		out.Zone = ptr.To(e.Zone)
	}
	if len(e.ZoneHints) > 0 {
		out.Hints = &discoveryv1.EndpointHints{}
		for _, z := range e.ZoneHints {
			out.Hints.ForZones = append(out.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
	return out
}

// CreateEndpointSlice writes the EndpointSlice the endpointslice controller
// would have written for svc (there is no controller manager): one
// entry per endpoint, every Service port mapped to 8080.
func CreateEndpointSlice(ctx context.Context, c kubernetes.Interface, svc *corev1.Service, eps ...Endpoint) (*discoveryv1.EndpointSlice, error) {
	return CreateEndpointSliceOf(ctx, c, svc, discoveryv1.AddressTypeIPv4, eps...)
}

// CreateEndpointSliceOf is CreateEndpointSlice for one address type; the IPv6
// slice is named <service>-e2e-v6.
func CreateEndpointSliceOf(ctx context.Context, c kubernetes.Interface, svc *corev1.Service, addressType discoveryv1.AddressType, eps ...Endpoint) (*discoveryv1.EndpointSlice, error) {
	slice := newEndpointSlice(svc, addressType, eps...)
	out, err := c.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating EndpointSlice for %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return out, nil
}

// newEndpointSlice is the slice CreateEndpointSliceOf sends for svc: named
// after it, one port per Service port (8080), eps as discoveryEndpoint makes them.
func newEndpointSlice(svc *corev1.Service, addressType discoveryv1.AddressType, eps ...Endpoint) *discoveryv1.EndpointSlice {
	name := svc.Name + "-e2e"
	if addressType == discoveryv1.AddressTypeIPv6 {
		name += "-v6"
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   "e2e.kube-proxy-ipvs",
			},
		},
		AddressType: addressType,
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
			Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To[int32](8080),
		})
	}
	for _, e := range eps {
		slice.Endpoints = append(slice.Endpoints, discoveryEndpoint(svc.Namespace, e))
	}
	return slice
}

// SetEndpoints replaces the endpoints of the EndpointSlice CreateEndpointSlice
// wrote for svc, as the controller does when pods come and go.
func SetEndpoints(ctx context.Context, c kubernetes.Interface, svc *corev1.Service, eps ...Endpoint) error {
	name := svc.Name + "-e2e"
	slice, err := c.DiscoveryV1().EndpointSlices(svc.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting EndpointSlice %s/%s: %w", svc.Namespace, name, err)
	}
	slice.Endpoints = nil
	for _, e := range eps {
		slice.Endpoints = append(slice.Endpoints, discoveryEndpoint(svc.Namespace, e))
	}
	if _, err := c.DiscoveryV1().EndpointSlices(svc.Namespace).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating EndpointSlice %s/%s: %w", svc.Namespace, name, err)
	}
	return nil
}

// DeleteService deletes a Service and its EndpointSlices (no controller
// manager garbage-collects them).
func DeleteService(ctx context.Context, c kubernetes.Interface, svc *corev1.Service) error {
	if err := c.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	err := c.DiscoveryV1().EndpointSlices(svc.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return fmt.Errorf("deleting the EndpointSlices of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// stopTrying marks an error Eventually must not retry.
type stopTrying struct{ err error }

func (s stopTrying) Error() string { return s.err.Error() }
func (s stopTrying) Unwrap() error { return s.err }

// StopTrying wraps err so that Eventually returns it at once.
func StopTrying(err error) error { return stopTrying{err} }

// Eventually polls cond every interval until it returns nil or timeout passes;
// it returns the last error. An error wrapped with StopTrying ends it at once.
func Eventually(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = cond(ctx); last == nil {
			return nil
		}
		var stop stopTrying
		if errors.As(last, &stop) {
			return stop.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still failing after %s: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// CountAnswers parses e2e-agent client output into answers per pod name; the
// second value counts ERROR lines.
func CountAnswers(out string) (map[string]int, int) {
	counts := map[string]int{}
	errs := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0, f[0] == "SUMMARY":
		case f[0] == "ERROR":
			errs++
		default:
			counts[f[0]]++
		}
	}
	return counts, errs
}
