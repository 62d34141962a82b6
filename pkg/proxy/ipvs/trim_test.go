package ipvs

// Test address ranges: as in helpers_test.go.

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/config"
)

// decorate adds, to a deep copy of obj, what real objects carry and kube-proxy does
// not read, so that the transform has something to drop.
func decorate(obj any) any {
	meta := func(m *metav1.ObjectMeta) {
		m.UID = "uid-" + "x"
		m.ResourceVersion = "7"
		m.GenerateName = m.Name + "-"
		m.Generation = 2
		m.CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: m.Name, UID: "uid-0"}}
		m.Finalizers = []string{"example.com/f"}
		m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels["app.kubernetes.io/name"] = "x"
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
		m.Annotations["service.kubernetes.io/topology-mode"] = "Auto"
	}
	switch o := obj.(type) {
	case *v1.Service:
		o = o.DeepCopy()
		meta(&o.ObjectMeta)
		o.Spec.Selector = map[string]string{"app": o.Name}
		o.Spec.PublishNotReadyAddresses = true
		o.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
		for i := range o.Spec.Ports {
			o.Spec.Ports[i].TargetPort = intstr.FromString("named")
			o.Spec.Ports[i].AppProtocol = ptr.To("kubernetes.io/h2c")
		}
		for i := range o.Status.LoadBalancer.Ingress {
			o.Status.LoadBalancer.Ingress[i].Hostname = "lb.example.com"
		}
		o.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
		return o
	case *discovery.EndpointSlice:
		o = o.DeepCopy()
		meta(&o.ObjectMeta)
		o.Labels[discovery.LabelManagedBy] = "endpointslice-controller.k8s.io"
		o.Annotations[v1.EndpointsLastChangeTriggerTime] = "2026-12-01T00:00:00Z"
		for i := range o.Endpoints {
			ep := &o.Endpoints[i]
			ep.Hostname = ptr.To("pod")
			ep.TargetRef = &v1.ObjectReference{Kind: "Pod", Name: "pod"}
			ep.DeprecatedTopology = map[string]string{"k": "v"}
			ep.Zone = ptr.To("zone-a")
		}
		for i := range o.Ports {
			o.Ports[i].AppProtocol = ptr.To("http")
		}
		return o
	}
	return obj
}

// trimmed is what the daemon's Node informer caches of obj (a deep copy: the
// transform works in place). Services and slices pass through: e.add hands each over
// as its record, which is what their informers cache.
func trimmed(t *testing.T, obj any) any {
	if n, ok := obj.(*v1.Node); ok {
		obj = n.DeepCopy()
	}
	out, err := config.TrimForCache(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func eventTexts(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-rec.Events:
			out = append(out, ev)
		default:
			slices.Sort(out)
			return out
		}
	}
}

