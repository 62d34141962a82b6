package ipvs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestHeldBackListBounded: every text of the held-back list is cut to a bound and
// says so, and an object names a bounded number of Services, however long the values
// of the API objects behind it.
func TestHeldBackListBounded(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	var owners []types.NamespacedName
	for i := range 100 {
		owners = append(owners, types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)})
	}
	long := strings.Repeat("é", 40000) // 80,000 bytes, two per character
	e.p.retries[retryKey{kind: retryAddr, text: "192.0.2.1"}] = &retryState{failure: failure{
		layer: heldBackAddress, what: "address " + long, owners: owners, err: errors.New(long)}}
	e.p.publishHeldBack()
	list := e.p.HeldBack()
	if len(list) != 1 {
		t.Fatalf("held back %d objects, want 1", len(list))
	}
	h := list[0]
	for field, s := range map[string]string{"object": h.Object, "error": h.Error} {
		if len(s) > maxHeldBackText+64 || !utf8.ValidString(s) || !strings.HasSuffix(s, "...[truncated: 80000 bytes in all]") &&
			!strings.HasSuffix(s, "...[truncated: 80008 bytes in all]") {
			t.Errorf("%s: %d bytes, valid UTF-8 %v, ends %q", field, len(s), utf8.ValidString(s), s[max(0, len(s)-40):])
		}
	}
	if len(h.Services) != maxHeldBackServices+1 || h.Services[maxHeldBackServices] != "...[truncated: 100 Services in all]" {
		t.Errorf("%d Services listed, the last %q", len(h.Services), h.Services[len(h.Services)-1])
	}
	if got := boundText("short"); got != "short" {
		t.Errorf("boundText(short) = %q", got)
	}
}
