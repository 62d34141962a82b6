package ipset

// Real-kernel tests: each runs in its own network namespace (netns.Run), where the
// ipsets and iptables rules it creates live and die with the namespace.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	utilexec "k8s.io/utils/exec"
)

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// resetKernel removes every rule and set of the namespace between subtests.
func resetKernel(t *testing.T) {
	t.Helper()
	mustRun(t, "iptables-legacy", "-t", "filter", "-F")
	mustRun(t, "ipset", "destroy")
}

func TestIntegrationConformance(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		var uts unix.Utsname
		if err := unix.Uname(&uts); err != nil {
			t.Fatal(err)
		}
		release := unix.ByteSliceToString(uts.Release[:])
		t.Logf("kernel %s", release)
		runScenarios(t, release, func(t *testing.T) (Interface, referenceFunc) {
			resetKernel(t)
			return New(utilexec.New()), func(t *testing.T, set string) {
				mustRun(t, "iptables-legacy", "-t", "filter", "-A", "INPUT", "-m", "set", "--match-set", set, "src", "-j", "ACCEPT")
			}
		})
	})
}

// TestIntegrationConformanceNetlink: the same scenarios through NewNetlink, whose
// batches of adds and deletes go over netlink (and to restore when the kernel
// refuses one): the same end states and the same errors as restore alone.
func TestIntegrationConformanceNetlink(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		var uts unix.Utsname
		if err := unix.Uname(&uts); err != nil {
			t.Fatal(err)
		}
		runScenarios(t, unix.ByteSliceToString(uts.Release[:]), func(t *testing.T) (Interface, referenceFunc) {
			resetKernel(t)
			ifc, err := NewNetlink(utilexec.New())
			if err != nil {
				t.Fatal(err)
			}
			return ifc, func(t *testing.T, set string) {
				mustRun(t, "iptables-legacy", "-t", "filter", "-A", "INPUT", "-m", "set", "--match-set", set, "src", "-j", "ACCEPT")
			}
		})
	})
}

// countingExec counts the processes started through it.
type countingExec struct {
	utilexec.Interface
	n atomic.Int32
}

func (c *countingExec) Command(cmd string, args ...string) utilexec.Cmd {
	c.n.Add(1)
	return c.Interface.Command(cmd, args...)
}

func (c *countingExec) CommandContext(ctx context.Context, cmd string, args ...string) utilexec.Cmd {
	c.n.Add(1)
	return c.Interface.CommandContext(ctx, cmd, args...)
}

// TestIntegrationNetlinkWritesNoProcess: a partial sync's kind of batch (adds and
// deletes in every type the proxier uses, both families) starts no process with
// NewNetlink and leaves the sets as restore does; a refused member still fails as
// restore fails (kind and line), through one restore process.
func TestIntegrationNetlinkWritesNoProcess(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		setup := &Transaction{}
		for _, s := range []*Set{setIP, setIP6, setIPPort, setIPP6, setIPPIP, setIPPIP6, setIPPN, setIPPN6, setPorts, setRange} {
			setup.Create(s)
		}
		batch := func(tx *Transaction) {
			tx.Add("T-IP", "10.0.0.1")
			tx.Add("T-IP6", "fd00::1")
			tx.Add("T-IPPORT", "10.0.0.1,tcp:80")
			tx.Add("T-IPPORT", "10.0.0.1,udp:53")
			tx.Add("T-IPPORT", "10.0.0.1,sctp:9")
			tx.Add("T-IPPORT6", "fd00::1,tcp:443")
			tx.Add("T-IPPORTIP", "10.0.0.2,tcp:80,10.0.0.2")
			tx.Add("T-IPPORTIP6", "fd00::2,udp:53,fd00::2")
			tx.Add("T-IPPORTNET", "10.0.0.3,tcp:80,10.1.2.3/8")
			tx.Add("T-IPPORTNET", "10.0.0.3,tcp:80,10.9.9.9")
			tx.Add("T-IPPORTNET6", "fd00::3,tcp:80,fd00:1::5/48")
			tx.Add("T-PORTS", "30080")
			tx.Add("T-RANGE", "30081")
			tx.Add("T-IPPORT", "10.0.0.1,tcp:80") // already there: a no-op
			tx.Del("T-IPPORT", "10.0.0.1,udp:53")
			tx.Del("T-IPPORT", "10.0.0.9,udp:53") // not there: a no-op
			tx.Del("T-PORTS", "30080")
		}
		var want string
		for _, viaNetlink := range []bool{false, true} {
			resetKernel(t)
			ce := &countingExec{Interface: utilexec.New()}
			var ifc Interface = New(ce)
			if viaNetlink {
				var err error
				if ifc, err = NewNetlink(ce); err != nil {
					t.Fatal(err)
				}
			}
			if err := ifc.Apply(ctx, setup); err != nil {
				t.Fatal(err)
			}
			ce.n.Store(0)
			tx := &Transaction{}
			batch(tx)
			if err := ifc.Apply(ctx, tx); err != nil {
				t.Fatalf("netlink %v: %v", viaNetlink, err)
			}
			n := ce.n.Load()
			got := dump(t, ifc)
			if !viaNetlink {
				want = got
				if n != 1 {
					t.Errorf("restore alone ran %d processes, want 1", n)
				}
				continue
			}
			if n != 0 {
				t.Errorf("the batch over netlink started %d processes, want none", n)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("sets after the batch over netlink (-restore +netlink):\n%s", diff)
			}

			// Refused: a port out of the bitmap's range, after a good add.
			ce.n.Store(0)
			bad := &Transaction{}
			bad.Add("T-IPPORT", "10.0.0.7,tcp:81")
			bad.Add("T-RANGE", "40000")
			err := ifc.Apply(ctx, bad)
			checkErr(t, 0, err, ErrOutOfRange, 1)
			if n := ce.n.Load(); n != 1 {
				t.Errorf("a refused batch ran %d processes, want the one restore that names the refusal", n)
			}
			if d := dump(t, ifc); !strings.Contains(d, "add T-IPPORT 10.0.0.7,tcp:81") {
				t.Errorf("the add before the refused line is missing:\n%s", d)
			}
		}
	})
}

