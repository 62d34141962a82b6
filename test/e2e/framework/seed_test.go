//go:build e2e

// TestBulkSeed starts a real etcd and kube-apiserver on 127.0.0.1 (no VM), so
// it is behind the e2e tag like the scenarios that need them, and skips (with
// the reason) when test/e2e/lib/build-tools.sh has not built them yet:
//
//	go test -tags e2e -count=1 -v -run TestBulkSeed ./test/e2e/framework/
//	KPI_SEED_SERVICES=100000 KPI_E2E_SERVICE_CIDR=10.96.0.0/12 go test -tags e2e -count=1 -v -timeout 60m -run TestBulkSeed ./test/e2e/framework/
package framework

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

const seedTestNS = "seed-test" // not created through the API: etcd-seed writes it

// seedTestEndpoints is what TestBulkSeed seeds for Service i: 4 endpoints, the
// k-th of the run at 10.(128+k/64000).(k/250%256).(1+k%250).
func seedTestEndpoints(i int) []Endpoint {
	eps := make([]Endpoint, 4)
	for j := range eps {
		k := i*len(eps) + j
		eps[j] = Endpoint{PodName: fmt.Sprintf("s-%d-%d", i, j), IP: fmt.Sprintf("10.%d.%d.%d", 128+k/64000, k/250%256, 1+k%250)}
	}
	return eps
}

func TestBulkSeed(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(root, "test/e2e/lib/build-tools.sh"), "--check").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: TestBulkSeed needs the cached etcd and kube-apiserver, which are not built (run test/e2e/lib/build-tools.sh; 10-25 min cold): %s", strings.TrimSpace(string(out)))
	}
	n := 2000
	if v := os.Getenv("KPI_SEED_SERVICES"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			t.Fatalf("KPI_SEED_SERVICES=%q: want a number of at least 10", v)
		}
	}
	if cidr := netip.MustParsePrefix(ServiceRangeIPv4()); n > 1<<(32-cidr.Bits())-1000 {
		t.Fatalf("%d Services do not fit the Service range %s: set KPI_E2E_SERVICE_CIDR=10.96.0.0/12", n, cidr)
	}
	ctx := context.Background()
	cp, err := StartControlPlane(ctx, root, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	c, err := cp.BulkClient()
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	svcs, err := BulkSeed(ctx, cp, c, seedTestNS, "s", n, seedTestEndpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SEED: %d Services x 4 endpoints seeded and listed back through the API in %s", n, time.Since(start).Round(time.Millisecond))

	seeded := checkSeeded(t, svcs, n)
	checkSeededNamespace(t, ctx, c)
	checkSeededLikeCreated(t, ctx, cp, c, svcs[0], seeded)
	checkAllocatorKnowsSeeded(t, ctx, c, svcs[1], seeded)
	checkSeededSliceUpdate(t, ctx, c, svcs[2])
	// The repair loop deletes an IPAddress whose Service it has not seen 60 s
	// after the IPAddress's creation: check them all past that.
	time.Sleep(time.Until(start.Add(65 * time.Second)))
	checkNoRepairEvents(t, ctx, c, svcs)
	checkSeededIPAddresses(t, ctx, c, svcs)
	checkSeededServiceDelete(t, ctx, c, svcs[3])
}

// checkSeeded checks the listed objects against what was asked for and
// returns the seeded ClusterIPs.
func checkSeeded(t *testing.T, svcs []BulkService, n int) map[string]bool {
	t.Helper()
	cidr := netip.MustParsePrefix(ServiceRangeIPv4())
	kubernetesIP := cidr.Masked().Addr().Next().String()
	ips := map[string]bool{}
	for i, b := range svcs {
		svc, slice := b.Service, b.Slice
		want := fmt.Sprintf("s-%d", i)
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		switch {
		case svc.Name != want || slice.Labels[discoveryv1.LabelServiceName] != want:
			t.Fatalf("result %d is Service %s with the slice of %s, want %s", i, svc.Name, slice.Labels[discoveryv1.LabelServiceName], want)
		case err != nil || !cidr.Contains(ip) || svc.Spec.ClusterIP == kubernetesIP:
			t.Fatalf("Service %s has ClusterIP %q: want one of %s other than the kubernetes Service's %s", want, svc.Spec.ClusterIP, cidr, kubernetesIP)
		case ips[svc.Spec.ClusterIP]:
			t.Fatalf("ClusterIP %s given twice (again to %s)", svc.Spec.ClusterIP, want)
		case len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].Name != "http" || svc.Spec.Type != corev1.ServiceTypeClusterIP:
			t.Fatalf("Service %s spec %+v", want, svc.Spec)
		}
		ips[svc.Spec.ClusterIP] = true
		var got []string
		for _, e := range slice.Endpoints {
			if e.Conditions.Ready == nil || !*e.Conditions.Ready {
				t.Fatalf("slice %s: endpoint %v not ready", slice.Name, e.Addresses)
			}
			got = append(got, e.Addresses...)
		}
		var wantIPs []string
		for _, e := range seedTestEndpoints(i) {
			wantIPs = append(wantIPs, e.IP)
		}
		if !reflect.DeepEqual(got, wantIPs) || len(slice.Ports) != 1 || *slice.Ports[0].Port != 8080 {
			t.Fatalf("slice %s: endpoints %v ports %v, want %v on 8080", slice.Name, got, slice.Ports, wantIPs)
		}
	}
	return ips
}

