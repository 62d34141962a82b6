package ipvs

// Addresses: ClusterIPs 10.96.0.0/24, endpoints 10.244.0.0/16.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// TestHeldBackStaysHeldBackInEverySlice: a Service whose set member the kernel refuses
// is held back in every kind of sync until the member lands. A periodic resync compares
// in slices, and the slice that reaches the Service's virtual server is not the one
// that retried its member: it must not create the virtual server (traffic would be
// balanced without the rules that masquerade and filter it), must not count it as drift,
// and the held-back list must keep saying why it waits. The refusal starts before the
// resync, or between two of its slices (the Service created by a change taken there),
// for several slice sizes, so the virtual server falls in every position of the walk.
func TestHeldBackStaysHeldBackInEverySlice(t *testing.T) {
	for _, backend := range []string{"iptables", "nftables"} {
		for _, sliceKeys := range []int{1, 2, 3, 5, 8} {
			for _, startAt := range []int{0, 1, 2, 4} { // 0: before the resync; n: before slice n+1
				t.Run(fmt.Sprintf("%s/slice%d/refusedAt%d", backend, sliceKeys, startAt), func(t *testing.T) {
					heldBackThroughResync(t, backend, sliceKeys, startAt)
				})
			}
		}
	}
}

func heldBackThroughResync(t *testing.T, backend string, sliceKeys, startAt int) {
	var e *testEnv
	var refuse func(on bool)
	reason := heldBackIPSet
	if backend == "nftables" {
		rs := &refusingRuleset{FakeRuleset: nft.NewFakeRuleset(nftrules.Table())}
		e = newNFTEnv(t, v1.IPv4Protocol, rs)
		refuse = func(on bool) {
			rs.refuse = ""
			if on {
				rs.refuse = "10.96.0.99 . tcp . 80"
			}
		}
		reason = heldBackNFTables
	} else {
		e = newTestEnv(t, v1.IPv4Protocol)
		refuse = func(on bool) {
			e.ipset.InjectError = nil
			if on {
				e.ipset.InjectError = func(_ int, line string) error {
					if strings.Contains(line, "10.96.0.99") {
						return errors.New("injected: ipset refused")
					}
					return nil
				}
			}
		}
	}
	e.p.resyncSliceKeys = sliceKeys
	var objs []any
	for i := range 10 {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs, makeService("ns", name, clusterIP(fmt.Sprintf("10.96.0.%d", i+1)), port("p", v1.ProtocolTCP, 80, 0)),
			makeSlice("ns", name, name+"-1", tcp("p", 80), endpoint(fmt.Sprintf("10.244.1.%d", i+1))))
	}
	e.start(objs...)

	held := []any{makeService("ns", "held", clusterIP("10.96.0.99"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "held", "held-1", tcp("p", 80), endpoint("10.244.9.9"))}
	addHeld := func() {
		refuse(true)
		for _, o := range held {
			e.add(o)
		}
	}
	if startAt == 0 {
		addHeld()
		if st := e.mustSync(); st.Failed == 0 {
			t.Fatalf("the refused member failed nothing: %+v", st)
		}
	}
	between := 0
	e.p.betweenSlices = func() {
		between++
		if between == startAt {
			addHeld()
		}
		if strings.Contains(e.ipvs.Dump(), "10.96.0.99:80") {
			t.Errorf("before slice %d: the held-back Service's virtual server was created:\n%s", between+1, e.ipvs.Dump())
		}
	}
	e.clock.Step(e.opts.SyncPeriod)
	st := e.mustSync()
	if !st.Full || st.Slices < 2 {
		t.Fatalf("the resync ran in %d slices (full %v), want several", st.Slices, st.Full)
	}
	if startAt > between {
		t.Skipf("the resync had only %d slices: no refusal before slice %d", st.Slices, startAt+1)
	}
	if d := e.ipvs.Dump(); strings.Contains(d, "10.96.0.99:80") {
		t.Errorf("the resync created the held-back Service's virtual server:\n%s", d)
	}
	if r := st.driftRepairs(); len(r) != 0 {
		t.Errorf("the resync counted drift repairs %v; nobody changed the kernel", r)
	}
	checkHeldBack(t, e, reason, true)

	// A partial sync for another Service leaves it held back too.
	e.add(makeSlice("ns", "svc-0", "svc-0-1", tcp("p", 80), endpoint("10.244.1.1"), endpoint("10.244.2.1")))
	e.mustSync()
	checkHeldBack(t, e, reason, true)

	// So does one for the Service itself (its endpoints change) before its retry is
	// due: the refused member is not retried, and its virtual server keeps waiting.
	e.add(makeSlice("ns", "held", "held-1", tcp("p", 80), endpoint("10.244.9.9"), endpoint("10.244.9.10")))
	e.mustSync()
	if d := e.ipvs.Dump(); strings.Contains(d, "10.96.0.99:80") {
		t.Errorf("a change of the held-back Service created its virtual server:\n%s", d)
	}
	checkHeldBack(t, e, reason, true)

	// Once the kernel takes the member, the retry programs the Service.
	refuse(false)
	e.clock.Step(e.opts.SyncPeriod / 2)
	e.mustSync()
	if d := e.ipvs.Dump(); !strings.Contains(d, "TCP  10.96.0.99:80 rr\n  -> 10.244.9.9:80 Masq 1 0 0\n  -> 10.244.9.10:80 Masq 1 0 0") {
		t.Errorf("the Service was not programmed once its member landed:\n%s", d)
	}
	checkHeldBack(t, e, reason, false)
}

