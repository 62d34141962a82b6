package ipvs

// Test address ranges: as in helpers_test.go.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/apis/config"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

func TestChooseScheduler(t *testing.T) {
	ours, kr := proxy.AnnotationScheduler, proxy.AnnotationKubeRouterScheduler
	cases := []struct {
		name, configured, source, scheduler, flags string
		wantSched                                  string
		wantFlags                                  uint32
		refused                                    int
	}{
		{name: "no annotation", configured: "rr", wantSched: "rr"},
		{name: "no annotation, configured mh keeps upstream's port flag, plus fallback", configured: "mh", wantSched: "mh", wantFlags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2},
		{name: "ours lc", configured: "rr", source: ours, scheduler: "lc", wantSched: "lc"},
		{name: "ours mh gets the port and fallback flags by default", configured: "rr", source: ours, scheduler: "mh", wantSched: "mh", wantFlags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2},
		{name: "ours sh with sh-port", configured: "rr", source: ours, scheduler: "sh", flags: "sh-port", wantSched: "sh", wantFlags: ipvs.FlagSchedSH2},
		{name: "ours sh with both sh flags", configured: "rr", source: ours, scheduler: "sh", flags: "sh-fallback, sh-port", wantSched: "sh", wantFlags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2},
		{name: "ours mh-fallback replaces the port flag", configured: "rr", source: ours, scheduler: "mh", flags: "mh-fallback", wantSched: "mh", wantFlags: ipvs.FlagSchedSH1},
		{name: "generic flags", configured: "rr", source: ours, scheduler: "wlc", flags: "flag-1,flag-2,flag-3", wantSched: "wlc", wantFlags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2 | flagSched3},
		{name: "flags alone apply to the configured scheduler", configured: "sh", source: ours, flags: "sh-port", wantSched: "sh", wantFlags: ipvs.FlagSchedSH2},
		{name: "ours unknown scheduler", configured: "rr", source: ours, scheduler: "fastest", wantSched: "rr", refused: 1},
		{name: "ours flag of another scheduler", configured: "rr", source: ours, scheduler: "lc", flags: "sh-port", wantSched: "lc", refused: 1},
		{name: "ours unknown flag next to a good one", configured: "rr", source: ours, scheduler: "sh", flags: "sh-port,turbo", wantSched: "sh", wantFlags: ipvs.FlagSchedSH2, refused: 1},
		{name: "ours only bad flags keep the default", configured: "rr", source: ours, scheduler: "mh", flags: "turbo", wantSched: "mh", wantFlags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2, refused: 1},
		{name: "kube-router sh", configured: "rr", source: kr, scheduler: "sh", wantSched: "sh"},
		{name: "kube-router mh without flags has only the fallback", configured: "rr", source: kr, scheduler: "mh", wantSched: "mh", wantFlags: ipvs.FlagSchedSH1},
		{name: "kube-router mh with flags", configured: "rr", source: kr, scheduler: "mh", flags: "flag-1,flag-2", wantSched: "mh", wantFlags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2},
		{name: "kube-router flags on sh are ignored as kube-router does", configured: "rr", source: kr, scheduler: "sh", flags: "flag-2", wantSched: "sh", refused: 1},
		{name: "kube-router value it does not accept", configured: "lc", source: kr, scheduler: "wrr", wantSched: "lc", refused: 1},
		{name: "kube-router unknown flag", configured: "rr", source: kr, scheduler: "mh", flags: "flag-2,mh-port", wantSched: "mh", wantFlags: ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2, refused: 1},
	}
	for _, s := range config.IPVSSchedulers {
		want := uint32(0)
		if s == "mh" {
			want = ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2
		}
		cases = append(cases, struct {
			name, configured, source, scheduler, flags string
			wantSched                                  string
			wantFlags                                  uint32
			refused                                    int
		}{name: "ours " + s, configured: "rr", source: ours, scheduler: s, wantSched: s, wantFlags: want})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sched, flags, refused := chooseScheduler(c.configured, &proxy.ServicePortInfo{Scheduler: c.scheduler, SchedulerFlags: c.flags, SchedulerSource: c.source})
			if sched != c.wantSched || flags != c.wantFlags || len(refused) != c.refused {
				t.Errorf("got %s %#x %v, want %s %#x and %d refusals", sched, flags, refused, c.wantSched, c.wantFlags, c.refused)
			}
		})
	}
}

