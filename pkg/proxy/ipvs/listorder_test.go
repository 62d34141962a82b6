package ipvs

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

// listOrder is the kernel's list of the real servers of TCP 10.96.0.9:80, most
// recently added first, as "IP:weight" words.
func listOrder(e *testEnv) string {
	vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.9"), Protocol: "TCP", Port: 80}
	var words []string
	for _, rs := range e.ipvs.ListOrder(vs) {
		words = append(words, rs.Address.String()+":"+strconv.Itoa(rs.Weight))
	}
	return strings.Join(words, " ")
}

// orderSlice is the EndpointSlice of Service ns/hash with the endpoints ips.
func orderSlice(ips ...string) *discovery.EndpointSlice {
	var eps []discovery.Endpoint
	for _, ip := range ips {
		eps = append(eps, endpoint(ip))
	}
	return makeSlice("ns", "hash", "h-1", tcp("p", 80), eps...)
}

// history runs one node's history of Service ns/hash with scheduler sched: each step
// is the endpoints of the slice at one sync.
func history(t *testing.T, sched string, steps ...[]string) *testEnv {
	t.Helper()
	e := newTestEnv(t, v1.IPv4Protocol)
	svc := makeService("ns", "hash", clusterIP("10.96.0.9"), port("p", v1.ProtocolTCP, 80, 0), annotate(proxy.AnnotationScheduler, sched))
	prev := orderSlice(steps[0]...)
	e.start(svc, prev)
	for _, ips := range steps[1:] {
		cur := orderSlice(ips...)
		e.updateSlice(prev, cur)
		e.mustSync()
		prev = cur
	}
	return e
}

// TestOrderSensitiveListOrder: mh and sh build their tables walking the kernel's list
// of real servers, which the kernel grows at its head. Nodes that reach the same
// endpoints through different histories (one synced two additions at once, one saw
// them one by one, one started late) end with the same list: the one adding every
// real server in key order makes, highest key first. Other schedulers are left as the
// kernel orders them, with no extra writes.
func TestOrderSensitiveListOrder(t *testing.T) {
	const want = "10.244.2.4:1 10.244.2.3:1 10.244.2.2:1 10.244.2.1:1"
	all := []string{"10.244.2.1", "10.244.2.2", "10.244.2.3", "10.244.2.4"}
	for _, sched := range []string{"mh", "sh"} {
		histories := map[string]*testEnv{
			"all at once":           history(t, sched, all),
			"one by one, high last": history(t, sched, all[:1], all[:2], all[:3], all),
			"one by one, low last":  history(t, sched, all[3:], all[2:], all[1:], all),
			"two at once, mixed":    history(t, sched, []string{"10.244.2.3"}, []string{"10.244.2.1", "10.244.2.3", "10.244.2.4"}, all),
			"one removed and back":  history(t, sched, all, all[1:], all),
		}
		for name, e := range histories {
			if got := listOrder(e); got != want {
				t.Errorf("%s, %s: kernel list %q, want %q", sched, name, got, want)
			}
		}
	}

	// rr: the kernel's own order, each real server written once.
	e := history(t, "rr", all[3:], all[2:], all[1:], all)
	if got, w := listOrder(e), "10.244.2.1:1 10.244.2.2:1 10.244.2.3:1 10.244.2.4:1"; got != w {
		t.Errorf("rr: kernel list %q, want %q (added one by one, lowest last)", got, w)
	}
}

// TestListOrderBusyAndDraining: a real server whose key sorts after a new one is
// added again only when it has no established connection (deleting it would make
// the kernel expire its connections): a draining one with only inactive entries comes
// back at weight 0 (the kernel then keeps no slot of the table for it) and keeps
// draining; a busy one stays where it is.
func TestListOrderBusyAndDraining(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	svc := makeService("ns", "hash", clusterIP("10.96.0.9"), port("p", v1.ProtocolTCP, 80, 0), annotate(proxy.AnnotationScheduler, "mh"))
	s1 := orderSlice("10.244.2.2", "10.244.2.4", "10.244.2.5")
	e.start(svc, s1)
	vs := &ipvs.VirtualServer{Address: net.ParseIP("10.96.0.9"), Protocol: "TCP", Port: 80}
	conns := func(ip string, active, inactive int) {
		if err := e.ipvs.SetRealServerConnections(vs, &ipvs.RealServer{Address: net.ParseIP(ip), Port: 80}, active, inactive); err != nil {
			t.Fatal(err)
		}
	}
	conns("10.244.2.4", 0, 1)
	conns("10.244.2.5", 1, 0)
	// 10.244.2.4 leaves (it has a connection entry: it drains), then 10.244.2.3 comes.
	s2 := orderSlice("10.244.2.2", "10.244.2.5")
	e.updateSlice(s1, s2)
	e.mustSync()
	if got, w := listOrder(e), "10.244.2.5:1 10.244.2.4:0 10.244.2.2:1"; got != w {
		t.Fatalf("after the drain: kernel list %q, want %q", got, w)
	}
	s3 := orderSlice("10.244.2.2", "10.244.2.3", "10.244.2.5")
	e.updateSlice(s2, s3)
	e.ipvs.ResetOps()
	e.mustSync()
	if got, w := listOrder(e), "10.244.2.4:0 10.244.2.3:1 10.244.2.5:1 10.244.2.2:1"; got != w {
		t.Errorf("after the add: kernel list %q, want %q (.4 added again after .3, busy .5 in place)", got, w)
	}
	if ops := e.ipvs.Ops(); ops[ipvs.OpAddRS] != 2 || ops[ipvs.OpDelRS] != 1 || ops[ipvs.OpUpdateRS] != 0 {
		t.Errorf("writes %v, want 2 adds and 1 delete (the new one; the draining one deleted and added again)", ops)
	}
	rss, err := e.ipvs.GetRealServers(context.Background(), vs)
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range rss {
		if rs.Address.String() == "10.244.2.4" && rs.InactiveConn != 1 {
			t.Errorf("10.244.2.4 lost its connection entry: %+v", rs)
		}
	}
	draining := 0
	for k := range e.p.draining {
		if k.rs.String() == "10.244.2.4:80" {
			draining++
		}
	}
	if draining != 1 {
		t.Errorf("10.244.2.4 no longer draining: %v", e.p.draining)
	}
}
