package ipvs

// Test addresses: 10.0.0.1 and fd00::1 are the virtual servers the real
// servers are added to; every other address is the value under test (the
// kernel's refusals are about the address type, not about a network).

import (
	"context"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipfamily"
)

// refusal is one call and the outcome the kernel gives (errKind).
type refusal struct {
	name string
	// vs is the virtual server of the call; for a real server case it is one of
	// the two base virtual servers, which exist.
	vs *VirtualServer
	rs *RealServer // nil: a virtual server case
	// update: UpdateVirtualServer on an existing virtual server (rs == nil).
	update bool
	want   string
}

func refusalVS(addr string) *VirtualServer {
	return &VirtualServer{Address: net.ParseIP(addr), Protocol: TCP, Port: 80, Scheduler: "rr"}
}

// refusals is the table the Fake and the kernel (in the VM) must answer alike.
var refusals = []refusal{
	// Real servers: ip_vs_new_dest accepts an IPv4 destination only when
	// inet_addr_type says RTN_UNICAST or RTN_LOCAL, else EINVAL.
	{name: "v4 multicast 224.0.0.1", rs: &RealServer{Address: net.ParseIP("224.0.0.1"), Port: 80, Weight: 1}, want: "einval"},
	{name: "v4 multicast 239.255.255.250", rs: &RealServer{Address: net.ParseIP("239.255.255.250"), Port: 80, Weight: 1}, want: "einval"},
	{name: "v4 limited broadcast", rs: &RealServer{Address: net.ParseIP("255.255.255.255"), Port: 80, Weight: 1}, want: "einval"},
	{name: "v4 unspecified", rs: &RealServer{Address: net.ParseIP("0.0.0.0"), Port: 80, Weight: 1}, want: "einval"},
	// inet_addr_type calls only 0.0.0.0 itself broadcast, not the rest of
	// 0.0.0.0/8 (seen on 6.1).
	{name: "v4 zero network 0.1.2.3", rs: &RealServer{Address: net.ParseIP("0.1.2.3"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v4 loopback is local", rs: &RealServer{Address: net.ParseIP("127.0.0.1"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v4 loopback 127.1.2.3 is local", rs: &RealServer{Address: net.ParseIP("127.1.2.3"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v4 link-local", rs: &RealServer{Address: net.ParseIP("169.254.1.1"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v4 class E", rs: &RealServer{Address: net.ParseIP("240.0.0.1"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v4 last before broadcast", rs: &RealServer{Address: net.ParseIP("255.255.255.254"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v4 port 0", rs: &RealServer{Address: net.ParseIP("10.1.0.1"), Port: 0, Weight: 1}, want: "ok"},
	// IPv6: unicast and not link-local, unless the address is local.
	{name: "v6 multicast ff02::1", rs: &RealServer{Address: net.ParseIP("ff02::1"), Port: 80, Weight: 1}, want: "einval"},
	{name: "v6 multicast ff05::2", rs: &RealServer{Address: net.ParseIP("ff05::2"), Port: 80, Weight: 1}, want: "einval"},
	{name: "v6 unspecified", rs: &RealServer{Address: net.ParseIP("::"), Port: 80, Weight: 1}, want: "einval"},
	{name: "v6 link-local", rs: &RealServer{Address: net.ParseIP("fe80::1"), Port: 80, Weight: 1}, want: "einval"},
	{name: "v6 loopback", rs: &RealServer{Address: net.ParseIP("::1"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v6 v4-compatible", rs: &RealServer{Address: net.ParseIP("::10.1.0.1"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v6 site-local", rs: &RealServer{Address: net.ParseIP("fec0::1"), Port: 80, Weight: 1}, want: "ok"},
	{name: "v6 global", rs: &RealServer{Address: net.ParseIP("2001:db8::1"), Port: 80, Weight: 1}, want: "ok"},

	// Virtual servers: the kernel checks the scheduler, not the address type.
	{name: "vs unknown scheduler", vs: &VirtualServer{Address: net.ParseIP("10.0.0.2"), Protocol: TCP, Port: 80, Scheduler: "nosuchsched"}, want: "notfound"},
	{name: "vs update to unknown scheduler", vs: &VirtualServer{Address: net.ParseIP("10.0.0.1"), Protocol: TCP, Port: 80, Scheduler: "nosuchsched"}, update: true, want: "notfound"},
	{name: "vs scheduler none", vs: &VirtualServer{Address: net.ParseIP("10.0.0.3"), Protocol: TCP, Port: 80, Scheduler: "none"}, want: "ok"},
	{name: "vs empty scheduler", vs: &VirtualServer{Address: net.ParseIP("10.0.0.4"), Protocol: TCP, Port: 80, Scheduler: ""}, want: "notfound"},
	{name: "vs v4 multicast", vs: refusalVS("224.0.0.1"), want: "ok"},
	{name: "vs v4 limited broadcast", vs: refusalVS("255.255.255.255"), want: "ok"},
	{name: "vs v4 unspecified", vs: refusalVS("0.0.0.0"), want: "ok"},
	{name: "vs v4 loopback", vs: refusalVS("127.0.0.1"), want: "ok"},
	{name: "vs v6 multicast", vs: refusalVS("ff02::1"), want: "ok"},
	{name: "vs v6 unspecified", vs: refusalVS("::"), want: "ok"},
	{name: "vs v6 link-local", vs: refusalVS("fe80::1"), want: "ok"},
	{name: "vs port 0", vs: &VirtualServer{Address: net.ParseIP("10.0.0.5"), Protocol: UDP, Port: 0, Scheduler: "rr"}, want: "ok"},
}

// checkRefusalContract runs refusals against an empty Interface. A refused call
// changes nothing: a refused real server is then unknown to update and delete
// (ENOENT: the kernel looks it up before anything else), and the table holds
// exactly what was accepted.
func checkRefusalContract(t *testing.T, h Interface) {
	t.Helper()
	ctx := context.Background()
	base4, base6 := refusalVS("10.0.0.1"), refusalVS("fd00::1")
	for _, vs := range []*VirtualServer{base4, base6} {
		expectKind(t, "add base "+vs.Key(), h.AddVirtualServer(ctx, vs), "ok")
	}
	for _, c := range refusals {
		switch {
		case c.rs != nil:
			vs := base4
			if c.rs.Address.To4() == nil {
				vs = base6
			}
			expectKind(t, c.name+": add real server", h.AddRealServer(ctx, vs, c.rs), c.want)
			if c.want == "ok" {
				expectKind(t, c.name+": delete", h.DeleteRealServer(ctx, vs, c.rs), "ok")
				continue
			}
			expectKind(t, c.name+": update after refusal", h.UpdateRealServer(ctx, vs, c.rs), "notfound")
			expectKind(t, c.name+": delete after refusal", h.DeleteRealServer(ctx, vs, c.rs), "notfound")
		case c.update:
			expectKind(t, c.name, h.UpdateVirtualServer(ctx, c.vs), c.want)
		default:
			expectKind(t, c.name, h.AddVirtualServer(ctx, c.vs), c.want)
			if c.want == "ok" {
				expectKind(t, c.name+": delete", h.DeleteVirtualServer(ctx, c.vs), "ok")
			} else {
				_, err := h.GetVirtualServer(ctx, c.vs)
				expectKind(t, c.name+": get after refusal", err, "notfound")
			}
		}
	}
	all, err := h.GetAll(ctx, ipfamily.Any, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "TCP/10.0.0.1:80 rr flags=0x0 timeout=0\nTCP/[fd00::1]:80 rr flags=0x0 timeout=0"
	if diff := cmp.Diff(want, tableText(all)); diff != "" {
		t.Errorf("table after the refusals (-want +got):\n%s", diff)
	}
	expectKind(t, "flush", h.Flush(ctx), "ok")
}

func TestFakeRefusalContract(t *testing.T) {
	checkRefusalContract(t, NewFake())
}
