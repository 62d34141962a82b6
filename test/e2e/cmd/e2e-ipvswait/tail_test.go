package main

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// countingReader counts the reads the -all wait makes of a fake IPVS.
type countingReader struct {
	*ipvs.Fake
	dumps, bulk, single, rss int
}

func (c *countingReader) GetVirtualServers(ctx context.Context) ([]*ipvs.VirtualServer, error) {
	c.dumps++
	return c.Fake.GetVirtualServers(ctx)
}

func (c *countingReader) GetAll(ctx context.Context, af ipfamily.Family, keep func(*ipvs.VirtualServer) bool) ([]ipvs.VirtualServerDump, error) {
	c.bulk++
	return c.Fake.GetAll(ctx, af, keep)
}

func (c *countingReader) GetVirtualServer(ctx context.Context, vs *ipvs.VirtualServer) (*ipvs.VirtualServer, error) {
	c.single++
	return c.Fake.GetVirtualServer(ctx, vs)
}

func (c *countingReader) GetRealServers(ctx context.Context, vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error) {
	c.rss++
	return c.Fake.GetRealServers(ctx, vs)
}

func (c *countingReader) reset() { c.dumps, c.bulk, c.single, c.rss = 0, 0, 0, 0 }

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

// TestTailIsProbedNotDumped: while more than tailProbe virtual servers are
// missing a poll is one dump; once at most tailProbe are, one bulk read marks
// the complete ones and later polls read only the rest, one by one, until they
// hold exactly their real servers.
func TestTailIsProbedNotDumped(t *testing.T) {
	const n = 1000
	ctx := context.Background()
	f := ipvs.NewFake()
	c := &countingReader{Fake: f}
	wants := tailWants(n)
	aw := newAllWait(wants)
	for i := range 500 {
		program(t, f, wants[i], rsIPOf(i))
	}
	present, err := aw.poll(ctx, c, ipfamily.IPv4)
	if err != nil || present != 500 || c.dumps != 1 || c.bulk != 0 || aw.complete != 0 {
		t.Fatalf("500 missing: present %d (err %v), %d dumps, %d bulk reads, %d complete; want 500, 1 dump, no bulk read, 0 complete", present, err, c.dumps, c.bulk, aw.complete)
	}
	// 100 missing, one more present without its real server yet.
	for i := 500; i < 900; i++ {
		program(t, f, wants[i], rsIPOf(i))
	}
	program(t, f, wants[900], nil)
	c.reset()
	present, err = aw.poll(ctx, c, ipfamily.IPv4)
	if err != nil || present != 901 || c.dumps != 1 || c.bulk != 1 || aw.complete != 900 || len(aw.left) != 100 {
		t.Fatalf("99 missing: present %d (err %v), %d dumps, %d bulk reads, %d complete, %d left; want 901, 1, 1, 900, 100",
			present, err, c.dumps, c.bulk, aw.complete, len(aw.left))
	}
	// The tail: no dump, one read of real servers for each of the 100 left,
	// and an existence check for those without any.
	program(t, f, wants[901], rsIPOf(901))
	program(t, f, wants[902], net.IPv4(10, 244, 99, 99)) // the wrong real server
	c.reset()
	present, err = aw.poll(ctx, c, ipfamily.IPv4)
	if err != nil || present != 903 || c.dumps != 0 || c.bulk != 0 || c.rss != 100 || c.single != 98 || aw.complete != 901 {
		t.Fatalf("tail: present %d (err %v), %d dumps, %d bulk, %d real-server reads, %d single reads, %d complete; want 903, 0, 0, 100, 98, 901",
			present, err, c.dumps, c.bulk, c.rss, c.single, aw.complete)
	}
	if err := f.DeleteRealServer(ctx, wants[902].vs, &ipvs.RealServer{Address: net.IPv4(10, 244, 99, 99), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	for i := 900; i < n; i++ {
		if i != 901 {
			program(t, f, wants[i], rsIPOf(i))
		}
	}
	c.reset()
	present, err = aw.poll(ctx, c, ipfamily.IPv4)
	if err != nil || present != n || aw.complete != n || c.rss != 99 || c.dumps+c.bulk != 0 {
		t.Fatalf("all programmed: present %d (err %v), %d complete, %d real-server reads, %d dumps+bulk; want %d, %d, 99, 0",
			present, err, aw.complete, c.rss, c.dumps+c.bulk, n, n)
	}
}

// TestSmallTableIsDumpedUntilPresent: a table no larger than tailProbe is
// dumped until every virtual server is there, then read in bulk once.
func TestSmallTableIsDumpedUntilPresent(t *testing.T) {
	ctx := context.Background()
	f := ipvs.NewFake()
	c := &countingReader{Fake: f}
	wants := tailWants(10)
	aw := newAllWait(wants)
	for i := range 9 {
		program(t, f, wants[i], rsIPOf(i))
	}
	if present, err := aw.poll(ctx, c, ipfamily.IPv4); err != nil || present != 9 || c.bulk != 0 {
		t.Fatalf("9 of 10: present %d (err %v), %d bulk reads; want 9 and none", present, err, c.bulk)
	}
	program(t, f, wants[9], rsIPOf(9))
	if present, err := aw.poll(ctx, c, ipfamily.IPv4); err != nil || present != 10 || c.bulk != 1 || aw.complete != 10 {
		t.Fatalf("10 of 10: present %d (err %v), %d bulk reads, %d complete; want 10, 1, 10", present, err, c.bulk, aw.complete)
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
