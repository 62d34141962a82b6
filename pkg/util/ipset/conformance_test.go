package ipset

// Test addresses: 10.0.0.0/8 and fd00::/8 (documentation-style private ranges);
// they only ever exist inside the test's own network namespace.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// step is one Apply and the error it must return (kind and failing op index).
type step struct {
	build     func(tx *Transaction)
	wantKind  error
	wantIndex int
}

// scenario runs the same steps against the Fake and the real kernel; both must
// end in the same dump. reference names a set an iptables rule uses before the
// steps run.
type scenario struct {
	name      string
	reference string
	// since is the first kernel release ("6.3") that behaves as the scenario
	// says (and as the Fake does); an older kernel does not run it.
	since string
	steps []step
	want  string
}

var (
	setIP     = &Set{Name: "T-IP", Type: HashIP, Family: FamilyInet}
	setIP6    = &Set{Name: "T-IP6", Type: HashIP, Family: FamilyInet6}
	setIPPort = &Set{Name: "T-IPPORT", Type: HashIPPort, Family: FamilyInet}
	setIPP6   = &Set{Name: "T-IPPORT6", Type: HashIPPort, Family: FamilyInet6}
	setIPPIP  = &Set{Name: "T-IPPORTIP", Type: HashIPPortIP, Family: FamilyInet}
	setIPPIP6 = &Set{Name: "T-IPPORTIP6", Type: HashIPPortIP, Family: FamilyInet6}
	setIPPN   = &Set{Name: "T-IPPORTNET", Type: HashIPPortNet, Family: FamilyInet}
	setIPPN6  = &Set{Name: "T-IPPORTNET6", Type: HashIPPortNet, Family: FamilyInet6}
	setPorts  = &Set{Name: "T-PORTS", Type: BitmapPort, PortMin: 0, PortMax: 65535}
	setSmall  = &Set{Name: "T-SMALL", Type: HashIP, Family: FamilyInet, MaxElem: 2}
	setRange  = &Set{Name: "T-RANGE", Type: BitmapPort, PortMin: 30000, PortMax: 32767}
)

func ok(build func(tx *Transaction)) step { return step{build: build, wantIndex: -1} }

