package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// countingReader counts the reads the -all wait makes of a fake IPVS; the
// fake's table dumps are left out of the interface it gets.
type countingReader struct {
	fake  *ipvs.Fake
	reads map[string]int // by virtual server
}

func (c *countingReader) GetRealServers(ctx context.Context, vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error) {
	c.reads[vs.Key()]++
	return c.fake.GetRealServers(ctx, vs)
}

func (c *countingReader) total() int {
	n := 0
	for _, r := range c.reads {
		n += r
	}
	return n
}

func (c *countingReader) reset() { c.reads = map[string]int{} }

// tailWants are n virtual servers 10.96.X.Y:80, each with the one real
// server 10.244.X.Y:8080.
func tailWants(n int) []want {
	wants := make([]want, n)
	for i := range wants {
		ip := net.IPv4(10, 96, byte(i>>8), byte(i))
		wants[i] = want{
			vs:  &ipvs.VirtualServer{Address: ip, Protocol: "TCP", Port: 80, Scheduler: "rr"},
			rss: fmt.Sprintf("10.244.%d.%d:8080", byte(i>>8), byte(i)),
		}
	}
	return wants
}

func program(t *testing.T, f *ipvs.Fake, w want, rsIP net.IP) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.GetVirtualServer(ctx, w.vs); ipvs.IsNotFound(err) {
		if err := f.AddVirtualServer(ctx, w.vs); err != nil {
			t.Fatal(err)
		}
	}
	if rsIP != nil {
		if err := f.AddRealServer(ctx, w.vs, &ipvs.RealServer{Address: rsIP, Port: 8080, Weight: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

func rsIPOf(i int) net.IP { return net.IPv4(10, 244, byte(i>>8), byte(i)) }

// TestPollsReadOnlyWhatIsLeft: a poll reads each virtual server not complete
// once (its real servers: missing, partial, wrong or complete) and never one
// that was complete.
func TestPollsReadOnlyWhatIsLeft(t *testing.T) {
	const n = 1000
	ctx := context.Background()
	f := ipvs.NewFake()
	c := &countingReader{fake: f}
	c.reset()
	wants := tailWants(n)
	aw := newAllWait(wants)
	for i := range 900 {
		program(t, f, wants[i], rsIPOf(i))
	}
	program(t, f, wants[900], nil)                       // no real server yet
	program(t, f, wants[901], net.IPv4(10, 244, 99, 99)) // the wrong one
	if err := aw.poll(ctx, c, time.Hour); err != nil {
		t.Fatal(err)
	}
	if aw.complete != 900 || c.total() != n || len(c.reads) != n {
		t.Fatalf("first poll: %d complete, %d reads of %d virtual servers; want 900, %d of %d", aw.complete, c.total(), len(c.reads), n, n)
	}
	c.reset()
	if err := aw.poll(ctx, c, time.Hour); err != nil {
		t.Fatal(err)
	}
	if aw.complete != 900 || c.total() != 100 || c.reads[wants[0].vs.Key()] != 0 || c.reads[wants[950].vs.Key()] != 1 {
		t.Fatalf("second poll: %d complete, %d reads (%d of a complete one); want 900 and 100 reads, none of a complete one",
			aw.complete, c.total(), c.reads[wants[0].vs.Key()])
	}
	if err := f.DeleteRealServer(ctx, wants[901].vs, &ipvs.RealServer{Address: net.IPv4(10, 244, 99, 99), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	for i := 900; i < n; i++ {
		program(t, f, wants[i], rsIPOf(i))
	}
	c.reset()
	if err := aw.poll(ctx, c, time.Hour); err != nil || aw.complete != n || c.total() != 100 || len(aw.left) != 0 {
		t.Fatalf("all programmed: %d complete (err %v), %d reads, %d left; want %d, 100, 0", aw.complete, err, c.total(), len(aw.left), n)
	}
}

// TestPollsTakeTurnsWithinTheBudget: a poll whose budget is spent after one
// read stops there, and the next goes on from the one after, so that every
// virtual server left is read in turn.
func TestPollsTakeTurnsWithinTheBudget(t *testing.T) {
	ctx := context.Background()
	f := ipvs.NewFake()
	c := &countingReader{fake: f}
	c.reset()
	wants := tailWants(5)
	aw := newAllWait(wants)
	for range 5 {
		if err := aw.poll(ctx, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range wants {
		if c.reads[w.vs.Key()] != 1 {
			t.Fatalf("5 polls of one read each: reads %v, want each of the 5 once", c.reads)
		}
	}
	program(t, f, wants[3], rsIPOf(3))
	c.reset()
	for range 4 {
		if err := aw.poll(ctx, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	if aw.complete != 1 || c.total() != 4 {
		t.Fatalf("4 more polls: %d complete, %d reads; want 1, 4", aw.complete, c.total())
	}
}

// TestListedSetsWaitForIPVS: nftables sets, read by listing every element,
// are not read while virtual servers are still awaited; ipset headers are.
func TestListedSetsWaitForIPVS(t *testing.T) {
	for _, tc := range []struct {
		sets   string
		listed bool
	}{{"KUBE-CLUSTER-IP=5", false}, {"nft:ip-loop-back=5", true}, {"KUBE-CLUSTER-IP=1,nftset:ip/kube-proxy/service-ips=5", true}} {
		w, err := newSlowWaits(tc.sets, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if w.listed() != tc.listed {
			t.Errorf("%s: listed() = %v, want %v", tc.sets, w.listed(), tc.listed)
		}
	}
}