func annotate(kv ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// TestSchedulerAnnotationsInPlace: setting, changing and removing the annotation
// edits only that Service's virtual servers in place, in a partial sync; ours wins
// over kube-router's.
func TestSchedulerAnnotationsInPlace(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	svc := func(mods ...func(*v1.Service)) *v1.Service {
		return makeService("ns", "web", append([]func(*v1.Service){clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 30080)}, mods...)...)
	}
	other := makeService("ns", "other", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0))
	e.start(svc(), makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1")), other,
		makeSlice("ns", "other", "o-1", tcp("p", 80), endpoint("10.244.2.2")))
	steps := []struct {
		mods  []func(*v1.Service)
		want  string // the scheduler column of web's three virtual servers
		other string
	}{
		{[]func(*v1.Service){annotate(proxy.AnnotationScheduler, "lc")}, "lc", "rr"},
		{[]func(*v1.Service){annotate(proxy.AnnotationScheduler, "sh", proxy.AnnotationSchedulerFlags, "sh-port")}, "sh sh-port", "rr"},
		{[]func(*v1.Service){annotate(proxy.AnnotationKubeRouterScheduler, "mh", proxy.AnnotationKubeRouterSchedFlags, "flag-1")}, "mh mh-fallback", "rr"},
		{[]func(*v1.Service){annotate(proxy.AnnotationKubeRouterScheduler, "mh", proxy.AnnotationScheduler, "lc")}, "lc", "rr"},
		{nil, "rr", "rr"},
	}
	for i, s := range steps {
		e.ipvs.ResetOps()
		e.add(svc(s.mods...))
		if st := e.mustSync(); st.Full || st.Services != 1 {
			t.Fatalf("step %d: full=%v services=%d, want a partial sync of one Service", i, st.Full, st.Services)
		}
		d := e.ipvs.Dump()
		for _, vip := range []string{"10.96.0.1:80", "192.168.0.10:30080", "192.168.1.10:30080"} {
			if !strings.Contains(d, "TCP  "+vip+" "+s.want+"\n") {
				t.Errorf("step %d: %s is not %q:\n%s", i, vip, s.want, d)
			}
		}
		if !strings.Contains(d, "TCP  10.96.0.2:80 "+s.other+"\n") {
			t.Errorf("step %d: the other Service changed:\n%s", i, d)
		}
		ops := e.ipvs.Ops()
		if ops[ipvs.OpAddVS] != 0 || ops[ipvs.OpDelVS] != 0 || ops[ipvs.OpUpdateVS] != 3 {
			t.Errorf("step %d: ops %v, want 3 in-place updates and no delete or add", i, ops)
		}
	}
}

// refusingScheduler is a kernel without some schedulers' modules: adding or updating a
// virtual server with one fails with ENOENT, as the kernel does.
type refusingScheduler struct {
	ipvs.Interface
	missing string
}

func (r *refusingScheduler) AddVirtualServer(ctx context.Context, vs *ipvs.VirtualServer) error {
	if vs.Scheduler == r.missing {
		return fmt.Errorf("adding virtual server %s: %w", vs, syscall.ENOENT)
	}
	return r.Interface.AddVirtualServer(ctx, vs)
}

func (r *refusingScheduler) UpdateVirtualServer(ctx context.Context, vs *ipvs.VirtualServer) error {
	if vs.Scheduler == r.missing {
		return fmt.Errorf("updating virtual server %s: %w", vs, syscall.ENOENT)
	}
	return r.Interface.UpdateVirtualServer(ctx, vs)
}

func (r *refusingScheduler) Write(ctx context.Context, writes []ipvs.Write) []error {
	return writeEach(ctx, r, writes)
}