var scenarios = []scenario{
	{
		name: "every type, both families, canonical forms",
		steps: []step{ok(func(tx *Transaction) {
			for _, s := range []*Set{setIP, setIP6, setIPPort, setIPP6, setIPPIP, setIPPIP6, setIPPN, setIPPN6, setPorts} {
				tx.Create(s)
			}
			tx.Add("T-IP", "10.0.0.1")
			tx.Add("T-IP6", "FD00:0:0::1")
			tx.Add("T-IPPORT", "10.0.0.1,TCP:80")
			tx.Add("T-IPPORT", "10.0.0.1,udp:53")
			tx.Add("T-IPPORT", "10.0.0.1,sctp:9")
			tx.Add("T-IPPORT6", "fd00::1,tcp:443")
			tx.Add("T-IPPORTIP", "10.0.0.2,tcp:80,10.0.0.2")
			tx.Add("T-IPPORTIP6", "fd00::2,udp:53,fd00::2")
			tx.Add("T-IPPORTNET", "10.0.0.3,tcp:80,10.1.2.3/8")
			tx.Add("T-IPPORTNET", "10.0.0.3,tcp:80,10.9.9.9/32")
			tx.Add("T-IPPORTNET6", "fd00::3,tcp:80,fd00:1::5/48")
			tx.Add("T-PORTS", "30080")
			tx.Add("T-PORTS", "0")
			tx.Add("T-PORTS", "65535")
		})},
		want: `create T-IP hash:ip family inet hashsize 1024 maxelem 65536
add T-IP 10.0.0.1
create T-IP6 hash:ip family inet6 hashsize 1024 maxelem 65536
add T-IP6 fd00::1
create T-IPPORT hash:ip,port family inet hashsize 1024 maxelem 65536
add T-IPPORT 10.0.0.1,sctp:9
add T-IPPORT 10.0.0.1,tcp:80
add T-IPPORT 10.0.0.1,udp:53
create T-IPPORT6 hash:ip,port family inet6 hashsize 1024 maxelem 65536
add T-IPPORT6 fd00::1,tcp:443
create T-IPPORTIP hash:ip,port,ip family inet hashsize 1024 maxelem 65536
add T-IPPORTIP 10.0.0.2,tcp:80,10.0.0.2
create T-IPPORTIP6 hash:ip,port,ip family inet6 hashsize 1024 maxelem 65536
add T-IPPORTIP6 fd00::2,udp:53,fd00::2
create T-IPPORTNET hash:ip,port,net family inet hashsize 1024 maxelem 65536
add T-IPPORTNET 10.0.0.3,tcp:80,10.0.0.0/8
add T-IPPORTNET 10.0.0.3,tcp:80,10.9.9.9
create T-IPPORTNET6 hash:ip,port,net family inet6 hashsize 1024 maxelem 65536
add T-IPPORTNET6 fd00::3,tcp:80,fd00:1::/48
create T-PORTS bitmap:port range 0-65535
add T-PORTS 0
add T-PORTS 30080
add T-PORTS 65535
`,
	},
	{
		name: "-exist: re-create, duplicate add, missing del, missing destroy, del and flush",
		steps: []step{
			ok(func(tx *Transaction) {
				tx.Create(setIP)
				tx.Add("T-IP", "10.0.0.1")
				tx.Add("T-IP", "10.0.0.2")
				tx.Add("T-IP", "10.0.0.3")
				tx.Create(setPorts)
				tx.Add("T-PORTS", "1")
			}),
			ok(func(tx *Transaction) {
				tx.Create(setIP)
				tx.Add("T-IP", "10.0.0.1")
				tx.Del("T-IP", "10.0.0.9")
				tx.Del("T-IP", "10.0.0.2")
				tx.Destroy("T-NOPE")
				tx.Flush("T-PORTS")
				tx.Add("T-PORTS", "2")
			}),
		},
		want: `create T-IP hash:ip family inet hashsize 1024 maxelem 65536
add T-IP 10.0.0.1
add T-IP 10.0.0.3
create T-PORTS bitmap:port range 0-65535
add T-PORTS 2
`,
	},
	{
		name: "create over another type fails at that line, earlier lines stay",
		steps: []step{
			ok(func(tx *Transaction) { tx.Create(setIP); tx.Create(setPorts) }),
			{build: func(tx *Transaction) {
				tx.Add("T-IP", "10.0.0.7")
				tx.Create(&Set{Name: "T-IP", Type: HashIPPort})
				tx.Add("T-PORTS", "8")
			}, wantKind: ErrSetExists, wantIndex: 1},
		},
		want: `create T-IP hash:ip family inet hashsize 1024 maxelem 65536
add T-IP 10.0.0.7
create T-PORTS bitmap:port range 0-65535
`,
	},
	{
		// Before 6.3 the kernel compared hash:ip's netmask (32 against 128) and
		// refused this create as a clash; since the bitmask change it compares
		// bitmasks, which are equal.
		name:  "create with another family is accepted by -exist and changes nothing",
		since: "6.3",
		steps: []step{
			ok(func(tx *Transaction) { tx.Create(setIP) }),
			ok(func(tx *Transaction) { tx.Create(&Set{Name: "T-IP", Type: HashIP, Family: FamilyInet6}) }),
			{build: func(tx *Transaction) { tx.Create(&Set{Name: "T-IP", Type: HashIP, MaxElem: 10}) }, wantKind: ErrSetExists, wantIndex: 0},
		},
		want: "create T-IP hash:ip family inet hashsize 1024 maxelem 65536\n",
	},
	{
		name: "swap exchanges same-type sets, refuses other types, families and missing sets",
		steps: []step{
			ok(func(tx *Transaction) {
				tx.Create(setIPPort)
				tx.Add("T-IPPORT", "10.0.0.1,tcp:80")
				tx.Create(&Set{Name: "T-IPPORT-NEW", Type: HashIPPort, HashSize: 4096})
				tx.Add("T-IPPORT-NEW", "10.0.0.2,tcp:80")
				tx.Create(setIPP6)
				tx.Create(setIP)
				tx.Create(setPorts)
				tx.Create(setRange)
				tx.Add("T-RANGE", "30001")
				tx.Swap("T-IPPORT", "T-IPPORT-NEW")
				tx.Swap("T-PORTS", "T-RANGE")
			}),
			{build: func(tx *Transaction) { tx.Swap("T-IPPORT", "T-IP") }, wantKind: ErrTypeMismatch, wantIndex: 0},
			{build: func(tx *Transaction) { tx.Swap("T-IPPORT", "T-IPPORT6") }, wantKind: ErrTypeMismatch, wantIndex: 0},
			{build: func(tx *Transaction) { tx.Swap("T-IPPORT", "T-NOPE") }, wantKind: ErrSetNotFound, wantIndex: 0},
			{build: func(tx *Transaction) { tx.Swap("T-NOPE", "T-IPPORT") }, wantKind: ErrSetNotFound, wantIndex: 0},
		},
		want: `create T-IP hash:ip family inet hashsize 1024 maxelem 65536
create T-IPPORT hash:ip,port family inet hashsize 4096 maxelem 65536
add T-IPPORT 10.0.0.2,tcp:80
create T-IPPORT-NEW hash:ip,port family inet hashsize 1024 maxelem 65536
add T-IPPORT-NEW 10.0.0.1,tcp:80
create T-IPPORT6 hash:ip,port family inet6 hashsize 1024 maxelem 65536
create T-PORTS bitmap:port range 30000-32767
add T-PORTS 30001
create T-RANGE bitmap:port range 0-65535
`,
	},
	{
		name:      "destroy of a referenced set fails, others go",
		reference: "T-IP",
		steps: []step{
			{build: func(tx *Transaction) {
				tx.Create(setPorts)
				tx.Destroy("T-PORTS")
				tx.Destroy("T-IP")
				tx.Create(setIP6)
			}, wantKind: ErrSetInUse, wantIndex: 2},
		},
		want: "create T-IP hash:ip family inet hashsize 1024 maxelem 65536\n",
	},
	{
		name: "full set and out-of-range port fail in the kernel after earlier elements",
		steps: []step{
			ok(func(tx *Transaction) { tx.Create(setSmall); tx.Create(setRange) }),
			{build: func(tx *Transaction) {
				tx.Add("T-SMALL", "10.0.0.1")
				tx.Add("T-SMALL", "10.0.0.2")
				tx.Add("T-SMALL", "10.0.0.3")
				tx.Add("T-RANGE", "30001")
			}, wantKind: ErrSetFull, wantIndex: 2},
			{build: func(tx *Transaction) {
				tx.Add("T-RANGE", "30002")
				tx.Add("T-RANGE", "80")
			}, wantKind: ErrOutOfRange, wantIndex: 1},
		},
		want: `create T-RANGE bitmap:port range 30000-32767
add T-RANGE 30002
create T-SMALL hash:ip family inet hashsize 1024 maxelem 2
add T-SMALL 10.0.0.1
add T-SMALL 10.0.0.2
`,
	},
	{
		name: "a userspace failure discards the unsent buffer of adds",
		steps: []step{
			ok(func(tx *Transaction) { tx.Create(setIP); tx.Create(setPorts) }),
			// The entry fits some type, so it passes validation, but not T-IP.
			{build: func(tx *Transaction) {
				tx.Add("T-PORTS", "7")
				tx.Add("T-IP", "10.0.0.1")
				tx.Add("T-IP", "10.0.0.1,tcp:80")
			}, wantKind: ErrInvalid, wantIndex: 2},
			{build: func(tx *Transaction) {
				tx.Add("T-IP", "10.0.0.2")
				tx.Add("T-PORTS", "8")
				tx.Add("T-NOPE", "10.0.0.3")
			}, wantKind: ErrSetNotFound, wantIndex: 2},
			// A non-add line sends the buffer first.
			{build: func(tx *Transaction) {
				tx.Add("T-PORTS", "9")
				tx.Flush("T-NOPE")
			}, wantKind: ErrSetNotFound, wantIndex: 1},
		},
		want: `create T-IP hash:ip family inet hashsize 1024 maxelem 65536
add T-IP 10.0.0.2
create T-PORTS bitmap:port range 0-65535
add T-PORTS 7
add T-PORTS 9
`,
	},
	{
		name: "the kernel refuses the zero address in hash:ip, on add and del, not in the three-part types",
		steps: []step{
			ok(func(tx *Transaction) {
				for _, s := range []*Set{setIP, setIP6, setIPPIP, setIPPIP6, setIPPN, setIPPN6} {
					tx.Create(s)
				}
			}),
			{build: func(tx *Transaction) {
				tx.Add("T-IP", "10.0.0.1")
				tx.Add("T-IP", "0.0.0.0")
				tx.Add("T-IP", "10.0.0.2")
			}, wantKind: ErrInvalid, wantIndex: 1},
			{build: func(tx *Transaction) { tx.Add("T-IP6", "fd00::1"); tx.Add("T-IP6", "::") }, wantKind: ErrInvalid, wantIndex: 1},
			{build: func(tx *Transaction) { tx.Del("T-IP", "0.0.0.0") }, wantKind: ErrInvalid, wantIndex: 0},
			{build: func(tx *Transaction) { tx.Del("T-IP6", "::") }, wantKind: ErrInvalid, wantIndex: 0},
			// The three-part types take it in every address component.
			ok(func(tx *Transaction) {
				tx.Add("T-IPPORTIP", "0.0.0.0,tcp:80,0.0.0.0")
				tx.Add("T-IPPORTIP6", "::,udp:53,fd00::1")
				tx.Add("T-IPPORTNET", "0.0.0.0,tcp:80,0.0.0.0")
				tx.Add("T-IPPORTNET", "10.0.0.1,tcp:80,0.0.0.0/1")
				tx.Add("T-IPPORTNET6", "::,tcp:80,::/1")
			}),
		},
		want: `create T-IP hash:ip family inet hashsize 1024 maxelem 65536
add T-IP 10.0.0.1
create T-IP6 hash:ip family inet6 hashsize 1024 maxelem 65536
add T-IP6 fd00::1
create T-IPPORTIP hash:ip,port,ip family inet hashsize 1024 maxelem 65536
add T-IPPORTIP 0.0.0.0,tcp:80,0.0.0.0
create T-IPPORTIP6 hash:ip,port,ip family inet6 hashsize 1024 maxelem 65536
add T-IPPORTIP6 ::,udp:53,fd00::1
create T-IPPORTNET hash:ip,port,net family inet hashsize 1024 maxelem 65536
add T-IPPORTNET 0.0.0.0,tcp:80,0.0.0.0
add T-IPPORTNET 10.0.0.1,tcp:80,0.0.0.0/1
create T-IPPORTNET6 hash:ip,port,net family inet6 hashsize 1024 maxelem 65536
add T-IPPORTNET6 ::,tcp:80,::/1
`,
	},
	{
		// The bitmask support of hash:ip,port (revision 7, Linux 6.3) refuses an
		// address that masks to zero, with EINVAL; 6.1 stores it.
		name:  "the kernel refuses the zero address in hash:ip,port, on add and del",
		since: "6.3",
		steps: []step{
			ok(func(tx *Transaction) { tx.Create(setIPPort); tx.Create(setIPP6) }),
			{build: func(tx *Transaction) {
				tx.Add("T-IPPORT", "10.0.0.1,tcp:80")
				tx.Add("T-IPPORT", "0.0.0.0,udp:53")
				tx.Add("T-IPPORT", "10.0.0.2,tcp:80")
			}, wantKind: ErrInvalid, wantIndex: 1},
			{build: func(tx *Transaction) { tx.Add("T-IPPORT6", "::,tcp:80") }, wantKind: ErrInvalid, wantIndex: 0},
			{build: func(tx *Transaction) { tx.Del("T-IPPORT", "0.0.0.0,sctp:9") }, wantKind: ErrInvalid, wantIndex: 0},
			{build: func(tx *Transaction) { tx.Del("T-IPPORT6", "::,tcp:80") }, wantKind: ErrInvalid, wantIndex: 0},
		},
		want: `create T-IPPORT hash:ip,port family inet hashsize 1024 maxelem 65536
add T-IPPORT 10.0.0.1,tcp:80
create T-IPPORT6 hash:ip,port family inet6 hashsize 1024 maxelem 65536
`,
	},
	{
		name: "a /0 net and an address of the other family are refused",
		steps: []step{
			ok(func(tx *Transaction) { tx.Create(setIP); tx.Create(setIP6); tx.Create(setIPPN); tx.Create(setIPPN6) }),
			// Validation: nothing runs, not even the lines before.
			{build: func(tx *Transaction) {
				tx.Add("T-IP", "10.0.0.1")
				tx.Add("T-IPPORTNET", "10.0.0.1,tcp:80,0.0.0.0/0")
			}, wantKind: ErrInvalid, wantIndex: 1},
			{build: func(tx *Transaction) { tx.Add("T-IPPORTNET6", "fd00::1,tcp:80,fd00::1/0") }, wantKind: ErrInvalid, wantIndex: 0},
			{build: func(tx *Transaction) {
				tx.Add("T-IP", "10.0.0.2")
				tx.Create(&Set{Name: "T-NEW6", Type: HashIP, Family: FamilyInet6})
				tx.Add("T-NEW6", "10.0.0.1")
			}, wantKind: ErrInvalid, wantIndex: 2},
			{build: func(tx *Transaction) { tx.Add("T-IPPORTNET", "10.0.0.1,tcp:80,fd00::/8") }, wantKind: ErrInvalid, wantIndex: 0},
			// The set's family is known only to the kernel: libipset's parse fails
			// ("Syntax error: cannot parse 10.0.0.1: resolving to IPv6 address
			// failed") and the unsent buffer of T-IP goes with it.
			{build: func(tx *Transaction) {
				tx.Add("T-IP", "10.0.0.3")
				tx.Add("T-IP6", "10.0.0.4")
			}, wantKind: ErrInvalid, wantIndex: 1},
			{build: func(tx *Transaction) { tx.Add("T-IP", "fd00::4") }, wantKind: ErrInvalid, wantIndex: 0},
		},
		want: `create T-IP hash:ip family inet hashsize 1024 maxelem 65536
create T-IP6 hash:ip family inet6 hashsize 1024 maxelem 65536
create T-IPPORTNET hash:ip,port,net family inet hashsize 1024 maxelem 65536
create T-IPPORTNET6 hash:ip,port,net family inet6 hashsize 1024 maxelem 65536
`,
	},
}

