package ipvs

// Test address ranges: as in helpers_test.go.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

var errRefused = errors.New("injected kernel refusal")

// stickyFault fails the n-th call it sees, and every later call on the same object,
// until cleared: a kernel that refuses one object.
type stickyFault struct {
	n, seen int
	object  string
	cleared bool
}

func (f *stickyFault) check(object string) error {
	if f.cleared {
		return nil
	}
	f.seen++
	if f.seen == f.n {
		f.object = object
	}
	if f.object != "" && object == f.object {
		return fmt.Errorf("%s: %w", object, errRefused)
	}
	return nil
}

type faultyIPVS struct {
	ipvs.Interface
	f *stickyFault
}

func (x *faultyIPVS) AddVirtualServer(ctx context.Context, vs *ipvs.VirtualServer) error {
	if err := x.f.check("vs " + vs.String()); err != nil {
		return err
	}
	return x.Interface.AddVirtualServer(ctx, vs)
}

func (x *faultyIPVS) AddRealServer(ctx context.Context, vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if err := x.f.check("rs " + vs.String() + " " + rs.String()); err != nil {
		return err
	}
	return x.Interface.AddRealServer(ctx, vs, rs)
}

func (x *faultyIPVS) Write(ctx context.Context, writes []ipvs.Write) []error {
	return writeEach(ctx, x, writes)
}

type faultyNetlink struct {
	netlink.Handle
	f *stickyFault
}

func (x *faultyNetlink) EnsureAddressBind(ctx context.Context, ip net.IP, dev string) (bool, error) {
	if err := x.f.check("bind " + ip.String()); err != nil {
		return false, err
	}
	return x.Handle.EnsureAddressBind(ctx, ip, dev)
}

func (x *faultyNetlink) BindAddresses(ctx context.Context, ips []net.IP, dev string) []error {
	errs := make([]error, len(ips))
	for i, ip := range ips {
		_, errs[i] = x.EnsureAddressBind(ctx, ip, dev)
	}
	return errs
}

func faultServices() []any {
	var objs []any
	for i := range 5 {
		name := fmt.Sprintf("s%d", i)
		objs = append(objs,
			makeService("ns", name, clusterIP(fmt.Sprintf("10.96.0.%d", i+1)), port("p", v1.ProtocolTCP, 80, int32(30001+i)),
				externalIPs(fmt.Sprintf("203.0.113.%d", i+1))),
			makeSlice("ns", name, name+"-1", tcp("p", 80), endpoint(fmt.Sprintf("10.244.2.%d", i+1)), endpoint(fmt.Sprintf("10.244.1.%d", i+1))))
	}
	return objs
}

// vsBlocks splits an IPVS dump into one block per virtual server.
func vsBlocks(dump string) map[string]string {
	out := map[string]string{}
	cur := ""
	for _, line := range strings.Split(dump, "\n") {
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "  ->") {
			cur = line
		}
		out[cur] += line + "\n"
	}
	return out
}

// TestFaultOnNthKernelOperation: a refusal of the n-th IPVS, ipset or address write
// while five Services are programmed leaves every Service the refused object does not
// belong to fully programmed in the same sync, keeps the sync successful (no forgotten
// state, no full resync), and the refused object lands once the kernel takes it.
func TestFaultOnNthKernelOperation(t *testing.T) {
	base := newTestEnv(t, v1.IPv4Protocol)
	base.start(faultServices()...)
	want := base.ipvs.Dump() + base.ipset.Dump() + base.nl.Dump()
	wantBlocks := vsBlocks(base.ipvs.Dump())

	layers := []struct {
		name string
		ops  int // how many writes of this layer programming the five Services takes
		arm  func(e *testEnv, f *stickyFault)
	}{
		{"ipvs", 30, func(e *testEnv, f *stickyFault) { e.p.kernel.IPVS = &faultyIPVS{Interface: e.ipvs, f: f} }},
		{"ipset", 20, func(e *testEnv, f *stickyFault) {
			e.ipset.InjectError = func(_ int, line string) error {
				if !strings.HasPrefix(line, "add ") {
					return nil
				}
				return f.check(line)
			}
		}},
		{"netlink", 10, func(e *testEnv, f *stickyFault) { e.p.kernel.Netlink = &faultyNetlink{Handle: e.nl, f: f} }},
	}
	for _, l := range layers {
		for n := 1; n <= l.ops; n++ {
			t.Run(fmt.Sprintf("%s-%d", l.name, n), func(t *testing.T) {
				e := newTestEnv(t, v1.IPv4Protocol)
				e.start()
				f := &stickyFault{n: n}
				l.arm(e, f)
				for _, o := range faultServices() {
					e.add(o)
				}
				st := e.mustSync()
				if f.object == "" {
					t.Skipf("fewer than %d %s writes", n, l.name) // the loop bound is generous on purpose
				}
				if st.Failed == 0 || e.p.needFull {
					t.Fatalf("refusal of %q not isolated: failed=%d needFull=%v", f.object, st.Failed, e.p.needFull)
				}
				held := sets.New[string]()
				for _, h := range e.p.HeldBack() {
					held.Insert(h.Services...)
				}
				if held.Len() != 1 {
					t.Fatalf("refusal of %q holds back %v, want exactly its Service", f.object, sets.List(held))
				}
				owner := strings.TrimPrefix(sets.List(held)[0], "ns/s")
				got := vsBlocks(e.ipvs.Dump())
				for vs, block := range wantBlocks {
					if strings.Contains(vs, "10.96.0."+fmt.Sprint(owner[0]-'0'+1)+":") || strings.Contains(vs, "203.0.113."+fmt.Sprint(owner[0]-'0'+1)+":") ||
						strings.Contains(vs, fmt.Sprintf(":%d ", 30001+int(owner[0]-'0'))) {
						continue // the held-back Service
					}
					if got[vs] != block {
						t.Errorf("another Service's virtual server differs after refusing %q:\nwant %sgot  %s", f.object, block, got[vs])
					}
				}

				f.cleared = true
				e.clock.Step(time.Second)
				if st := e.mustSync(); st.Full || st.Failed != 0 {
					t.Fatalf("retry: full=%v failed=%d", st.Full, st.Failed)
				}
				if got := e.ipvs.Dump() + e.ipset.Dump() + e.nl.Dump(); got != want {
					t.Errorf("after the fault cleared the state differs from a run without it:\n%s", got)
				}
				if len(e.p.HeldBack()) != 0 {
					t.Errorf("still held back: %+v", e.p.HeldBack())
				}
			})
		}
	}
}