// TestIntegrationNetlinkBulk: a start-up's kind of batch (thousands of adds to
// sets an earlier batch created, runs of several sets, deletes among them) goes
// over netlink in a few requests with no process, and leaves the sets exactly as
// restore does; a member the kernel refuses in the middle of a large run fails as
// restore fails (kind and line) through one restore, with everything before it
// applied. It logs both paths' times: restore asks the kernel for the set's header
// once per line for sets it did not create itself.
var hashSizeRE = regexp.MustCompile(`hashsize [0-9]+`)

func TestIntegrationNetlinkBulk(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		const n = 5000
		setup := &Transaction{}
		for _, s := range []*Set{setIPPort, setIPPIP, setIP, setRange} {
			setup.Create(s)
		}
		batch := &Transaction{}
		for i := 0; i < n/4; i++ {
			batch.Add("T-IPPORT", fmt.Sprintf("10.96.%d.%d,tcp:80", i>>8, i&255))
		}
		for i := 0; i < n; i++ {
			ep := fmt.Sprintf("10.244.%d.%d", i>>8, i&255)
			batch.Add("T-IPPORTIP", ep+",tcp:8080,"+ep)
		}
		batch.Del("T-IPPORT", "10.96.0.7,tcp:80")
		batch.Del("T-IPPORT", "10.96.0.8,tcp:80")
		for i := 0; i < n/4; i++ {
			batch.Add("T-IP", fmt.Sprintf("10.96.%d.%d", i>>8, i&255))
		}
		batch.Add("T-IPPORT", "10.96.0.7,tcp:80")
		batch.Add("T-RANGE", "30080")
		batch.Del("T-IPPORTIP", "10.244.0.1,tcp:8080,10.244.0.1")
		var want string
		for _, viaNetlink := range []bool{false, true} {
			resetKernel(t)
			ce := &countingExec{Interface: utilexec.New()}
			var ifc Interface = New(ce)
			if viaNetlink {
				var err error
				if ifc, err = NewNetlink(ce); err != nil {
					t.Fatal(err)
				}
			}
			if err := ifc.Apply(ctx, setup); err != nil {
				t.Fatal(err)
			}
			ce.n.Store(0)
			start := time.Now()
			if err := ifc.Apply(ctx, batch); err != nil {
				t.Fatalf("netlink %v: %v", viaNetlink, err)
			}
			procs := ce.n.Load()
			t.Logf("netlink %v: %d operations in %v, %d processes", viaNetlink, batch.Len(), time.Since(start), procs)
			// The kernel grows a hash set's buckets when one overflows, which
			// depends on the set's random hash seed: the hashsize may differ.
			got := hashSizeRE.ReplaceAllString(dump(t, ifc), "hashsize N")
			if c := strings.Count(got, "\nadd T-IPPORTIP "); c != n-1 {
				t.Errorf("T-IPPORTIP holds %d members, want %d", c, n-1)
			}
			if !viaNetlink {
				want = got
				continue
			}
			if procs != 0 {
				t.Errorf("the batch over netlink started %d processes, want none", procs)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("sets after the batch over netlink (-restore +netlink):\n%s", diff)
			}

			// Refused by the kernel: a port beyond the bitmap's range, after a
			// run of 2,000 adds that goes in several requests.
			resetKernel(t)
			if err := ifc.Apply(ctx, setup); err != nil {
				t.Fatal(err)
			}
			bad := &Transaction{}
			for i := 0; i < 2000; i++ {
				bad.Add("T-IPPORT", fmt.Sprintf("10.97.%d.%d,tcp:80", i>>8, i&255))
			}
			bad.Add("T-RANGE", "30080")
			bad.Add("T-RANGE", "40000")
			bad.Add("T-RANGE", "30081")
			ce.n.Store(0)
			err := ifc.Apply(ctx, bad)
			checkErr(t, 0, err, ErrOutOfRange, 2001)
			if n := ce.n.Load(); n != 1 {
				t.Errorf("a refused batch ran %d processes, want the one restore that names the refusal", n)
			}
			d := dump(t, ifc)
			if c := strings.Count(d, "\nadd T-IPPORT "); c != 2000 || !strings.Contains(d, "add T-RANGE 30080") || strings.Contains(d, "add T-RANGE 30081") {
				t.Errorf("after the refusal: %d members of T-IPPORT (want 2000), T-RANGE 30080 applied, 30081 not:\n%s", c, d[len(d)-min(len(d), 400):])
			}
		}
	})
}

