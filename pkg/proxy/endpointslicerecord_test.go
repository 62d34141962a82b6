package proxy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// TestEndpointSliceRecord: what an informer's store and the trackers need of a record,
// and the two ways a record is misused.
func TestEndpointSliceRecord(t *testing.T) {
	slice := makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.1", onNode(thisNode)), endpoint("10.1.0.2", onNode("node-b")))
	slice.ResourceVersion = "7"
	rec := NewEndpointSliceRecord(slice, thisNode)

	// The store keys and versions it through meta.Accessor.
	m, err := meta.Accessor(rec)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetNamespace() != "ns" || m.GetName() != "web-1" || m.GetResourceVersion() != "7" {
		t.Errorf("accessor gives %s/%s@%s, want ns/web-1@7", m.GetNamespace(), m.GetName(), m.GetResourceVersion())
	}
	// A deep copy shares the immutable endpoints.
	if cp := rec.DeepCopyObject().(*EndpointSliceRecord); cp == rec || cp.info != rec.info || cp.Name != rec.Name {
		t.Errorf("DeepCopyObject: a new header over the same endpoints expected")
	}

	ect := NewEndpointsChangeTracker(v1.IPv4Protocol, thisNode)
	if !ect.EndpointSliceUpdate(rec, false) {
		t.Fatal("first delivery changed nothing")
	}
	em := EndpointsMap{}
	em.Update(ect)
	want := "ns/web:http/TCP 10.1.0.1:80 ready serving local\nns/web:http/TCP 10.1.0.2:80 ready serving"
	if diff := cmp.Diff(want, dumpEndpoints(em)); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	// An informer's resync delivers the cached record again: nothing to do.
	if ect.EndpointSliceUpdate(rec, false) || ect.PendingChangeCount() != 0 {
		t.Errorf("the same record again made a change")
	}
	// Locality was decided when the record was made: one made for another node is
	// refused, not programmed with the wrong local endpoints.
	other := NewEndpointSliceRecord(makeSlice("web-1", "web", v4, http80, endpoint("10.1.0.3", onNode(thisNode))), "node-b")
	if ect.EndpointSliceUpdate(other, false) || ect.PendingChangeCount() != 0 {
		t.Errorf("a record made for node-b was taken by node-a's tracker")
	}
	// Slices no proxier programs make records without endpoints; nil stays nil.
	fqdn := NewEndpointSliceRecord(makeSlice("f-1", "f", discovery.AddressTypeFQDN, http80, endpoint("example.com")), thisNode)
	unlabelled := makeSlice("u-1", "u", v4, http80, endpoint("10.1.0.4"))
	unlabelled.Labels = nil
	for _, r := range []*EndpointSliceRecord{fqdn, NewEndpointSliceRecord(unlabelled, thisNode)} {
		if r.info != nil || ect.EndpointSliceUpdate(r, false) {
			t.Errorf("record %s/%s: endpoints %v, or taken by the tracker", r.Namespace, r.Name, r.info)
		}
	}
	if NewEndpointSliceRecord(nil, thisNode) != nil || ect.EndpointSliceUpdate(nil, false) {
		t.Errorf("a nil slice made a record or a change")
	}
}
