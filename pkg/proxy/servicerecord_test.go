package proxy

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
)

// TestServiceRecord: what an informer's store reads of a record, and that an
// ordinary ClusterIP Service (API defaults filled in) keeps nothing behind the extras
// pointer, which is what makes a record small.
func TestServiceRecord(t *testing.T) {
	plain := makeService("web", func(s *v1.Service) {
		s.UID, s.ResourceVersion = "uid-1", "9"
		s.Spec.SessionAffinity = v1.ServiceAffinityNone
		s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyCluster)
	})
	rec := NewServiceRecord(plain)
	if rec.extras != nil {
		t.Errorf("a plain ClusterIP Service has extras: %+v", *rec.extras)
	}
	m, err := meta.Accessor(rec)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetNamespace() != "ns" || m.GetName() != "web" || m.GetResourceVersion() != "9" || m.GetUID() != "uid-1" {
		t.Errorf("accessor gives %s/%s@%s uid %s", m.GetNamespace(), m.GetName(), m.GetResourceVersion(), m.GetUID())
	}
	if cp := rec.DeepCopyObject().(*ServiceRecord); cp == rec || cp.Name != "web" || &cp.ports[0] != &rec.ports[0] {
		t.Errorf("DeepCopyObject: a new header over the same ports expected")
	}
	// Two records of Services with the same policy share it.
	if other := NewServiceRecord(plain.DeepCopy()); other.internalTrafficPolicy != rec.internalTrafficPolicy {
		t.Errorf("internalTrafficPolicy not shared")
	}
	withIP := plain.DeepCopy()
	withIP.Spec.ExternalIPs = []string{"203.0.113.5"}
	if NewServiceRecord(withIP).extras == nil {
		t.Errorf("a Service with external IPs has no extras")
	}
	if NewServiceRecord(nil) != nil || (*ServiceRecord)(nil).Service() != nil {
		t.Errorf("nil did not stay nil")
	}
}