// TestSchedulerBadValues: an unknown scheduler, and one whose module the kernel lacks,
// are the Service's problem only: one Warning Event, the configured scheduler, and the
// other Services' changes in the same sync go in.
func TestSchedulerBadValues(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) { o.Recorder = rec })
	e.p.kernel.IPVS = &refusingScheduler{Interface: e.ipvs, missing: "mh"}
	e.start(makeSlice("ns", "other", "o-1", tcp("p", 80), endpoint("10.244.2.2")),
		makeService("ns", "other", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)))
	countEvents(rec)

	e.add(makeService("ns", "made-up", clusterIP("10.96.0.3"), port("p", v1.ProtocolTCP, 80, 0), annotate(proxy.AnnotationScheduler, "fastest")))
	e.add(makeService("ns", "maglev", clusterIP("10.96.0.4"), port("p", v1.ProtocolTCP, 80, 30004), annotate(proxy.AnnotationScheduler, "mh")))
	e.add(makeSlice("ns", "maglev", "m-1", tcp("p", 80), endpoint("10.244.2.4")))
	e.add(makeSlice("ns", "other", "o-1", tcp("p", 80), endpoint("10.244.2.2"), endpoint("10.244.2.3")))
	st := e.mustSync()
	d := e.ipvs.Dump()
	for _, want := range []string{
		"TCP  10.96.0.3:80 rr\n",
		"TCP  10.96.0.4:80 rr\n  -> 10.244.2.4:80 Masq 1 0 0\n",
		"TCP  192.168.0.10:30004 rr\n",
		"TCP  10.96.0.2:80 rr\n  -> 10.244.2.2:80 Masq 1 0 0\n  -> 10.244.2.3:80 Masq 1 0 0\n",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("missing %q in:\n%s", want, d)
		}
	}
	if st.Failed != 3 {
		t.Errorf("failed = %d, want the 3 virtual servers of maglev", st.Failed)
	}
	if n := countEvents(rec); n != 2 {
		t.Errorf("%d Warning Events, want 2 (one per Service)", n)
	}
	// Retried with backoff; still refused, no new Event; once the module loads, mh.
	e.clock.Step(minRetryInterval)
	e.mustSync()
	if n := countEvents(rec); n != 0 {
		t.Errorf("%d more Events on retry", n)
	}
	e.p.kernel.IPVS = e.ipvs
	e.clock.Step(2 * minRetryInterval)
	e.mustSync()
	if d := e.ipvs.Dump(); !strings.Contains(d, "TCP  10.96.0.4:80 mh mh-fallback mh-port\n") {
		t.Errorf("mh not programmed once available:\n%s", d)
	}
}

// watchingIPVS records, at each in-place virtual server update, our filter chain as the
// kernel has it at that moment.
type watchingIPVS struct {
	ipvs.Interface
	ipt     *iptables.Fake
	atEdits []string
}

func (w *watchingIPVS) UpdateVirtualServer(ctx context.Context, vs *ipvs.VirtualServer) error {
	var buf bytes.Buffer
	if err := w.ipt.SaveInto(ctx, iptables.TableFilter, &buf); err != nil {
		return err
	}
	w.atEdits = append(w.atEdits, vs.Address.String()+"\n"+buf.String())
	return w.Interface.UpdateVirtualServer(ctx, vs)
}

// TestSchedulerChangeQuietsRefusals: while a virtual server's scheduler is changed in
// place, the ICMP port unreachables its address would send (the kernel refuses new
// connections in the swap) are dropped, so clients retransmit instead of failing; the
// rules are gone when the sync ends, and an edit that keeps the scheduler adds none.
func TestSchedulerChangeQuietsRefusals(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			e := newTestEnv(t, family)
			vip, ep, match := "10.96.0.1", "10.244.2.1", "-p icmp -m icmp --icmp-type port-unreachable"
			if family == v1.IPv6Protocol {
				vip, ep, match = "fd00:96::1", "fd00:244::2:1", "-p ipv6-icmp -m icmp6 --icmpv6-type port-unreachable"
			}
			svc := func(mods ...func(*v1.Service)) *v1.Service {
				return makeService("ns", "web", append([]func(*v1.Service){clusterIP(vip), port("p", v1.ProtocolTCP, 80, 0)}, mods...)...)
			}
			e.start(svc(), makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint(ep)))
			w := &watchingIPVS{Interface: e.ipvs, ipt: e.ipt}
			e.p.kernel.IPVS = w

			e.add(svc(annotate(proxy.AnnotationScheduler, "lc")))
			e.mustSync()
			if len(w.atEdits) != 1 {
				t.Fatalf("%d virtual server edits, want 1", len(w.atEdits))
			}
			suffix := "/32"
			if family == v1.IPv6Protocol {
				suffix = "/128"
			}
			rule := "-A KUBE-IPVS-OUT-FILTER -s " + vip + suffix + " " + match + ` -m comment --comment "` + rules.QuietComment + `" -j DROP`
			if !strings.HasPrefix(w.atEdits[0], vip+"\n") || !strings.Contains(w.atEdits[0], rule+"\n") {
				t.Errorf("during the scheduler change, want %q in:\n%s", rule, w.atEdits[0])
			}
			var buf bytes.Buffer
			if err := e.ipt.SaveInto(context.Background(), iptables.TableFilter, &buf); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(buf.String(), rules.QuietComment) {
				t.Errorf("the rule outlived the sync:\n%s", buf.String())
			}
			// A timeout change edits in place without a swap: nothing to quiet.
			w.atEdits = nil
			e.add(svc(annotate(proxy.AnnotationScheduler, "lc"), func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			}))
			e.mustSync()
			if len(w.atEdits) != 1 || strings.Contains(w.atEdits[0], rules.QuietComment) {
				t.Errorf("an edit without a scheduler change quieted refusals: %q", w.atEdits)
			}
		})
	}
}

