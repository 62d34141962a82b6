package main

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/uuid"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
	discoveryv1defaults "k8s.io/kubernetes/pkg/apis/discovery/v1"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
)

// item is one input line: a Service and its EndpointSlice as a client would
// send them to Create.
type item struct {
	Service *corev1.Service            `json:"service"`
	Slice   *discoveryv1.EndpointSlice `json:"slice,omitempty"`
}

// seeded is one Service's keys and their stored values, and the key that
// must exist already (its IPAddress, in the objects phase).
type seeded struct {
	keys      []string
	vals      [][]byte
	mustExist string
}

// storage encodes objects as kube-apiserver's storage layer does: its default
// --storage-media-type is application/vnd.kubernetes.protobuf
// (k8s.io/kubernetes/pkg/controlplane/apiserver/options), whose serializer
// writes "k8s\x00" and a runtime.Unknown holding apiVersion, kind and the
// object's protobuf, through an encoder that sets the storage version.
type storage struct {
	core, discovery, networking runtime.Encoder
}

func newStorage() (*storage, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	codecs := serializer.NewCodecFactory(scheme)
	pb := protobuf.NewSerializer(scheme, scheme)
	// The storage versions of kube-apiserver v1.37 for these resources (none
	// is overridden in pkg/kubeapiserver/default_storage_factory_builder.go).
	return &storage{
		core:       codecs.EncoderForVersion(pb, corev1.SchemeGroupVersion),
		discovery:  codecs.EncoderForVersion(pb, discoveryv1.SchemeGroupVersion),
		networking: codecs.EncoderForVersion(pb, networkingv1.SchemeGroupVersion),
	}, nil
}

// Keys under --etcd-prefix: services live under "services/specs"
// (SpecialDefaultResourcePrefixes in default_storage_factory_builder.go), the
// others under their resource name; namespaced objects as NS/NAME.
func serviceKey(prefix, ns, name string) string { return prefix + "/services/specs/" + ns + "/" + name }
func sliceKey(prefix, ns, name string) string   { return prefix + "/endpointslices/" + ns + "/" + name }
func ipKey(prefix, ip string) string            { return prefix + "/ipaddresses/" + ip }
func namespaceKey(prefix, ns string) string     { return prefix + "/namespaces/" + ns }