// checkSeededNamespace: the namespace etcd-seed wrote is as the apiserver
// would have created it.
func checkSeededNamespace(t *testing.T, ctx context.Context, c kubernetes.Interface) {
	t.Helper()
	ns, err := c.CoreV1().Namespaces().Get(ctx, seedTestNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Phase != corev1.NamespaceActive || ns.Labels[corev1.LabelMetadataName] != seedTestNS || len(ns.Spec.Finalizers) != 1 || ns.UID == "" {
		t.Fatalf("seeded namespace %+v", ns)
	}
}

// checkSeededLikeCreated compares the first seeded Service and slice with
// ones created through the API from the same request bodies: equal but for
// names, uid, resourceVersion, creationTimestamp, managedFields (the API
// records the client's fields; etcd-seed writes none) and the ClusterIP. It
// also compares what etcd holds for both: the same "k8s\x00" protobuf
// envelope with the same apiVersion and kind.
func checkSeededLikeCreated(t *testing.T, ctx context.Context, cp *ControlPlane, c kubernetes.Interface, first BulkService, seeded map[string]bool) {
	t.Helper()
	ref, err := CreateService(ctx, c, seedTestNS, "ref", corev1.ServiceTypeClusterIP, ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if seeded[ref.Spec.ClusterIP] {
		t.Fatalf("a Service created after the seeding got the seeded ClusterIP %s", ref.Spec.ClusterIP)
	}
	refSlice, err := CreateEndpointSlice(ctx, c, ref, seedTestEndpoints(0)...)
	if err != nil {
		t.Fatal(err)
	}
	svc, slice := first.Service.DeepCopy(), first.Slice.DeepCopy()
	for _, m := range []*metav1.ObjectMeta{&svc.ObjectMeta, &slice.ObjectMeta, &ref.ObjectMeta, &refSlice.ObjectMeta} {
		m.UID, m.ResourceVersion, m.CreationTimestamp, m.ManagedFields = "", "", metav1.Time{}, nil
	}
	svc.Name, svc.Spec.Selector["app"] = ref.Name, ref.Name
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ref.Spec.ClusterIP, ref.Spec.ClusterIPs
	slice.Name, slice.Labels[discoveryv1.LabelServiceName] = refSlice.Name, ref.Name
	if !reflect.DeepEqual(svc, ref) {
		t.Fatalf("seeded Service differs from one created through the API:\n seeded  %+v\n created %+v", svc, ref)
	}
	if !reflect.DeepEqual(slice, refSlice) {
		t.Fatalf("seeded EndpointSlice differs from one created through the API:\n seeded  %+v\n created %+v", slice, refSlice)
	}
	for _, keys := range [][2]string{
		{"/registry/services/specs/" + seedTestNS + "/" + first.Service.Name, "/registry/services/specs/" + seedTestNS + "/ref"},
		{"/registry/endpointslices/" + seedTestNS + "/" + first.Slice.Name, "/registry/endpointslices/" + seedTestNS + "/" + refSlice.Name},
		{"/registry/ipaddresses/" + first.Service.Spec.ClusterIP, "/registry/ipaddresses/" + ref.Spec.ClusterIP},
	} {
		s, r := etcdEnvelope(t, cp, keys[0]), etcdEnvelope(t, cp, keys[1])
		if s != r {
			t.Fatalf("etcd holds %s as %s, but %s (created through the API) as %s", keys[0], s, keys[1], r)
		}
		t.Logf("etcd: %s and %s both %s", keys[0], keys[1], s)
	}
}

// etcdEnvelope reads key through etcd's JSON gateway and describes its value:
// the storage prefix and the runtime.Unknown's apiVersion and kind.
func etcdEnvelope(t *testing.T, cp *ControlPlane, key string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))})
	resp, err := http.Post(cp.EtcdURL+"/v3/kv/range", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Kvs []struct {
			Value []byte `json:"value"` // base64 in the gateway's JSON
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("etcd range %s: %v (%d values)", key, err, len(r.Kvs))
	}
	v := r.Kvs[0].Value
	magic := []byte("k8s\x00")
	if !bytes.HasPrefix(v, magic) {
		return fmt.Sprintf("not protobuf (starts %q)", v[:min(len(v), 8)])
	}
	var u runtime.Unknown
	if err := u.Unmarshal(v[len(magic):]); err != nil {
		t.Fatalf("etcd %s: not a runtime.Unknown: %v", key, err)
	}
	return fmt.Sprintf("protobuf %s %s (content type %q)", u.APIVersion, u.Kind, u.ContentType)
}

