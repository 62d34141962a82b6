package ipset

// Test addresses: 10.0.0.0/8 members.

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSize(t *testing.T) {
	for _, c := range []struct {
		count, current    int
		maxElem, hashSize int
	}{
		{0, 0, 65536, 1024},
		{1000, 0, 65536, 1024},
		{65536, 0, 65536, 16384},     // fits exactly: upstream's default stays
		{65536, 65536, 65536, 16384}, // an adopted upstream set is kept
		{65537, 65536, 262144, 16384},
		{100000, 0, 262144, 32768},
		{100000, 262144, 262144, 32768},
		{10, 262144, 262144, 1024}, // never lowered
		{262145, 262144, 1048576, 65536},
		{1 << 24, 0, 1 << 25, maxHashSize}, // bucket count capped
	} {
		m, h := Size(c.count, c.current)
		if m != c.maxElem || h != c.hashSize {
			t.Errorf("Size(%d, %d) = %d, %d; want %d, %d", c.count, c.current, m, h, c.maxElem, c.hashSize)
		}
		if m < c.count {
			t.Errorf("Size(%d, %d): maxelem %d does not hold them", c.count, c.current, m)
		}
	}
}

func TestSizedAndNeedsResize(t *testing.T) {
	want := &Set{Name: "KUBE-CLUSTER-IP", Type: HashIPPort, Family: FamilyInet}
	have := &Set{Name: "KUBE-CLUSTER-IP", Type: HashIPPort, Family: FamilyInet, HashSize: 1024, MaxElem: 65536}
	if s := Sized(want, have, 50000); s.MaxElem != 65536 || NeedsResize(have, s) {
		t.Errorf("50k members in an upstream-made set: %+v, NeedsResize %v; want it kept", s, NeedsResize(have, s))
	}
	s := Sized(want, have, 100000)
	if s.MaxElem != 262144 || !NeedsResize(have, s) {
		t.Errorf("100k members: %+v, NeedsResize %v; want maxelem 262144 and a resize", s, NeedsResize(have, s))
	}
	if want.MaxElem != 0 {
		t.Error("Sized changed its argument")
	}
	// Once resized, the next sync keeps it.
	grown := *have
	grown.MaxElem = 262144
	if s := Sized(want, &grown, 100000); NeedsResize(&grown, s) || NeedsReplace(&grown, s) {
		t.Errorf("after the resize: %+v needs another change", s)
	}
	// A type change is a replacement, never a resize.
	other := &Set{Name: "KUBE-CLUSTER-IP", Type: HashIP, Family: FamilyInet, MaxElem: 65536}
	if s := Sized(want, other, 100000); NeedsResize(other, s) || !NeedsReplace(other, s) {
		t.Errorf("wrong type: NeedsResize %v NeedsReplace %v; want false, true", NeedsResize(other, s), NeedsReplace(other, s))
	}
	bm := &Set{Name: "KUBE-NODE-PORT-TCP", Type: BitmapPort}
	if s := Sized(bm, nil, 100000); *s != *bm || NeedsResize(&Set{Name: bm.Name, Type: BitmapPort, PortMax: 65535}, s) {
		t.Errorf("bitmap: %+v", s)
	}
}

func TestResizeBatch(t *testing.T) {
	tx := Resize(&Set{Name: "KUBE-LOOP-BACK", Type: HashIPPortIP, Family: FamilyInet, HashSize: 32768, MaxElem: 262144},
		[]string{"10.0.0.1,tcp:80,10.0.0.1"})
	temp := TempName("KUBE-LOOP-BACK")
	want := fmt.Sprintf(`destroy %[1]s
create %[1]s hash:ip,port,ip family inet hashsize 32768 maxelem 262144
add %[1]s 10.0.0.1,tcp:80,10.0.0.1
swap %[1]s KUBE-LOOP-BACK
destroy %[1]s
`, temp)
	if diff := cmp.Diff(want, tx.String()); diff != "" {
		t.Errorf("Resize (-want +got):\n%s", diff)
	}
}

// checkResize grows a set a rule references past 65,536 members: the plain
// add fails at the ceiling, Resize brings every member in, keeps the
// reference and leaves no temporary set. refs tells the kernel (or the Fake)
// that a rule uses the set.
func checkResize(t *testing.T, ips Interface, reference func(set string)) {
	t.Helper()
	ctx := context.Background()
	const name = "KUBE-CLUSTER-IP"
	entries := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("10.%d.%d.%d,tcp:80", i>>16&255, i>>8&255, i&255)
		}
		return out
	}
	want := &Set{Name: name, Type: HashIPPort, Family: FamilyInet}
	first := Sized(want, nil, 60000)
	tx := &Transaction{}
	tx.Create(first)
	for _, e := range entries(60000) {
		tx.Add(name, e)
	}
	if err := ips.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	reference(name)
	// The ceiling is real: upstream's sizing cannot take 100k.
	over := &Transaction{}
	for _, e := range entries(100000)[60000:] {
		over.Add(name, e)
	}
	if err := ips.Apply(ctx, over); !IsSetFull(err) {
		t.Fatalf("adding past maxelem 65536 = %v, want ErrSetFull", err)
	}
	sets, err := ips.ListSets(ctx)
	if err != nil || len(sets) != 1 {
		t.Fatalf("ListSets = %v, %v", sets, err)
	}
	have := sets[0]
	grown := Sized(want, have, 100000)
	if !NeedsResize(have, grown) {
		t.Fatalf("NeedsResize(%+v, %+v) = false", have, grown)
	}
	if err := ips.Apply(ctx, Resize(grown, entries(100000))); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	sets, err = ips.ListSets(ctx)
	if err != nil || len(sets) != 1 || sets[0].Name != name || sets[0].MaxElem != 262144 {
		t.Fatalf("after the resize ListSets = %+v, %v; want only %s with maxelem 262144", sets, err, name)
	}
	got, err := ips.ListEntries(ctx, name)
	if err != nil || len(got) != 100000 {
		t.Fatalf("after the resize %s holds %d members (%v), want 100000", name, len(got), err)
	}
	// The next sync keeps it, and the set is still the one the rule uses.
	if s := Sized(want, sets[0], 100000); NeedsResize(sets[0], s) || NeedsReplace(sets[0], s) {
		t.Errorf("the resized set needs another change: %+v", s)
	}
	destroy := &Transaction{}
	destroy.Destroy(name)
	if err := ips.Apply(ctx, destroy); !IsInUse(err) {
		t.Errorf("destroying the resized set = %v, want ErrSetInUse (the rule references it)", err)
	}
}

func TestFakeResize(t *testing.T) {
	f := NewFake()
	checkResize(t, f, func(set string) { f.SetReferences(set, 1) })
}