// validate checks an input line before an address is spent on it; in the
// objects phase it returns the ClusterIP the line carries.
func (it item) validate(o options) (netip.Addr, error) {
	svc, ns := it.Service, o.namespace
	switch {
	case svc == nil || svc.Name == "":
		return netip.Addr{}, fmt.Errorf("a line without a named service")
	case svc.Namespace != "" && svc.Namespace != ns:
		return netip.Addr{}, fmt.Errorf("service %s/%s is not in namespace %s", svc.Namespace, svc.Name, ns)
	case svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP:
		return netip.Addr{}, fmt.Errorf("service %s is of type %s: only ClusterIP Services are seeded", svc.Name, svc.Spec.Type)
	case it.Slice != nil && it.Slice.Name == "":
		return netip.Addr{}, fmt.Errorf("service %s: its slice has no name", svc.Name)
	case it.Slice != nil && it.Slice.Namespace != "" && it.Slice.Namespace != ns:
		return netip.Addr{}, fmt.Errorf("slice %s/%s is not in namespace %s", it.Slice.Namespace, it.Slice.Name, ns)
	}
	if o.phase != phaseObjects {
		if svc.Spec.ClusterIP != "" || len(svc.Spec.ClusterIPs) > 0 {
			return netip.Addr{}, fmt.Errorf("service %s has a clusterIP: the tool allocates it (but in the objects phase)", svc.Name)
		}
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || !o.cidr.Contains(ip) || len(svc.Spec.ClusterIPs) > 1 || len(svc.Spec.ClusterIPs) == 1 && svc.Spec.ClusterIPs[0] != svc.Spec.ClusterIP {
		return netip.Addr{}, fmt.Errorf("service %s: the objects phase wants the one clusterIP (in %s) the ipaddresses phase gave it, not %q %q", svc.Name, o.cidr, svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
	}
	return ip, nil
}

// prepare does to one line what the apiserver's create path does (v1
// defaulting, the strategy's PrepareForCreate, uid and creationTimestamp, the
// ClusterIP allocation and its IPAddress) and encodes the objects the phase
// writes.
func (st *storage) prepare(o options, it item, ip netip.Addr, now metav1.Time) (seeded, error) {
	var out seeded
	add := func(key string, enc runtime.Encoder, obj runtime.Object) error {
		b, err := runtime.Encode(enc, obj)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", key, err)
		}
		out.keys = append(out.keys, key)
		out.vals = append(out.vals, b)
		return nil
	}
	svc := it.Service.DeepCopy()
	svc.Namespace = o.namespace
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	corev1defaults.SetObjectDefaults_Service(svc)
	fillMeta(&svc.ObjectMeta, now)
	svc.Status = corev1.ServiceStatus{}
	svc.Spec.ClusterIP = ip.String()
	svc.Spec.ClusterIPs = []string{ip.String()}
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	if svc.Spec.IPFamilyPolicy == nil {
		single := corev1.IPFamilyPolicySingleStack
		svc.Spec.IPFamilyPolicy = &single
	}
	// The IPAddress goes first: the apiserver's allocator writes it before
	// the Service.
	if o.phase != phaseObjects {
		if err := add(ipKey(o.prefix, ip.String()), st.networking, ipAddressFor(svc, ip, now)); err != nil {
			return out, err
		}
	} else {
		out.mustExist = ipKey(o.prefix, ip.String())
	}
	if o.phase == phaseIPAddresses {
		return out, nil
	}
	if err := add(serviceKey(o.prefix, o.namespace, svc.Name), st.core, svc); err != nil {
		return out, err
	}
	if it.Slice != nil {
		slice := it.Slice.DeepCopy()
		slice.Namespace = o.namespace
		discoveryv1defaults.SetObjectDefaults_EndpointSlice(slice)
		fillMeta(&slice.ObjectMeta, now)
		slice.Generation = 1 // the endpointslice strategy's PrepareForCreate
		if err := add(sliceKey(o.prefix, o.namespace, slice.Name), st.discovery, slice); err != nil {
			return out, err
		}
	}
	return out, nil
}

// fillMeta sets what the generic registry sets on create and clears what a
// client may not.
func fillMeta(m *metav1.ObjectMeta, now metav1.Time) {
	m.UID = uuid.NewUUID()
	m.CreationTimestamp = now
	m.ResourceVersion = ""
	m.Generation = 0
	m.DeletionTimestamp = nil
	m.DeletionGracePeriodSeconds = nil
	m.ManagedFields = nil
}

// ipAddressFor is the IPAddress kube-apiserver's ClusterIP allocator writes
// for svc (ipallocator.Allocator.createIPAddress): named after the address,
// labelled with its family and the allocator as manager, pointing at the
// Service.
func ipAddressFor(svc *corev1.Service, ip netip.Addr, now metav1.Time) *networkingv1.IPAddress {
	a := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: ip.String(),
			Labels: map[string]string{
				networkingv1.LabelIPAddressFamily: string(corev1.IPv4Protocol),
				networkingv1.LabelManagedBy:       ipallocator.ControllerName,
			},
		},
		Spec: networkingv1.IPAddressSpec{
			ParentRef: &networkingv1.ParentReference{Group: "", Resource: "services", Namespace: svc.Namespace, Name: svc.Name},
		},
	}
	fillMeta(&a.ObjectMeta, now)
	return a
}

// namespaceObject is a Namespace as the apiserver creates one: defaulted
// (the kubernetes.io/metadata.name label), the kubernetes finalizer, Active.
func (st *storage) namespaceObject(ns string, now metav1.Time) ([]byte, error) {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	corev1defaults.SetObjectDefaults_Namespace(n)
	fillMeta(&n.ObjectMeta, now)
	n.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	n.Status.Phase = corev1.NamespaceActive
	return runtime.Encode(st.core, n)
}