// TestRefusedOutFilterRuleIsolated: iptables-restore refusing the text because of one
// Service's KUBE-IPVS-OUT-FILTER rule writes every other rule, holds back that
// Service's rule only, and writes it once the kernel takes it.
func TestRefusedOutFilterRuleIsolated(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start()
	refuse := true
	e.ipt.InjectRestoreError = func(data []byte) error {
		if refuse && strings.Contains(string(data), "-s 203.0.113.7 ") {
			return errRefused
		}
		return nil
	}
	for i, ip := range []string{"203.0.113.6", "203.0.113.7", "203.0.113.8"} {
		name := fmt.Sprintf("lb%d", i)
		e.add(makeService("ns", name, clusterIP(fmt.Sprintf("10.96.0.%d", i+1)), port("p", v1.ProtocolTCP, 80, 0),
			lbIngress(ip), sourceRanges("198.51.100.0/24")))
		e.add(makeSlice("ns", name, name+"-1", tcp("p", 80), endpoint(fmt.Sprintf("10.244.2.%d", i+1))))
	}
	st := e.mustSync()
	// The rule, and lb1's two virtual servers, which wait for their filter rule.
	if st.Failed != 3 {
		t.Fatalf("failed = %d, want 3", st.Failed)
	}
	if d := e.ipvs.Dump(); strings.Contains(d, "203.0.113.7:80") || !strings.Contains(d, "203.0.113.8:80") {
		t.Errorf("virtual servers:\n%s", d)
	}
	rules := e.iptablesSave()
	for _, ip := range []string{"203.0.113.6", "203.0.113.8"} {
		if !strings.Contains(rules, "-s "+ip+" -m ipvs") {
			t.Errorf("rule of %s missing:\n%s", ip, rules)
		}
	}
	if strings.Contains(rules, "-s 203.0.113.7 -m ipvs") {
		t.Errorf("refused rule written")
	}
	h := e.p.HeldBack()
	if len(h) != 3 {
		t.Fatalf("held back: %+v", h)
	}
	for _, o := range h {
		if o.Reason != heldBackIPTables || len(o.Services) != 1 || o.Services[0] != "ns/lb1" {
			t.Errorf("held back: %+v", o)
		}
	}
	// Not due yet: a sync for something else neither retries nor bisects again.
	e.ipt.ResetCounters()
	e.add(makeSlice("ns", "lb0", "lb0-1", tcp("p", 80), endpoint("10.244.2.9")))
	e.mustSync()
	if c := e.ipt.Counters(); c.Restores != 0 {
		t.Errorf("%d restores before the retry is due, want 0", c.Restores)
	}
	refuse = false
	e.clock.Step(time.Second)
	e.mustSync()
	if !strings.Contains(e.ipvs.Dump(), "203.0.113.7:80") {
		t.Errorf("lb1's virtual server missing after the fault cleared")
	}
	if !strings.Contains(e.iptablesSave(), "-s 203.0.113.7 -m ipvs") || len(e.p.HeldBack()) != 0 {
		t.Errorf("rule not written after the fault cleared; held back %+v", e.p.HeldBack())
	}
}