// TestQuietRulesUndoneWhenDeleteFails: if the rules cannot be removed, the next sync
// rewrites our chains whole, which removes them.
func TestQuietRulesUndoneWhenDeleteFails(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	svc := func(mods ...func(*v1.Service)) *v1.Service {
		return makeService("ns", "web", append([]func(*v1.Service){clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)}, mods...)...)
	}
	e.start(svc(), makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint("10.244.2.1")))
	e.p.kernel.IPTables = &failingDelete{Interface: e.ipt}
	e.reloadRules()
	e.add(svc(annotate(proxy.AnnotationScheduler, "lc")))
	e.mustSync()
	if d := e.ipt.Dump(); !strings.Contains(d, rules.QuietComment) {
		t.Fatalf("the failing delete was not exercised:\n%s", d)
	}
	e.p.kernel.IPTables = e.ipt
	e.reloadRules()
	e.add(makeService("ns", "other", clusterIP("10.96.0.2"), port("p", v1.ProtocolTCP, 80, 0)))
	e.mustSync()
	if d := e.ipt.Dump(); strings.Contains(d, rules.QuietComment) {
		t.Errorf("the rule survived the next sync:\n%s", d)
	}
}

// failingDelete refuses restores that delete rules.
type failingDelete struct{ iptables.Interface }

func (f *failingDelete) RestoreAll(ctx context.Context, data []byte, flush iptables.FlushFlag, counters iptables.CounterFlag) error {
	if bytes.Contains(data, []byte("\n-D ")) {
		return fmt.Errorf("injected: iptables-restore refused a delete")
	}
	return f.Interface.RestoreAll(ctx, data, flush, counters)
}

// watchingNFT records the nftables backend's quiet set at every virtual server edit.
type watchingNFT struct {
	ipvs.Interface
	rs      nft.Ruleset
	atEdits []string
}

func (w *watchingNFT) UpdateVirtualServer(ctx context.Context, vs *ipvs.VirtualServer) error {
	d, err := w.rs.Dump(ctx)
	if err != nil {
		return err
	}
	var quiet []string
	for _, l := range strings.Split(d, "\n") {
		if strings.HasPrefix(l, "element ip-quiet ") || strings.HasPrefix(l, "element ip6-quiet ") {
			quiet = append(quiet, l)
		}
	}
	w.atEdits = append(w.atEdits, vs.Address.String()+": "+strings.Join(quiet, "; "))
	return w.Interface.UpdateVirtualServer(ctx, vs)
}