// checkHeldBack checks that ns/held, and only it, is listed as held back for reason
// (with its virtual server waiting), or that nothing is.
func checkHeldBack(t *testing.T, e *testEnv, reason string, want bool) {
	t.Helper()
	list := e.p.HeldBack()
	if !want {
		if len(list) != 0 {
			t.Errorf("still held back: %+v", list)
		}
		return
	}
	waiting := false
	for _, h := range list {
		if len(h.Services) != 1 || h.Services[0] != "ns/held" || h.Reason != reason {
			t.Errorf("held back %+v, want only ns/held for %s", h, reason)
		}
		if strings.HasPrefix(h.Object, "virtual server 10.96.0.99:80") || strings.Contains(h.Object, "10.96.0.99:80/TCP") ||
			strings.Contains(h.Object, "virtual server") && strings.Contains(h.Object, "waiting for") {
			waiting = true
		}
	}
	if !waiting {
		t.Errorf("the held-back list does not say the virtual server waits: %+v", list)
	}
}

// TestWaitingServiceNotRepairedByAResync: a Service whose new external IP member the
// kernel refuses keeps its virtual servers as they are until the member lands, in
// every kind of sync. Its ClusterIP virtual server, deleted meanwhile by someone else,
// is drift a resync finds while the member's retry is not due: the resync leaves it
// (the Service is held back as a whole, as in the sync that saw the refusal) and the
// retry that lands the member programs everything.
func TestWaitingServiceNotRepairedByAResync(t *testing.T) {
	for _, sliceKeys := range []int{0, 2} {
		t.Run(fmt.Sprintf("slice%d", sliceKeys), func(t *testing.T) {
			e := newTestEnv(t, v1.IPv4Protocol)
			e.p.resyncSliceKeys = sliceKeys
			e.start(makeService("ns", "held", clusterIP("10.96.0.99"), port("p", v1.ProtocolTCP, 80, 0)),
				makeSlice("ns", "held", "held-1", tcp("p", 80), endpoint("10.244.9.9")))
			e.ipset.InjectError = func(_ int, line string) error {
				if strings.Contains(line, "192.0.2.99") {
					return errors.New("injected: ipset refused")
				}
				return nil
			}
			e.add(makeService("ns", "held", clusterIP("10.96.0.99"), port("p", v1.ProtocolTCP, 80, 0), externalIPs("192.0.2.99")))
			if st := e.mustSync(); st.Failed == 0 {
				t.Fatalf("the refused member failed nothing: %+v", st)
			}
			ctx := context.Background()
			if err := e.ipvs.DeleteVirtualServer(ctx, &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.99"), Protocol: ipvs.TCP, Port: 80}); err != nil {
				t.Fatal(err)
			}
			e.clock.Step(e.opts.SyncPeriod / 2) // the member's retry is due in 1 s
			e.p.retries[retryKey{kind: retryEntry, entry: member(rules.ExternalIP, "192.0.2.99,tcp:80")}].next = e.clock.Now().Add(time.Hour)
			e.clock.Step(e.opts.SyncPeriod)
			st := e.mustSync()
			if !st.Full {
				t.Fatalf("want the periodic resync, got %+v", st)
			}
			if d := e.ipvs.Dump(); strings.Contains(d, "10.96.0.99:80") || strings.Contains(d, "192.0.2.99:80") {
				t.Errorf("the resync wrote a virtual server of the held-back Service:\n%s", d)
			}
			if r := st.driftRepairs(); len(r) != 0 {
				t.Errorf("drift repairs %v, want none (the one drift belongs to a held-back Service)", r)
			}
			e.ipset.InjectError = nil
			e.p.retries[retryKey{kind: retryEntry, entry: member(rules.ExternalIP, "192.0.2.99,tcp:80")}].next = e.clock.Now()
			e.mustSync()
			want := "TCP  10.96.0.99:80 rr\n  -> 10.244.9.9:80 Masq 1 0 0\nTCP  192.0.2.99:80 rr\n  -> 10.244.9.9:80 Masq 1 0 0\n"
			if d := e.ipvs.Dump(); d != want {
				t.Errorf("after the member landed:\n%s\nwant\n%s", d, want)
			}
		})
	}
}