// referenceFunc makes a kernel object reference a set.
type referenceFunc func(t *testing.T, set string)

// runScenarios runs every scenario; kernel is the running kernel's release
// (uname -r) for the real runner, "" for the Fake, which runs them all.
func runScenarios(t *testing.T, kernel string, newIfc func(t *testing.T) (Interface, referenceFunc)) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if kernel != "" && sc.since != "" && !releaseAtLeast(kernel, sc.since) {
				t.Logf("NOT RUN on kernel %s: the scenario describes %s and later", kernel, sc.since)
				return
			}
			ctx := context.Background()
			ifc, reference := newIfc(t)
			if sc.reference != "" {
				tx := &Transaction{}
				tx.Create(&Set{Name: sc.reference, Type: HashIP})
				if err := ifc.Apply(ctx, tx); err != nil {
					t.Fatal(err)
				}
				reference(t, sc.reference)
			}
			for i, st := range sc.steps {
				tx := &Transaction{}
				st.build(tx)
				err := ifc.Apply(ctx, tx)
				checkErr(t, i, err, st.wantKind, st.wantIndex)
			}
			if diff := cmp.Diff(sc.want, dump(t, ifc)); diff != "" {
				t.Errorf("state after the steps (-want +got):\n%s", diff)
			}
			checkSaveSets(t, ctx, ifc)
		})
	}
}