// TestIntegrationLoadTypes: asking the kernel about the proxier's set types
// succeeds (loading their modules if needed) and changes no set; an unknown type
// is an error.
func TestIntegrationLoadTypes(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		if err := LoadTypes(ctx, []Type{HashIP, HashIPPort, HashIPPortIP, HashIPPortNet, BitmapPort}); err != nil {
			t.Fatal(err)
		}
		if err := LoadTypes(ctx, []Type{HashIP, "hash:nonsense"}); err == nil || !strings.Contains(err.Error(), "hash:nonsense") {
			t.Errorf("LoadTypes(hash:nonsense) = %v, want an error naming it", err)
		}
		if d := dump(t, New(utilexec.New())); d != "" {
			t.Errorf("sets after LoadTypes:\n%s", d)
		}
	})
}

func TestIntegrationListAndErrors(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		ips := New(utilexec.New())
		tx := &Transaction{}
		tx.Create(&Set{Name: "KUBE-CLUSTER-IP", Type: HashIPPort})
		tx.Create(&Set{Name: "KUBE-6-CLUSTER-IP", Type: HashIPPort, Family: FamilyInet6})
		tx.Create(&Set{Name: "KUBE-NODE-PORT-TCP", Type: BitmapPort})
		tx.Add("KUBE-CLUSTER-IP", "10.96.0.1,tcp:443")
		tx.Add("KUBE-6-CLUSTER-IP", "fd00::1,tcp:443")
		tx.Add("KUBE-NODE-PORT-TCP", "30080")
		if err := ips.Apply(ctx, tx); err != nil {
			t.Fatal(err)
		}
		sets, err := ips.ListSets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []*Set{
			{Name: "KUBE-CLUSTER-IP", Type: HashIPPort, Family: FamilyInet, HashSize: 1024, MaxElem: 65536},
			{Name: "KUBE-6-CLUSTER-IP", Type: HashIPPort, Family: FamilyInet6, HashSize: 1024, MaxElem: 65536},
			{Name: "KUBE-NODE-PORT-TCP", Type: BitmapPort, PortMax: 65535},
		}
		if diff := cmp.Diff(want, sets); diff != "" {
			t.Errorf("ListSets (-want +got):\n%s", diff)
		}
		entries, err := ips.ListEntries(ctx, "KUBE-6-CLUSTER-IP")
		if err != nil || len(entries) != 1 || entries[0] != "fd00::1,tcp:443" {
			t.Errorf("ListEntries = %v, %v", entries, err)
		}
		if _, err := ips.ListEntries(ctx, "KUBE-NOPE"); !IsNotFound(err) {
			t.Errorf("ListEntries(missing) = %v, want not found", err)
		}
		// An IPv4 entry in an IPv6 set passes the type-agnostic check and fails in
		// ipset itself: the error must name the operation.
		tx = &Transaction{}
		tx.Add("KUBE-NODE-PORT-TCP", "30081")
		tx.Add("KUBE-6-CLUSTER-IP", "10.0.0.1,tcp:80")
		err = ips.Apply(ctx, tx)
		var ierr *Error
		if !IsInvalid(err) || !errors.As(err, &ierr) || ierr.Index != 1 || ierr.Line != "add KUBE-6-CLUSTER-IP 10.0.0.1,tcp:80" {
			t.Errorf("Apply = %#v, want ErrInvalid at op 1", err)
		}
	})
}