// TestTrimmedObjectsSameState: the proxier builds the same kernel state, reports the
// same Events and holds the same service and endpoint maps from what the informers
// cache as from whole objects, for objects covering every Service feature, hostile
// ones, and the same decorated with every field kube-proxy does not read. Services
// and slices reach the proxier as records either way (e.add), so for them the
// decorated case is what shows that a record leaves out nothing the proxier reads;
// the comparison itself covers the Node's transform.
func TestTrimmedObjectsSameState(t *testing.T) {
	objs := append(packetFlowObjects(), goodObjects()...)
	hinted := func(ip, zone string) discovery.Endpoint {
		ep := endpoint(ip)
		ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: zone}}}
		return ep
	}
	objs = append(objs,
		// Per-Service schedulers, ours and kube-router's.
		makeService("sched", "ours", clusterIP("10.96.3.1"), port("p", v1.ProtocolTCP, 80, 0),
			annotate(proxy.AnnotationScheduler, "sh", proxy.AnnotationSchedulerFlags, "sh-port")),
		makeSlice("sched", "ours", "ours-1", tcp("p", 80), endpoint("10.244.2.100")),
		makeService("sched", "kr", clusterIP("10.96.3.2"), port("p", v1.ProtocolTCP, 80, 0),
			annotate(proxy.AnnotationKubeRouterScheduler, "lc")),
		makeSlice("sched", "kr", "kr-1", tcp("p", 80), endpoint("10.244.2.101")),
		// Topology: zone hints and trafficDistribution, on a node in zone-a.
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{v1.LabelTopologyZone: "zone-a"}}},
		makeService("topo", "close", clusterIP("10.96.3.3"), port("p", v1.ProtocolTCP, 80, 0), func(s *v1.Service) {
			s.Spec.TrafficDistribution = ptr.To(v1.ServiceTrafficDistributionPreferClose)
		}),
		makeSlice("topo", "close", "close-1", tcp("p", 80), hinted("10.244.2.102", "zone-a"), hinted("10.244.2.103", "zone-b")),
	)
	for _, c := range hostileCases() {
		objs = append(objs, c.objs...)
	}
	var decorated []any
	for _, o := range objs {
		decorated = append(decorated, decorate(o))
	}
	v6 := []any{
		makeService("ns", "web6", clusterIP("fd00:96::10"), port("http", v1.ProtocolTCP, 80, 30080), lbIngress("2001:db8::10"), etpLocal(32000)),
		makeSlice("ns", "web6", "web6-1", tcp("http", 8080), endpoint("fd00:244::1:5"), endpoint("fd00:244::2:7", terminating(true))),
		// Dual-stack: the IPv6 cluster IP is only in clusterIPs.
		makeService("ns", "dual", clusterIP("10.96.4.1"), port("p", v1.ProtocolTCP, 80, 0), func(s *v1.Service) {
			s.Spec.ClusterIPs = []string{"10.96.4.1", "fd00:96::41"}
		}),
		makeSlice("ns", "dual", "dual-1", tcp("p", 80), endpoint("fd00:244::2:8")),
	}
	for _, d := range v6 {
		v6 = append(v6, decorate(d))
	}
	for _, tc := range []struct {
		name   string
		family v1.IPFamily
		objs   []any
	}{
		{"IPv4", v1.IPv4Protocol, objs},
		{"IPv4 decorated", v1.IPv4Protocol, decorated},
		{"IPv6", v1.IPv6Protocol, v6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := func(trim bool) (string, []string, *testEnv) {
				rec := events.NewFakeRecorder(1000)
				e := newTestEnv(t, tc.family, func(o *Options) { o.Recorder = rec })
				for _, o := range tc.objs {
					if trim {
						o = trimmed(t, o)
					}
					e.add(o)
				}
				e.p.OnServiceSynced()
				e.p.OnEndpointSlicesSynced()
				e.mustSync()
				e.clock.Step(31 * time.Second)
				e.mustSync()
				return e.ipvs.Dump() + e.ipset.Dump() + e.nl.Dump() + e.iptablesSave(), eventTexts(rec), e
			}
			want, wantEvents, whole := state(false)
			got, gotEvents, cached := state(true)
			if !strings.Contains(want, "-> ") {
				t.Fatalf("nothing programmed:\n%s", want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("kernel state (-whole +trimmed):\n%s", diff)
			}
			if diff := cmp.Diff(wantEvents, gotEvents); diff != "" {
				t.Errorf("Events (-whole +trimmed):\n%s", diff)
			}
			if diff := cmp.Diff(portInputs(whole.p), portInputs(cached.p), cmp.AllowUnexported(proxy.Endpoint{})); diff != "" {
				t.Errorf("service ports and endpoints (-whole +trimmed):\n%s", diff)
			}
		})
	}
}

// portInput is what a proxier holds of one Service port: its info and endpoints.
type portInput struct {
	Info      *proxy.ServicePortInfo
	Endpoints []*proxy.Endpoint
}

func portInputs(p *Proxier) map[proxy.ServicePortName]portInput {
	out := map[proxy.ServicePortName]portInput{}
	for _, ports := range p.svcPorts {
		for _, sp := range ports {
			out[sp.Name] = portInput{Info: sp.Info, Endpoints: p.endpointsChanges.Endpoints(sp.Name)}
		}
	}
	return out
}
