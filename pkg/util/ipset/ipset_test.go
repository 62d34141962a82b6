package ipset

// Test addresses: 10.0.0.0/8 and fd00::/8.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCanonicalEntry(t *testing.T) {
	for _, c := range []struct {
		typ    Type
		family string
		in     string
		want   string // "" means invalid
	}{
		{HashIP, FamilyInet, "10.0.0.1", "10.0.0.1"},
		{HashIP, FamilyInet, "010.0.0.1", ""}, // ipset would read octal
		{HashIP, FamilyInet, "10.0.0.0/24", ""},
		{HashIP, FamilyInet, "fd00::1", ""},
		{HashIP, FamilyInet6, "FD00:0::1", "fd00::1"},
		{HashIP, FamilyInet6, "::ffff:10.0.0.1", ""},
		{HashIP, FamilyInet6, "fe80::1%lo", ""},
		{HashIP, FamilyInet6, "10.0.0.1", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,tcp:80", "10.0.0.1,tcp:80"},
		{HashIPPort, FamilyInet, "10.0.0.1,SCTP:0", "10.0.0.1,sctp:0"},
		{HashIPPort, FamilyInet, "10.0.0.1,udp:65535", "10.0.0.1,udp:65535"},
		{HashIPPort, FamilyInet, "10.0.0.1,udp:65536", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,tcp:http", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,tcp:80-82", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,tcp:080", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,icmp:8", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,80", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,tcp:80 ", ""},
		{HashIPPort, FamilyInet, "10.0.0.1,tcp:80\nadd X 1", ""},
		{HashIPPort, FamilyInet6, "fd00::1,tcp:80", "fd00::1,tcp:80"},
		{HashIPPortIP, FamilyInet, "10.0.0.1,tcp:80,10.0.0.2", "10.0.0.1,tcp:80,10.0.0.2"},
		{HashIPPortIP, FamilyInet, "10.0.0.1,tcp:80,fd00::2", ""},
		{HashIPPortIP, FamilyInet6, "fd00::1,udp:53,FD00::2", "fd00::1,udp:53,fd00::2"},
		{HashIPPortNet, FamilyInet, "10.0.0.1,tcp:80,10.1.2.3/8", "10.0.0.1,tcp:80,10.0.0.0/8"},
		{HashIPPortNet, FamilyInet, "10.0.0.1,tcp:80,10.1.2.3/32", "10.0.0.1,tcp:80,10.1.2.3"},
		{HashIPPortNet, FamilyInet, "10.0.0.1,tcp:80,10.1.2.3", "10.0.0.1,tcp:80,10.1.2.3"},
		{HashIPPortNet, FamilyInet, "10.0.0.1,tcp:80,0.0.0.0/0", ""},
		{HashIPPortNet, FamilyInet, "10.0.0.1,tcp:80,10.0.0.0/33", ""},
		{HashIPPortNet, FamilyInet6, "fd00::1,tcp:80,fd00:1::5/48", "fd00::1,tcp:80,fd00:1::/48"},
		{BitmapPort, "", "30080", "30080"},
		{BitmapPort, "", "0", "0"},
		{BitmapPort, "", "65536", ""},
		{BitmapPort, "", "-1", ""},
		{BitmapPort, "", "+1", ""},
		{BitmapPort, "", "1-2", ""},
		{Type("hash:net"), FamilyInet, "10.0.0.0/8", ""},
	} {
		got, err := CanonicalEntry(c.typ, c.family, c.in)
		if c.want == "" {
			if err == nil || !IsInvalid(err) {
				t.Errorf("CanonicalEntry(%s, %s, %q) = %q, %v; want an ErrInvalid", c.typ, c.family, c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("CanonicalEntry(%s, %s, %q) = %q, %v; want %q", c.typ, c.family, c.in, got, err, c.want)
		}
	}
}

func TestValidateNameAndSet(t *testing.T) {
	for name, valid := range map[string]bool{
		"KUBE-CLUSTER-IP":                  true,
		"KUBE-6-LOAD-BALANCER-SOURCE-CID":  true, // 31
		"KUBE-6-LOAD-BALANCER-SOURCE-CIDR": false,
		"":                                 false,
		"x y":                              false,
		"x\ny":                             false,
		"a\"b":                             false,
		"a-b_c.d:e+f":                      true,
	} {
		if err := ValidateName(name); (err == nil) != valid {
			t.Errorf("ValidateName(%q) = %v, want valid=%v", name, err, valid)
		}
	}
	got, err := ValidateSet(&Set{Name: "A", Type: HashIPPort})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&Set{Name: "A", Type: HashIPPort, Family: FamilyInet, HashSize: 1024, MaxElem: 65536}, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	got, err = ValidateSet(&Set{Name: "P", Type: BitmapPort})
	if err != nil || got.PortMax != 65535 {
		t.Errorf("bitmap default range: %+v, %v", got, err)
	}
	for _, bad := range []*Set{
		{Name: "P", Type: BitmapPort, PortMin: 10, PortMax: 5},
		{Name: "P", Type: BitmapPort, PortMax: 70000},
		{Name: "P", Type: BitmapPort, Family: FamilyInet},
		{Name: "H", Type: HashIP, Family: "inet7"},
		{Name: "H", Type: HashIP, PortMax: 5},
		{Name: "H", Type: HashIP, MaxElem: -1},
		{Name: "H", Type: "list:set"},
	} {
		if _, err := ValidateSet(bad); !IsInvalid(err) {
			t.Errorf("ValidateSet(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestTransactionScriptAndCounts(t *testing.T) {
	tx := &Transaction{}
	tx.Create(&Set{Name: "A", Type: HashIPPort, Family: FamilyInet6, HashSize: 64, MaxElem: 100})
	tx.Create(&Set{Name: "P", Type: BitmapPort, PortMin: 30000, PortMax: 32767})
	tx.Add("A", "FD00::1,TCP:80")
	tx.Del("P", "30001")
	tx.Flush("P")
	tx.Swap("A", "B")
	tx.Destroy("B")
	ops, err := tx.prepare()
	if err != nil {
		t.Fatal(err)
	}
	want := `create A hash:ip,port family inet6 hashsize 64 maxelem 100
create P bitmap:port range 30000-32767
add A fd00::1,tcp:80
del P 30001
flush P
swap A B
destroy B
`
	if diff := cmp.Diff(want, string(encode(ops))); diff != "" {
		t.Errorf("script (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(OpCounts{Create: 2, Add: 1, Del: 1, Flush: 1, Swap: 1, Destroy: 1}, tx.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if tx.Counts().Total() != tx.Len() {
		t.Errorf("Total %d != Len %d", tx.Counts().Total(), tx.Len())
	}
}

func TestPrepareRejectsInjection(t *testing.T) {
	for _, build := range []func(tx *Transaction){
		func(tx *Transaction) { tx.Add("A", "10.0.0.1\ndestroy") },
		func(tx *Transaction) { tx.Add("A B", "10.0.0.1") },
		func(tx *Transaction) { tx.Flush("") },
		func(tx *Transaction) { tx.Swap("A", "B\nflush C") },
		func(tx *Transaction) { tx.Create(&Set{Name: "A", Type: HashIP}); tx.Add("A", "10.0.0.1,tcp:80") },
		func(tx *Transaction) { tx.Create(&Set{Name: "A", Type: HashIP}); tx.Add("A", "10.0.0.1 timeout 5") },
	} {
		tx := &Transaction{}
		build(tx)
		f := NewFake()
		err := f.Apply(context.Background(), tx)
		if !IsInvalid(err) {
			t.Errorf("Apply(%q) = %v, want ErrInvalid", tx.String(), err)
		}
		if f.Applies() != 0 || f.Dump() != "" {
			t.Errorf("Apply(%q) ran although invalid", tx.String())
		}
	}
}

func TestParseStderr(t *testing.T) {
	for _, c := range []struct {
		in     string
		line   int
		reason string
		kind   error
	}{
		{"ipset v7.17: Error in line 3: The set with the given name does not exist\n", 3, "The set with the given name does not exist", ErrSetNotFound},
		{"ipset v7.17: Error in line 12: Set cannot be destroyed: it is in use by a kernel component\n", 12, "Set cannot be destroyed: it is in use by a kernel component", ErrSetInUse},
		{"ipset v7.17: The sets cannot be swapped: their type does not match\n", 0, "The sets cannot be swapped: their type does not match", ErrTypeMismatch},
		{"ipset v7.17: Syntax error: '70000' is out of range 0-65535\nSyntax error: 'tcp' is invalid as number\n", 0, "Syntax error: '70000' is out of range 0-65535", ErrInvalid},
		{"ipset v7.17: Error in line 1: Hash is full, cannot add more elements", 1, "Hash is full, cannot add more elements", ErrSetFull},
		{"ipset v7.17: Kernel error received: something new\n", 0, "Kernel error received: something new", ErrUnknown},
	} {
		line, reason := parseStderr(c.in)
		if line != c.line || reason != c.reason || !errors.Is(classify(reason), c.kind) {
			t.Errorf("parseStderr(%q) = %d, %q (%v); want %d, %q (%v)", c.in, line, reason, classify(reason), c.line, c.reason, c.kind)
		}
	}
}

func TestParseSave(t *testing.T) {
	in := `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x9fad76e8
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
create foreign set hash:ip,port family inet6 hashsize 64 maxelem 10 timeout 0 counters comment bucketsize 12 initval 0x1
add foreign set fd00::1,tcp:1 timeout 0 packets 0 bytes 0 comment "hi there"
create weird:name hash:net family inet hashsize 1024 maxelem 65536
`
	got, err := parseSave([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*SetWithEntries{
		"KUBE-CLUSTER-IP":    {Set: Set{Name: "KUBE-CLUSTER-IP", Type: HashIPPort, Family: "inet", HashSize: 1024, MaxElem: 65536}, Entries: []string{"10.96.0.1,tcp:443", "10.96.0.10,udp:53"}},
		"KUBE-NODE-PORT-TCP": {Set: Set{Name: "KUBE-NODE-PORT-TCP", Type: BitmapPort, PortMin: 0, PortMax: 65535}, Entries: []string{"30080"}},
		"foreign set":        {Set: Set{Name: "foreign set", Type: HashIPPort, Family: "inet6", HashSize: 64, MaxElem: 10}, Entries: []string{"fd00::1,tcp:1"}},
		"weird:name":         {Set: Set{Name: "weird:name", Type: "hash:net", Family: "inet", HashSize: 1024, MaxElem: 65536}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseSave (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"add X 1.2.3.4\n", "create X\n", "bogus\n", "create X hash:ip hashsize abc\n"} {
		if _, err := parseSave([]byte(bad)); err == nil {
			t.Errorf("parseSave(%q) succeeded", bad)
		}
	}
}

func TestParseListTerse(t *testing.T) {
	in := `Name: KUBE-CLUSTER-IP
Type: hash:ip,port
Revision: 7
Header: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x9fad76e8
Size in memory: 360
References: 2
Number of entries: 3

Name: x y
Type: bitmap:port
Revision: 3
Header: range 30000-32767
Size in memory: 8264
References: 0
Number of entries: 1
`
	got, err := parseListTerse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []*Set{
		{Name: "KUBE-CLUSTER-IP", Type: HashIPPort, Family: "inet", HashSize: 1024, MaxElem: 65536},
		{Name: "x y", Type: BitmapPort, PortMin: 30000, PortMax: 32767},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseListTerse (-want +got):\n%s", diff)
	}
}

func TestFakeCountersAndInjection(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	tx := &Transaction{}
	tx.Create(&Set{Name: "A", Type: HashIP})
	tx.Add("A", "10.0.0.1")
	tx.Add("A", "10.0.0.2")
	tx.Del("A", "10.0.0.1")
	if err := f.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(OpCounts{Create: 1, Add: 2, Del: 1}, f.Ops()); diff != "" {
		t.Errorf("ops (-want +got):\n%s", diff)
	}
	injected := errors.New("boom")
	f.InjectError = func(i int, line string) error {
		if strings.HasPrefix(line, "add A 10.0.0.4") {
			return injected
		}
		return nil
	}
	tx = &Transaction{}
	tx.Add("A", "10.0.0.3")
	tx.Add("A", "10.0.0.4")
	tx.Add("A", "10.0.0.5")
	err := f.Apply(ctx, tx)
	if !errors.Is(err, injected) {
		t.Fatalf("Apply = %v, want the injected error", err)
	}
	want := "create A hash:ip family inet hashsize 1024 maxelem 65536\nadd A 10.0.0.2\nadd A 10.0.0.3\n"
	if diff := cmp.Diff(want, f.Dump()); diff != "" {
		t.Errorf("dump (-want +got):\n%s", diff)
	}
	if f.Applies() != 2 {
		t.Errorf("Applies = %d, want 2", f.Applies())
	}
	if _, err := f.ListEntries(ctx, "NOPE"); !IsNotFound(err) {
		t.Errorf("ListEntries(NOPE) = %v, want not found", err)
	}
}

func TestReplacementOnFake(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	old := &Transaction{}
	old.Create(&Set{Name: "KUBE-LOAD-BALANCER-SOURCE-CIDR", Type: HashIPPortIP})
	old.Add("KUBE-LOAD-BALANCER-SOURCE-CIDR", "10.0.0.1,tcp:80,10.0.0.2")
	if err := f.Apply(ctx, old); err != nil {
		t.Fatal(err)
	}
	f.SetReferences("KUBE-LOAD-BALANCER-SOURCE-CIDR", 1)
	want := &Set{Name: "KUBE-LOAD-BALANCER-SOURCE-CIDR", Type: HashIPPortNet}
	sets, _ := f.ListSets(ctx)
	if !NeedsReplace(sets[0], want) {
		t.Fatal("NeedsReplace = false for another type")
	}
	r := NewReplacement(want, []string{"10.0.0.1,tcp:80,10.0.0.0/8"})
	if len(r.Temp) > MaxNameLen || r.Temp == want.Name {
		t.Fatalf("bad temp name %q", r.Temp)
	}
	if err := f.Apply(ctx, r.Stage1()); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(ctx, r.Stage2()); !IsInUse(err) {
		t.Fatalf("Stage2 while referenced = %v, want in use", err)
	}
	f.SetReferences(want.Name, 0) // the rules now match the temporary set
	f.SetReferences(r.Temp, 1)
	if err := f.Apply(ctx, r.Stage2()); err != nil {
		t.Fatal(err)
	}
	f.SetReferences(r.Temp, 0)
	f.SetReferences(want.Name, 1)
	if err := f.Apply(ctx, r.Stage3()); err != nil {
		t.Fatal(err)
	}
	wantDump := "create KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net family inet hashsize 1024 maxelem 65536\nadd KUBE-LOAD-BALANCER-SOURCE-CIDR 10.0.0.1,tcp:80,10.0.0.0/8\n"
	if diff := cmp.Diff(wantDump, f.Dump()); diff != "" {
		t.Errorf("dump (-want +got):\n%s", diff)
	}
}

func TestTempName(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"KUBE-LOAD-BALANCER-SOURCE-IP", "KUBE-LOAD-BALANCER-SOURCE-CIDR", "KUBE-6-LOAD-BALANCER-SOURCE-CID", "A"} {
		tmp := TempName(n)
		if err := ValidateName(tmp); err != nil {
			t.Errorf("TempName(%q) = %q: %v", n, tmp, err)
		}
		if other, ok := seen[tmp]; ok {
			t.Errorf("TempName(%q) = TempName(%q) = %q", n, other, tmp)
		}
		seen[tmp] = n
	}
}

func FuzzCanonicalEntry(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1,tcp:80", "fd00::1,udp:53,fd00::/64", "30080", "1,2,3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		for typ := range typeShapes {
			for _, fam := range []string{FamilyInet, FamilyInet6} {
				c, err := CanonicalEntry(typ, fam, entry)
				if err != nil {
					continue
				}
				if strings.ContainsAny(c, " \t\n\r\"'#") {
					t.Fatalf("canonical entry %q of %q contains a separator", c, entry)
				}
				again, err := CanonicalEntry(typ, fam, c)
				if err != nil || again != c {
					t.Fatalf("canonical form not stable: %q -> %q -> %q, %v", entry, c, again, err)
				}
			}
		}
	})
}

func FuzzParseSave(f *testing.F) {
	f.Add("create A hash:ip family inet hashsize 1024 maxelem 65536\nadd A 10.0.0.1\n")
	f.Add("create x y bitmap:port range 0-10\nadd x y 5\n")
	f.Fuzz(func(t *testing.T, in string) {
		sets, err := parseSave([]byte(in))
		if err != nil {
			return
		}
		for name, s := range sets {
			if s.Name != name {
				t.Fatalf("set keyed %q is named %q", name, s.Name)
			}
		}
	})
}

func TestFakeReplaceReferences(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	tx := &Transaction{}
	tx.Create(&Set{Name: "A", Type: HashIP})
	tx.Create(&Set{Name: "B", Type: HashIP})
	if err := f.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	f.SetReferences("A", 1)
	f.ReplaceReferences(map[string]int{"B": 2})
	destroy := func(name string) error {
		tx := &Transaction{}
		tx.Destroy(name)
		return f.Apply(ctx, tx)
	}
	if err := destroy("B"); !IsInUse(err) {
		t.Errorf("destroy B = %v, want in use", err)
	}
	if err := destroy("A"); err != nil {
		t.Errorf("destroy A = %v, want success (its reference was replaced)", err)
	}
}