// checkSaveSets: SaveSets of every other existing set plus a missing name returns
// exactly those sets, as SaveAll has them (and nothing for the missing one).
func checkSaveSets(t *testing.T, ctx context.Context, ifc Interface) {
	t.Helper()
	all, err := ifc.SaveAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"T-MISSING"}
	want := map[string]*SetWithEntries{}
	for i, name := range slices.Sorted(maps.Keys(all)) {
		if i%2 == 0 {
			names = append(names, name)
			want[name] = all[name]
			slices.Sort(want[name].Entries)
		}
	}
	got, err := ifc.SaveSets(ctx, names)
	if err != nil {
		t.Fatalf("SaveSets(%q): %v", names, err)
	}
	for _, s := range got {
		slices.Sort(s.Entries)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("SaveSets(%q) (-SaveAll's +got):\n%s", names, diff)
	}
}

func checkErr(t *testing.T, step int, err, wantKind error, wantIndex int) {
	t.Helper()
	if wantKind == nil {
		if err != nil {
			t.Fatalf("step %d: unexpected error: %v", step, err)
		}
		return
	}
	if !errors.Is(err, wantKind) {
		t.Fatalf("step %d: error %v, want kind %v", step, err, wantKind)
	}
	var ierr *Error
	if !errors.As(err, &ierr) {
		t.Fatalf("step %d: error %T is not *Error", step, err)
	}
	if ierr.Index != wantIndex {
		t.Fatalf("step %d: failing index %d (%q), want %d: %v", step, ierr.Index, ierr.Line, wantIndex, err)
	}
}

