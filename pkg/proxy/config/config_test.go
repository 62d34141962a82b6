package config

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

// recorder implements all three handler interfaces and logs each call as a line.
type recorder struct {
	mu     sync.Mutex
	events []string
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 100)} }

func (r *recorder) record(format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	r.notify <- struct{}{}
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// waitFor waits until n events have been recorded in total.
func (r *recorder) waitFor(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for len(r.got()) < n {
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("timed out waiting for %d events, have %q", n, r.got())
		}
	}
	return r.got()
}

func (r *recorder) OnServiceAdd(s *proxy.ServiceRecord) {
	r.record("add service %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnServiceUpdate(o, s *proxy.ServiceRecord) {
	r.record("update service %s/%s %s->%s", s.Namespace, s.Name, o.Service().Spec.ClusterIP, s.Service().Spec.ClusterIP)
}
func (r *recorder) OnServiceDelete(s *proxy.ServiceRecord) {
	r.record("delete service %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnServiceSynced() { r.record("services synced") }
func (r *recorder) OnEndpointSliceAdd(s *proxy.EndpointSliceRecord) {
	r.record("add slice %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSliceUpdate(o, s *proxy.EndpointSliceRecord) {
	r.record("update slice %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSliceDelete(s *proxy.EndpointSliceRecord) {
	r.record("delete slice %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSlicesSynced()    { r.record("slices synced") }
func (r *recorder) OnNodeAdd(n *v1.Node)       { r.record("add node %s", n.Name) }
func (r *recorder) OnNodeUpdate(o, n *v1.Node) { r.record("update node %s", n.Name) }
func (r *recorder) OnNodeDelete(n *v1.Node)    { r.record("delete node %s", n.Name) }
func (r *recorder) OnNodeSynced()              { r.record("node synced") }

func (r *recorder) wantNone(t *testing.T) {
	t.Helper()
	if got := r.got(); len(got) != 0 {
		t.Fatalf("unexpected events %q", got)
	}
}

func service(name, clusterIP string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       v1.ServiceSpec{ClusterIP: clusterIP},
	}
}

func slice(name string) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: "svc"}},
		AddressType: discovery.AddressTypeIPv4,
	}
}

func TestServiceConfigFansOutAndSyncs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(service("existing", "10.0.0.1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	cfg := NewServiceConfig(ctx, factory.Core().V1().Services(), 0)
	a, b := newRecorder(), newRecorder()
	cfg.RegisterEventHandler(a)
	cfg.RegisterEventHandler(b)
	factory.Start(ctx.Done())
	go cfg.Run(ctx.Done())

	want := []string{"add service ns/existing", "services synced"}
	for _, r := range []*recorder{a, b} {
		if diff := cmp.Diff(want, r.waitFor(t, 2)); diff != "" {
			t.Fatalf("initial events (-want +got):\n%s", diff)
		}
	}

	svcs := client.CoreV1().Services("ns")
	if _, err := svcs.Create(ctx, service("new", "10.0.0.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitFor(t, 3)
	if _, err := svcs.Update(ctx, service("new", "10.0.0.3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitFor(t, 4)
	if err := svcs.Delete(ctx, "new", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "add service ns/new", "update service ns/new 10.0.0.2->10.0.0.3", "delete service ns/new")
	for _, r := range []*recorder{a, b} {
		if diff := cmp.Diff(want, r.waitFor(t, 5)); diff != "" {
			t.Fatalf("events (-want +got):\n%s", diff)
		}
	}
}

func TestEndpointSliceConfigFansOutAndSyncs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	cfg := NewEndpointSliceConfig(ctx, factory.Discovery().V1().EndpointSlices(), 0, "node-a")
	r := newRecorder()
	cfg.RegisterEventHandler(r)
	factory.Start(ctx.Done())
	go cfg.Run(ctx.Done())
	r.waitFor(t, 1)

	slices := client.DiscoveryV1().EndpointSlices("ns")
	if _, err := slices.Create(ctx, slice("s1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, 2)
	// The informer caches records, not the objects.
	cached := factory.Discovery().V1().EndpointSlices().Informer().GetStore().List()
	if len(cached) != 1 {
		t.Fatalf("informer caches %d objects, want 1", len(cached))
	}
	if rec, ok := cached[0].(*proxy.EndpointSliceRecord); !ok || rec.Name != "s1" || rec.Service != "svc" {
		t.Fatalf("informer caches %#v, want the record of ns/s1 for Service svc", cached[0])
	}
	updated := slice("s1")
	updated.Endpoints = []discovery.Endpoint{{Addresses: []string{"10.1.0.1"}}}
	if _, err := slices.Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, 3)
	if err := slices.Delete(ctx, "s1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"slices synced", "add slice ns/s1", "update slice ns/s1", "delete slice ns/s1"}
	if diff := cmp.Diff(want, r.waitFor(t, 4)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

// TestEndpointSliceConfigOnStartedInformer: an informer that started before the
// config was made keeps whole objects in its cache; the handlers still get records.
func TestEndpointSliceConfigOnStartedInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(slice("s1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Discovery().V1().EndpointSlices()
	informer.Informer()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	cfg := NewEndpointSliceConfig(ctx, informer, 0, "node-a")
	r := newRecorder()
	cfg.RegisterEventHandler(r)
	go cfg.Run(ctx.Done())
	want := []string{"add slice ns/s1", "slices synced"}
	if diff := cmp.Diff(want, r.waitFor(t, 2)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestNodeConfigFansOutAndSyncs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	client := fake.NewClientset(node)
	factory := informers.NewSharedInformerFactory(client, 0)
	cfg := NewNodeConfig(ctx, factory.Core().V1().Nodes(), 0)
	r := newRecorder()
	cfg.RegisterEventHandler(r)
	factory.Start(ctx.Done())
	go cfg.Run(ctx.Done())
	r.waitFor(t, 2)

	relabelled := node.DeepCopy()
	relabelled.Labels = map[string]string{v1.LabelTopologyZone: "zone-b"}
	if _, err := client.CoreV1().Nodes().Update(ctx, relabelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, 3)
	if err := client.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"add node node-a", "node synced", "update node node-a", "delete node node-a"}
	if diff := cmp.Diff(want, r.waitFor(t, 4)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

// TestRunWithoutSyncNeverNotifies: if the stop channel closes before the informer
// ever syncs, no handler hears "synced" (a proxier must not sync on partial state).
func TestRunWithoutSyncNeverNotifies(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	cfg := NewServiceConfig(ctx, factory.Core().V1().Services(), 0)
	r := newRecorder()
	cfg.RegisterEventHandler(r)
	// The factory is never started, so the informer never syncs.
	done := make(chan struct{})
	go func() { cfg.Run(ctx.Done()); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after stop")
	}
	r.wantNone(t)
}

// The handle* functions are what the informer calls; these tests feed them the odd
// objects an informer can deliver.

func TestTombstonesAreUnwrapped(t *testing.T) {
	ctx := context.Background()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	r := newRecorder()

	sc := NewServiceConfig(ctx, factory.Core().V1().Services(), 0)
	sc.RegisterEventHandler(r)
	sc.handleDelete(cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: service("gone", "10.0.0.9")})

	ec := NewEndpointSliceConfig(ctx, factory.Discovery().V1().EndpointSlices(), 0, "node-a")
	ec.RegisterEventHandler(r)
	ec.handleDelete(cache.DeletedFinalStateUnknown{Key: "ns/gone-abc", Obj: slice("gone-abc")})

	nc := NewNodeConfig(ctx, factory.Core().V1().Nodes(), 0)
	nc.RegisterEventHandler(r)
	nc.handleDelete(cache.DeletedFinalStateUnknown{Key: "node-a", Obj: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}})

	want := []string{"delete service ns/gone", "delete slice ns/gone-abc", "delete node node-a"}
	if diff := cmp.Diff(want, r.got()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestWrongObjectTypesAreIgnored(t *testing.T) {
	ctx := context.Background()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	r := newRecorder()
	sc := NewServiceConfig(ctx, factory.Core().V1().Services(), 0)
	sc.RegisterEventHandler(r)
	ec := NewEndpointSliceConfig(ctx, factory.Discovery().V1().EndpointSlices(), 0, "node-a")
	ec.RegisterEventHandler(r)
	nc := NewNodeConfig(ctx, factory.Core().V1().Nodes(), 0)
	nc.RegisterEventHandler(r)

	bad := []any{
		nil,
		"a string",
		(*v1.Service)(nil),
		(*discovery.EndpointSlice)(nil),
		(*v1.Node)(nil),
		&v1.Pod{},
		cache.DeletedFinalStateUnknown{Key: "x", Obj: &v1.Pod{}},
		cache.DeletedFinalStateUnknown{Key: "x", Obj: nil},
		cache.DeletedFinalStateUnknown{Key: "x", Obj: (*v1.Service)(nil)},
	}
	for _, obj := range bad {
		sc.handleAdd(obj)
		sc.handleUpdate(obj, obj)
		sc.handleUpdate(service("ok", "10.0.0.1"), obj)
		sc.handleUpdate(obj, service("ok", "10.0.0.1"))
		sc.handleDelete(obj)
		ec.handleAdd(obj)
		ec.handleUpdate(obj, obj)
		ec.handleUpdate(slice("ok"), obj)
		ec.handleDelete(obj)
		nc.handleAdd(obj)
		nc.handleUpdate(obj, obj)
		nc.handleDelete(obj)
	}
	// A Service delivered to the slice and node configs is a wrong type there too.
	ec.handleAdd(service("cross", "10.0.0.1"))
	nc.handleAdd(service("cross", "10.0.0.1"))
	sc.handleAdd(slice("cross"))
	r.wantNone(t)
}

// TestListsStartedBeforeRun: the daemon starts the Service and EndpointSlice lists
// before it builds the proxier. Objects that arrive before Run (before any handler
// listens) are cached as records and handed to the handlers as adds when Run starts,
// before the synced call, and events after that flow as usual.
func TestListsStartedBeforeRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(service("early", "10.0.0.1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	cfg := NewServiceConfig(ctx, factory.Core().V1().Services(), 0)
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer %v did not sync", typ)
		}
	}
	if _, err := client.CoreV1().Services("ns").Create(ctx, service("while-building", "10.0.0.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return len(factory.Core().V1().Services().Informer().GetStore().List()) == 2, nil
	})
	if err != nil {
		t.Fatal("the informer did not cache the second Service before Run")
	}
	for _, o := range factory.Core().V1().Services().Informer().GetStore().List() {
		if _, ok := o.(*proxy.ServiceRecord); !ok {
			t.Fatalf("the informer caches %T, want *proxy.ServiceRecord", o)
		}
	}

	r := newRecorder()
	cfg.RegisterEventHandler(r)
	go cfg.Run(ctx.Done())
	got := r.waitFor(t, 3)
	adds := slices.Clone(got[:2])
	slices.Sort(adds)
	if diff := cmp.Diff([]string{"add service ns/early", "add service ns/while-building"}, adds); diff != "" || got[2] != "services synced" {
		t.Fatalf("events at Run: %v, want both Services added, then synced", got)
	}
	if err := client.CoreV1().Services("ns").Delete(ctx, "early", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := r.waitFor(t, 4); got[3] != "delete service ns/early" {
		t.Fatalf("after Run: %v, want the delete", got)
	}
}
