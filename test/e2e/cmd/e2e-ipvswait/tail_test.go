package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// countingReader counts the reads the -all wait makes of a fake IPVS; a dump
// takes dumpCost.
type countingReader struct {
	fake     *ipvs.Fake
	dumps    int
	reads    map[string]int // probes, by virtual server
	dumpCost time.Duration
}

func (c *countingReader) GetVirtualServers(ctx context.Context) ([]*ipvs.VirtualServer, error) {
	c.dumps++
	time.Sleep(c.dumpCost)
	return c.fake.GetVirtualServers(ctx)
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

func (c *countingReader) reset() { c.dumps, c.reads = 0, map[string]int{} }

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

// tailFixture is a fake IPVS whose dumps take dumpCost, holding the first
// programmed of n wanted virtual servers, and an -all wait for the n.
func tailFixture(t *testing.T, n, programmed int, dumpCost time.Duration) (*ipvs.Fake, *countingReader, []want, *allWait) {
	t.Helper()
	f := ipvs.NewFake()
	c := &countingReader{fake: f, dumpCost: dumpCost}
	c.reset()
	wants := tailWants(n)
	for i := range programmed {
		program(t, f, wants[i], rsIPOf(i))
	}
	return f, c, wants, newAllWait(wants)
}

// TestPollsReadTheNewOnes: a poll dumps the table and reads the real servers
// of each wanted virtual server there and not complete (missing, partial or
// wrong real servers), never one that was complete or is not there.
func TestPollsReadTheNewOnes(t *testing.T) {
	const n = 1000
	ctx := context.Background()
	f, c, wants, aw := tailFixture(t, n, 500, 0)
	program(t, f, wants[500], nil)                       // no real server yet
	program(t, f, wants[501], net.IPv4(10, 244, 99, 99)) // the wrong one
	if err := aw.poll(ctx, c); err != nil {
		t.Fatal(err)
	}
	if aw.complete != 500 || c.dumps != 1 || c.total() != 502 || aw.probing {
		t.Fatalf("first poll: %d complete, %d dumps, %d probes, probing %v; want 500, 1, 502, false", aw.complete, c.dumps, c.total(), aw.probing)
	}
	for i := 502; i < 900; i++ {
		program(t, f, wants[i], rsIPOf(i))
	}
	c.reset()
	if err := aw.poll(ctx, c); err != nil {
		t.Fatal(err)
	}
	if aw.complete != 898 || c.total() != 400 || c.reads[wants[0].vs.Key()] != 0 || c.reads[wants[950].vs.Key()] != 0 {
		t.Fatalf("second poll: %d complete, %d probes (%d of a complete one, %d of a missing one); want 898 and 400 probes, none of those",
			aw.complete, c.total(), c.reads[wants[0].vs.Key()], c.reads[wants[950].vs.Key()])
	}
	if err := f.DeleteRealServer(ctx, wants[501].vs, &ipvs.RealServer{Address: net.IPv4(10, 244, 99, 99), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	for i := 500; i < n; i++ {
		if i < 502 || i >= 900 {
			program(t, f, wants[i], rsIPOf(i))
		}
	}
	c.reset()
	if err := aw.poll(ctx, c); err != nil || aw.complete != n || c.total() != 102 || len(aw.left) != 0 {
		t.Fatalf("all programmed: %d complete (err %v), %d probes, %d left; want %d, 102, 0", aw.complete, err, c.total(), len(aw.left), n)
	}
}

// TestPollsStopDumpingWhenProbesCostLess: once reading each virtual server left
// costs less than the last dump, a poll no longer dumps and reads all left.
func TestPollsStopDumpingWhenProbesCostLess(t *testing.T) {
	ctx := context.Background()
	f, c, wants, aw := tailFixture(t, 20, 10, 50*time.Millisecond)
	if err := aw.poll(ctx, c); err != nil {
		t.Fatal(err)
	}
	if !aw.probing || aw.complete != 10 {
		t.Fatalf("10 probes of a fake after a 50 ms dump: probing %v, %d complete; want probing, 10", aw.probing, aw.complete)
	}
	c.reset()
	if err := aw.poll(ctx, c); err != nil {
		t.Fatal(err)
	}
	if c.dumps != 0 || c.total() != 10 {
		t.Fatalf("probing: %d dumps, %d probes; want 0 and the 10 left", c.dumps, c.total())
	}
	for i := 10; i < 20; i++ {
		program(t, f, wants[i], rsIPOf(i))
	}
	if err := aw.poll(ctx, c); err != nil || aw.complete != 20 {
		t.Fatalf("all programmed: %d complete (err %v)", aw.complete, err)
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

// TestPacedByTheDumpNotTheFirstReads: the wait after a poll that dumped is paced
// by the dump, not by the one-time reads of the new virtual servers.
func TestPacedByTheDumpNotTheFirstReads(t *testing.T) {
	ctx := context.Background()
	_, c, _, aw := tailFixture(t, 2000, 2000, 5*time.Millisecond)
	began := time.Now()
	if err := aw.poll(ctx, c); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if aw.paced < c.dumpCost || aw.paced > took || aw.paced != aw.dumpCost {
		t.Fatalf("a poll of a %s dump and 2,000 first reads (%s in all) is paced by %s; want the dump's %s", c.dumpCost, took, aw.paced, aw.dumpCost)
	}
}