// dump renders any Interface like Fake.Dump, through SaveAll.
func dump(t *testing.T, ifc Interface) string {
	t.Helper()
	sets, err := ifc.SaveAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		s := sets[name]
		b.Write(appendLine(nil, op{kind: opCreate, set: name, spec: &s.Set}))
		slices.Sort(s.Entries)
		for _, e := range s.Entries {
			b.WriteString("add " + name + " " + e + "\n")
		}
	}
	return b.String()
}

// releaseAtLeast compares the major.minor of a kernel release ("6.1.0-57-amd64")
// with want ("6.3").
func releaseAtLeast(release, want string) bool {
	parse := func(s string) (major, minor int) {
		fmt.Sscanf(s, "%d.%d", &major, &minor)
		return major, minor
	}
	major, minor := parse(release)
	wantMajor, wantMinor := parse(want)
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}

func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		release, want string
		ok            bool
	}{
		{"6.1.0-57-amd64", "6.3", false},
		{"6.18.44-fc-v1252", "6.3", true},
		{"6.3.0", "6.3", true},
		{"7.0", "6.3", true},
		{"5.19.1", "6.3", false},
	} {
		if got := releaseAtLeast(c.release, c.want); got != c.ok {
			t.Errorf("releaseAtLeast(%q, %q) = %v", c.release, c.want, got)
		}
	}
}

func TestFakeConformance(t *testing.T) {
	runScenarios(t, "", func(t *testing.T) (Interface, referenceFunc) {
		f := NewFake()
		return f, func(t *testing.T, set string) { f.SetReferences(set, 1) }
	})
}