// TestNFTSchedulerChangeQuietsRefusals: with the nftables backend the address is in
// the family's quiet set while its scheduler changes, and out of it once the sync
// ends; a full sync empties a set a dead process left an address in.
func TestNFTSchedulerChangeQuietsRefusals(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			rs := nft.NewFakeRuleset(nftrules.Table())
			e := newNFTEnv(t, family, rs)
			vip, ep, set := "10.96.0.1", "10.244.2.1", "ip-quiet"
			if family == v1.IPv6Protocol {
				vip, ep, set = "fd00:96::1", "fd00:244::2:1", "ip6-quiet"
			}
			svc := func(mods ...func(*v1.Service)) *v1.Service {
				return makeService("ns", "web", append([]func(*v1.Service){clusterIP(vip), port("p", v1.ProtocolTCP, 80, 0)}, mods...)...)
			}
			e.start(svc(), makeSlice("ns", "web", "w-1", tcp("p", 80), endpoint(ep)))
			w := &watchingNFT{Interface: e.ipvs, rs: rs}
			e.p.kernel.IPVS = w

			e.add(svc(annotate(proxy.AnnotationScheduler, "lc")))
			e.mustSync()
			if want := []string{vip + ": element " + set + " " + vip}; !slices.Equal(w.atEdits, want) {
				t.Errorf("at the edits: %q, want %q", w.atEdits, want)
			}
			// The address stays nftrules.QuietLinger after the edits (a packet that found no
			// scheduler may still be on its way to the ICMP error), then leaves.
			if l := strings.TrimSpace(nftLines(t, rs, "element "+set)); l != "element "+set+" "+vip {
				t.Errorf("right after the sync the set holds %q, want the address still", l)
			}
			e.clock.Step(nftrules.QuietLinger - time.Millisecond)
			time.Sleep(50 * time.Millisecond)
			if l := nftLines(t, rs, "element "+set); l == "" {
				t.Error("the address left the set before the linger was over")
			}
			e.clock.Step(time.Millisecond)
			if !waitFor(5*time.Second, func() bool { return nftLines(t, rs, "element "+set) == "" }) {
				t.Errorf("the address outlived the linger: %s", nftLines(t, rs, "element "+set))
			}

			// Two changes in a row: the first one's end leaves the address quiet for the
			// second's linger; a full sync meanwhile keeps it.
			e.add(svc(annotate(proxy.AnnotationScheduler, "sh")))
			e.mustSync()
			e.clock.Step(nftrules.QuietLinger / 2)
			e.add(svc(annotate(proxy.AnnotationScheduler, "wlc")))
			e.mustSync()
			e.clock.Step(nftrules.QuietLinger / 2)
			time.Sleep(50 * time.Millisecond)
			if l := nftLines(t, rs, "element "+set); l == "" {
				t.Error("the first change's end took the address out while the second's quiet lingered")
			}
			e.p.needFull = true
			if st := e.mustSync(); !st.Full {
				t.Fatal("expected a full sync")
			}
			if l := nftLines(t, rs, "element "+set); l == "" {
				t.Error("a full sync emptied the set while a change's quiet lingered")
			}
			e.clock.Step(nftrules.QuietLinger / 2)
			if !waitFor(5*time.Second, func() bool { return nftLines(t, rs, "element "+set) == "" }) {
				t.Errorf("the address outlived the second linger: %s", nftLines(t, rs, "element "+set))
			}
			if l := nftLines(t, rs, "rule "+strings.TrimSuffix(set, "quiet")+"filter-output"); !strings.Contains(l, "@"+set+" ") || !strings.Contains(l, "port-unreachable drop") {
				t.Errorf("filter-output's quiet rule: %s", l)
			}

			// A process that died in between left an address: the next full sync empties the set.
			tx := nft.NewTransaction()
			tx.AddElements(set, []string{vip})
			if err := rs.Run(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
			e.clock.Step(31 * time.Second)
			if st := e.mustSync(); !st.Full {
				t.Fatal("expected a full sync")
			}
			if l := nftLines(t, rs, "element "+set); l != "" {
				t.Errorf("a full sync kept %s", l)
			}
		})
	}
}

// TestOnePacketSchedulingForUDPOnly: the ops flag (one-packet scheduling) is set on
// UDP ports, beside the scheduler's flags, and refused with a reason on others.
func TestOnePacketSchedulingForUDPOnly(t *testing.T) {
	for _, c := range []struct {
		proto     v1.Protocol
		sched     string
		flags     string
		wantFlags uint32
		refused   int
	}{
		{v1.ProtocolUDP, "rr", "ops", ipvs.FlagOnePacket, 0},
		{v1.ProtocolUDP, "mh", "mh-port,ops", ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2 | ipvs.FlagOnePacket, 0},
		{v1.ProtocolTCP, "rr", "ops", 0, 1},
		{v1.ProtocolSCTP, "mh", "ops", ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2, 1},
	} {
		sched, flags, refused := chooseScheduler("rr", &proxy.ServicePortInfo{Protocol: c.proto, Scheduler: c.sched, SchedulerFlags: c.flags, SchedulerSource: proxy.AnnotationScheduler})
		if sched != c.sched || flags != c.wantFlags || len(refused) != c.refused {
			t.Errorf("%s %s %q: got %s %#x %v, want %#x and %d refusals", c.proto, c.sched, c.flags, sched, flags, refused, c.wantFlags, c.refused)
		}
		if c.refused > 0 && !strings.Contains(refused[0].reason, "UDP ports only") {
			t.Errorf("%s: refusal %q does not say why", c.proto, refused[0].reason)
		}
	}
	// Through a sync: the UDP virtual server gets the flag, the kernel takes it.
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "syslog", clusterIP("10.96.0.9"), port("p", v1.ProtocolUDP, 514, 0), annotate(proxy.AnnotationSchedulerFlags, "ops")),
		makeSlice("ns", "syslog", "s-1", udp("p", 514), endpoint("10.244.2.1"), endpoint("10.244.2.2")))
	if d := e.ipvs.Dump(); !strings.Contains(d, "UDP  10.96.0.9:514 rr ops") {
		t.Errorf("no one-packet UDP virtual server:\n%s", d)
	}
}