// checkSeededIPAddresses: every seeded ClusterIP has the IPAddress the
// allocator would have written.
func checkSeededIPAddresses(t *testing.T, ctx context.Context, c kubernetes.Interface, svcs []BulkService) {
	t.Helper()
	byName := map[string]networkingv1.IPAddress{}
	for cont := ""; ; {
		l, err := c.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{Limit: 5000, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range l.Items {
			byName[a.Name] = a
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	for _, b := range svcs {
		a, ok := byName[b.Service.Spec.ClusterIP]
		ref := a.Spec.ParentRef
		if !ok || a.Labels[networkingv1.LabelManagedBy] != "ipallocator.k8s.io" || a.Labels[networkingv1.LabelIPAddressFamily] != "IPv4" ||
			ref == nil || ref.Group != "" || ref.Resource != "services" || ref.Namespace != seedTestNS || ref.Name != b.Service.Name {
			t.Fatalf("IPAddress of %s (%s): found %v, %+v", b.Service.Name, b.Service.Spec.ClusterIP, ok, a)
		}
	}
}

// checkAllocatorKnowsSeeded: asking for a seeded ClusterIP is refused, and
// new Services get other addresses.
func checkAllocatorKnowsSeeded(t *testing.T, ctx context.Context, c kubernetes.Interface, b BulkService, seeded map[string]bool) {
	t.Helper()
	_, err := CreateServiceWith(ctx, c, seedTestNS, "wants-seeded-ip", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ClusterIP = b.Service.Spec.ClusterIP
	}, ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if err == nil || !strings.Contains(err.Error(), "already allocated") {
		t.Fatalf("creating a Service with the seeded ClusterIP %s: %v, want already allocated", b.Service.Spec.ClusterIP, err)
	}
	for k := 0; k < 20; k++ {
		svc, err := CreateService(ctx, c, seedTestNS, fmt.Sprintf("new-%d", k), corev1.ServiceTypeClusterIP, ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
		if err != nil {
			t.Fatal(err)
		}
		if seeded[svc.Spec.ClusterIP] {
			t.Fatalf("new Service %s got the seeded ClusterIP %s", svc.Name, svc.Spec.ClusterIP)
		}
	}
}

// checkSeededSliceUpdate updates a seeded slice as returned (no Get).
func checkSeededSliceUpdate(t *testing.T, ctx context.Context, c kubernetes.Interface, b BulkService) {
	t.Helper()
	slice := b.Slice.DeepCopy()
	slice.Endpoints[0].Addresses = []string{"10.127.0.1"}
	if _, err := c.DiscoveryV1().EndpointSlices(seedTestNS).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating seeded slice %s: %v", slice.Name, err)
	}
	got, err := c.DiscoveryV1().EndpointSlices(seedTestNS).Get(ctx, slice.Name, metav1.GetOptions{})
	if err != nil || got.Endpoints[0].Addresses[0] != "10.127.0.1" || got.Generation != 2 {
		t.Fatalf("seeded slice after the update: %v %+v", err, got)
	}
}

// checkSeededServiceDelete deletes a seeded Service: its IPAddress goes and
// its address can be asked for again.
func checkSeededServiceDelete(t *testing.T, ctx context.Context, c kubernetes.Interface, b BulkService) {
	t.Helper()
	ip := b.Service.Spec.ClusterIP
	if err := c.CoreV1().Services(seedTestNS).Delete(ctx, b.Service.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting seeded Service %s: %v", b.Service.Name, err)
	}
	err := Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		if _, err := c.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("IPAddress %s of the deleted Service still there (%v)", ip, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := CreateServiceWith(ctx, c, seedTestNS, "reuses-ip", corev1.ServiceTypeClusterIP, func(s *corev1.Service) {
		s.Spec.ClusterIP = ip
	}, ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	if err != nil || svc.Spec.ClusterIP != ip {
		t.Fatalf("the deleted seeded Service's ClusterIP %s is not free again: %v", ip, err)
	}
}

// checkNoRepairEvents: the apiserver's ClusterIP repair loop, which checks
// every Service against its IPAddress and back, found nothing wrong with a
// seeded Service or IPAddress. One report is let through (logged): a Service
// "not allocated" because the loop's IPAddress informer had not seen its
// IPAddress yet. The apiserver's watch cache closes watchers that fall behind
// a burst of writes, its own informers among them, which then catch up by
// relisting; the loop's attempt to re-create the IPAddress fails (it exists)
// and it retries later. It happens to Services created through the API as
// well (the allocator writes the IPAddress a moment before the Service).
func checkNoRepairEvents(t *testing.T, ctx context.Context, c kubernetes.Interface, svcs []BulkService) {
	t.Helper()
	seeded := map[string]bool{}
	for _, b := range svcs {
		seeded[b.Service.Name], seeded[b.Service.Spec.ClusterIP] = true, true
	}
	l, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notYet := 0
	for _, e := range l.Items {
		if e.Type != corev1.EventTypeWarning || !strings.HasPrefix(e.Reason, "ClusterIP") && !strings.HasPrefix(e.Reason, "IPAddress") && e.Reason != "UnknownError" {
			continue
		}
		switch {
		case !seeded[e.InvolvedObject.Name]:
			t.Logf("repair event about an object created through the API: %s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		case e.Reason == "ClusterIPNotAllocated" && strings.HasSuffix(e.Message, "is not allocated; repairing"):
			notYet++
		default:
			t.Errorf("repair event %s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	}
	t.Logf("the repair loop saw %d of the %d seeded Services before their IPAddress", notYet, len(svcs))
}