// TestIntegration100kEntries applies 100k entries in one transaction (one process).
func TestIntegration100kEntries(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		ips := New(utilexec.New())
		tx := bigTransaction("KUBE-BIG", 100000)
		start := time.Now()
		if err := ips.Apply(ctx, tx); err != nil {
			t.Fatal(err)
		}
		t.Logf("applied %d operations in %v", tx.Len(), time.Since(start))
		entries, err := ips.ListEntries(ctx, "KUBE-BIG")
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 100000 {
			t.Fatalf("%d entries, want 100000", len(entries))
		}
		all, err := ips.SaveAll(ctx)
		if err != nil || len(all["KUBE-BIG"].Entries) != 100000 {
			t.Fatalf("SaveAll: %v", err)
		}
	})
}

func bigTransaction(name string, n int) *Transaction {
	tx := &Transaction{}
	tx.Create(&Set{Name: name, Type: HashIPPort, MaxElem: 2 * n})
	for i := 0; i < n; i++ {
		tx.Add(name, fmt.Sprintf("10.%d.%d.%d,tcp:%d", i>>16&255, i>>8&255, i&255, 80+i%3))
	}
	return tx
}

// TestIntegrationReplaceWrongType runs the Replacement recipe against real
// iptables rules that reference the set, checking at each step that a rule
// references a set of the right name and that the swap shortcut really fails.
func TestIntegrationReplaceWrongType(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		ips := New(utilexec.New())
		const name = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
		old := &Transaction{}
		old.Create(&Set{Name: name, Type: HashIPPortIP})
		old.Add(name, "10.0.0.1,tcp:80,10.0.0.2")
		if err := ips.Apply(ctx, old); err != nil {
			t.Fatal(err)
		}
		rules := func(set string) {
			t.Helper()
			in := "*filter\n:KUBE-SRC - [0:0]\n-F KUBE-SRC\n-A KUBE-SRC -m set --match-set " + set + " dst,dst,src -j RETURN\nCOMMIT\n"
			cmd := exec.Command("iptables-legacy-restore", "--noflush")
			cmd.Stdin = strings.NewReader(in)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("iptables-restore: %v: %s", err, out)
			}
		}
		rules(name)
		want := &Set{Name: name, Type: HashIPPortNet}
		r := NewReplacement(want, []string{"10.0.0.1,tcp:80,10.0.0.0/8"})

		// The kernel refuses both shortcuts.
		direct := &Transaction{}
		direct.Create(want)
		if err := ips.Apply(ctx, direct); !IsExists(err) {
			t.Fatalf("create over the old type = %v, want ErrSetExists", err)
		}
		if err := ips.Apply(ctx, r.Direct()); !IsInUse(err) {
			t.Fatalf("destroy while referenced = %v, want ErrSetInUse", err)
		}
		if err := ips.Apply(ctx, r.Stage1()); err != nil {
			t.Fatal(err)
		}
		swap := &Transaction{}
		swap.Swap(name, r.Temp)
		if err := ips.Apply(ctx, swap); !IsTypeMismatch(err) {
			t.Fatalf("swap across types = %v, want ErrTypeMismatch", err)
		}

		rules(r.Temp)
		if err := ips.Apply(ctx, r.Stage2()); err != nil {
			t.Fatal(err)
		}
		rules(name)
		if err := ips.Apply(ctx, r.Stage3()); err != nil {
			t.Fatal(err)
		}
		got := dump(t, ips)
		wantDump := "create " + name + " hash:ip,port,net family inet hashsize 1024 maxelem 65536\nadd " + name + " 10.0.0.1,tcp:80,10.0.0.0/8\n"
		if diff := cmp.Diff(wantDump, got); diff != "" {
			t.Errorf("sets after the replacement (-want +got):\n%s", diff)
		}
		out, err := exec.Command("iptables-legacy-save", "-t", "filter").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--match-set "+name+" dst,dst,src") {
			t.Errorf("rule does not reference %s: %v\n%s", name, err, out)
		}
	})
}

// BenchmarkIntegrationRestore100k measures one Apply of 100k adds (plus create and
// destroy) through `ipset restore`.
func BenchmarkIntegrationRestore100k(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		ctx := context.Background()
		ips := New(utilexec.New())
		tx := bigTransaction("KUBE-BENCH", 100000)
		tx.Destroy("KUBE-BENCH")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := ips.Apply(ctx, tx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100000, "ns/entry")
	})
}

// BenchmarkIntegrationNetlink100k is the alternative: vishvananda/netlink's ipset
// API, one request (with its ack) per entry.
func BenchmarkIntegrationNetlink100k(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		tcp, port := uint8(6), uint16(80)
		for i := 0; i < b.N; i++ {
			if err := netlink.IpsetCreate("KUBE-BENCH-NL", "hash:ip,port", netlink.IpsetCreateOptions{MaxElements: 200000}); err != nil {
				b.Fatal(err)
			}
			for j := 0; j < 100000; j++ {
				p := port + uint16(j%3)
				e := &netlink.IPSetEntry{IP: net.IPv4(10, byte(j>>16), byte(j>>8), byte(j)), Protocol: &tcp, Port: &p, Replace: true}
				if err := netlink.IpsetAdd("KUBE-BENCH-NL", e); err != nil {
					b.Fatal(err)
				}
			}
			if err := netlink.IpsetDestroy("KUBE-BENCH-NL"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100000, "ns/entry")
	})
}

// BenchmarkIntegrationMembers100k measures what a start-up writes: 100k adds to a
// set an earlier batch created (sized for them), through `ipset restore` (which then asks the
// kernel for the set's header once per line) and through NewNetlink's requests of
// ~700 members each.
func BenchmarkIntegrationMembers100k(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		for _, viaNetlink := range []bool{false, true} {
			name := "restore"
			if viaNetlink {
				name = "netlink"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				ips := New(utilexec.New())
				if viaNetlink {
					var err error
					if ips, err = NewNetlink(utilexec.New()); err != nil {
						b.Fatal(err)
					}
				}
				all := bigTransaction("KUBE-BENCH", 100000)
				create, adds := &Transaction{}, &Transaction{ops: all.ops[1:]}
				// Sized as the proxier sizes its sets (Sized): no rehash while filling.
				spec := *all.ops[0].spec
				spec.MaxElem, spec.HashSize = Size(100000, 0)
				create.Create(&spec)
				destroy := &Transaction{}
				destroy.Destroy("KUBE-BENCH")
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					if err := ips.Apply(ctx, create); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if err := ips.Apply(ctx, adds); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := ips.Apply(ctx, destroy); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100000, "ns/entry")
			})
		}
	})
}

// BenchmarkIntegrationSaveAll100k measures reading 100k entries back.
func BenchmarkIntegrationSaveAll100k(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		ctx := context.Background()
		ips := New(utilexec.New())
		if err := ips.Apply(ctx, bigTransaction("KUBE-BENCH", 100000)); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := ips.SaveAll(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestIntegrationResize100k: a set an iptables rule references grows from
// 60,000 to 100,000 members past the 65,536 default (kubernetes#129389) with
// the real ipset, and a member present before and after is found by name at
// every instant of the resize (one `ipset test` process after another while
// the batch runs).
func TestIntegrationResize100k(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ips := New(utilexec.New())
		var stop chan struct{}
		var result chan [2]int
		checkResize(t, &timedResize{Interface: ips, t: t, before: func() {
			stop, result = make(chan struct{}), make(chan [2]int, 1)
			go func() {
				ok, missed := 0, 0
				for {
					select {
					case <-stop:
						result <- [2]int{ok, missed}
						return
					default:
					}
					if exec.Command("ipset", "test", "KUBE-CLUSTER-IP", "10.0.0.7,tcp:80").Run() == nil {
						ok++
					} else {
						missed++
					}
				}
			}()
		}, after: func() {
			close(stop)
			r := <-result
			t.Logf("during the resize: the member was found %d times, missed %d times", r[0], r[1])
			if r[1] != 0 || r[0] == 0 {
				t.Errorf("member found %d times, missed %d times during the resize; want always found", r[0], r[1])
			}
		}}, func(set string) {
			mustRun(t, "iptables-legacy", "-t", "filter", "-A", "INPUT", "-m", "set", "--match-set", set, "dst,dst", "-j", "ACCEPT")
		})
	})
}

// timedResize runs before and after around the Apply that swaps (the resize)
// and logs each Apply's duration.
type timedResize struct {
	Interface
	t             *testing.T
	before, after func()
}

func (r *timedResize) Apply(ctx context.Context, tx *Transaction) error {
	resize := tx.Counts().Swap > 0
	if resize {
		r.before()
	}
	start := time.Now()
	err := r.Interface.Apply(ctx, tx)
	r.t.Logf("Apply of %d operations (%+v): %v", tx.Len(), tx.Counts(), time.Since(start))
	if resize {
		r.after()
	}
	return err
}
