package ipvs

import (
	"context"
	"net"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipset"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// TestCleanup: --cleanup removes what the proxier programmed (both families) plus
// upstream iptables-mode leftovers, and leaves third-party virtual servers, virtual
// servers in excludeCIDRs, kubelet's chains, other chains' own rules and other
// software's KUBE-prefixed chains and sets (kube-router's) alone.
func TestCleanup(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(
		makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 30080), lbIngress("203.0.113.6"), sourceRanges("198.18.0.0/24")),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.1.2")),
		makeService("ns", "s", clusterIP("10.96.0.2"), port("p", v1.ProtocolSCTP, 90, 30090)),
		makeSlice("ns", "s", "s-1", []slicePort{{"p", v1.ProtocolSCTP, 90}}, endpoint("10.244.1.3")),
	)
	// The IPv6 proxier's state in the same kernel.
	e6 := newTestEnv(t, v1.IPv6Protocol)
	e6.ipvs, e6.ipset, e6.nl, e6.sc = e.ipvs, e.ipset, e.nl, e.sc
	p6, err := NewProxier(ctx, e6.opts, e6.kernel(), e6.clock)
	if err != nil {
		t.Fatal(err)
	}
	e6.p = p6
	svc6 := makeService("ns", "a6", clusterIP("fd00:96::1"), port("p", v1.ProtocolTCP, 80, 0))
	e6.start(svc6, makeSlice("ns", "a6", "a6-1", tcp("p", 80), endpoint("fd00:244::1:2")))

	// Third-party state that must survive.
	third := &ipvs.VirtualServer{Address: net.ParseIP("192.168.0.10"), Protocol: "TCP", Port: 8443, Scheduler: "wlc"}
	excluded := &ipvs.VirtualServer{Address: net.ParseIP("10.200.0.1"), Protocol: "TCP", Port: 30080, Scheduler: "rr"}
	// A keepalived VIP that another node holds, on one of our node ports: the port
	// is ours, the address is not (not on this node).
	keepalived := &ipvs.VirtualServer{Address: net.ParseIP("192.0.2.80"), Protocol: "TCP", Port: 30080, Scheduler: "wrr"}
	for _, vs := range []*ipvs.VirtualServer{third, excluded, keepalived} {
		if err := e.ipvs.AddVirtualServer(ctx, vs); err != nil {
			t.Fatal(err)
		}
	}
	// Upstream iptables-mode leftovers, kubelet's chains, and someone else's chain
	// jumping into ours.
	leftovers := `*nat
:KUBE-SVC-ERIFXISQEP7F7OF4 - [0:0]
:KUBE-SEP-Z6JCHCWTSDXQNTWQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:CNI-HOSTPORT - [0:0]
-A KUBE-SVC-ERIFXISQEP7F7OF4 -j KUBE-SEP-Z6JCHCWTSDXQNTWQ
-A CNI-HOSTPORT -j KUBE-MARK-MASQ
-A CNI-HOSTPORT -s 10.0.0.0/8 -j RETURN
COMMIT
*filter
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-PROXY-CANARY - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
COMMIT
*mangle
:KUBE-PROXY-CANARY - [0:0]
COMMIT
`
	if err := e.ipt.RestoreAll(ctx, []byte(leftovers), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
		t.Fatal(err)
	}
	// kube-router's state (network policy chains and sets, all KUBE- prefixed) and
	// KUBE-SVC-/KUBE-SEP- look-alikes that are not upstream's hash names: all
	// foreign, all kept, with the rules that use them.
	foreign := `*nat
:KUBE-ROUTER-HAIRPIN - [0:0]
:KUBE-SVC-FOREIGN - [0:0]
:KUBE-SEP-Z6JCHCWTSDXQNTW1 - [0:0]
-A POSTROUTING -j KUBE-ROUTER-HAIRPIN
COMMIT
*filter
:KUBE-ROUTER-INPUT - [0:0]
:KUBE-NWPLCY-LBFODUCDZ4KNAEPD - [0:0]
:KUBE-POD-FW-XY3QPEMSFBYW4NXR - [0:0]
-A INPUT -m comment --comment "kube-router netpol" -j KUBE-ROUTER-INPUT
-A KUBE-ROUTER-INPUT -j KUBE-POD-FW-XY3QPEMSFBYW4NXR
-A KUBE-POD-FW-XY3QPEMSFBYW4NXR -j KUBE-NWPLCY-LBFODUCDZ4KNAEPD
-A KUBE-NWPLCY-LBFODUCDZ4KNAEPD -m set --match-set KUBE-SRC-QHFSCNLEDHCOY6AN src -m set --match-set KUBE-DST-VXGMXAR5CU2IZTVI dst -j ACCEPT
COMMIT
`
	foreignSets := &ipset.Transaction{}
	for _, name := range []string{"KUBE-SRC-QHFSCNLEDHCOY6AN", "KUBE-DST-VXGMXAR5CU2IZTVI", "KUBE-ROUTER-LOCAL-IPS"} {
		foreignSets.Create(&ipset.Set{Name: name, Type: ipset.HashIP, Family: ipset.FamilyInet, HashSize: 1024, MaxElem: 65536})
	}
	foreignSets.Add("KUBE-DST-VXGMXAR5CU2IZTVI", "10.244.1.2")
	// A temporary set of an interrupted wrong-type replacement is ours.
	foreignSets.Create(&ipset.Set{Name: ipset.TempName("KUBE-CLUSTER-IP"), Type: ipset.HashIPPort, Family: ipset.FamilyInet, HashSize: 1024, MaxElem: 65536})
	if err := e.ipset.Apply(ctx, foreignSets); err != nil {
		t.Fatal(err)
	}
	if err := e.ipt.RestoreAll(ctx, []byte(foreign), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
		t.Fatal(err)
	}

	exclude := []*net.IPNet{mustCIDR(t, "10.200.0.0/16")}
	// Upstream's nftables mode keeps everything in "ip kube-proxy" and "ip6
	// kube-proxy"; other tables are someone else's.
	nft := nftables.NewFake(
		nftables.Table{Family: nftables.FamilyIPv4, Name: "kube-proxy"},
		nftables.Table{Family: nftables.FamilyIPv6, Name: "kube-proxy"},
		nftables.Table{Family: "inet", Name: "kube-proxy"},
		nftables.Table{Family: nftables.FamilyIPv4, Name: "cilium"},
	)
	k := CleanupKernel{IPVS: e.ipvs, IPSet: &referencedIPSet{Fake: e.ipset, ipt: e.ipt}, IPTables: []iptables.Interface{e.ipt, e6.ipt}, Netlink: e.nl, NFTables: nft}
	if err := Cleanup(ctx, k, exclude); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	diff(t, "nftables", `
table inet kube-proxy
table ip cilium
`, nft.Dump())
	diff(t, "ipvs", `
TCP  10.200.0.1:30080 rr
TCP  192.0.2.80:30080 wrr
TCP  192.168.0.10:8443 wlc
`, e.ipvs.Dump())
	diff(t, "ipsets", `
create KUBE-DST-VXGMXAR5CU2IZTVI hash:ip family inet hashsize 1024 maxelem 65536
add KUBE-DST-VXGMXAR5CU2IZTVI 10.244.1.2
create KUBE-ROUTER-LOCAL-IPS hash:ip family inet hashsize 1024 maxelem 65536
create KUBE-SRC-QHFSCNLEDHCOY6AN hash:ip family inet hashsize 1024 maxelem 65536
`, e.ipset.Dump())
	if strings.Contains(e.nl.Dump(), "kube-ipvs0") {
		t.Errorf("kube-ipvs0 left: %s", e.nl.Dump())
	}
	diff(t, "iptables v4", `
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-NWPLCY-LBFODUCDZ4KNAEPD - [0:0]
:KUBE-POD-FW-XY3QPEMSFBYW4NXR - [0:0]
:KUBE-ROUTER-INPUT - [0:0]
-A INPUT -m comment --comment "kube-router netpol" -j KUBE-ROUTER-INPUT
-A KUBE-NWPLCY-LBFODUCDZ4KNAEPD -m set --match-set KUBE-SRC-QHFSCNLEDHCOY6AN src -m set --match-set KUBE-DST-VXGMXAR5CU2IZTVI dst -j ACCEPT
-A KUBE-POD-FW-XY3QPEMSFBYW4NXR -j KUBE-NWPLCY-LBFODUCDZ4KNAEPD
-A KUBE-ROUTER-INPUT -j KUBE-POD-FW-XY3QPEMSFBYW4NXR
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-HOSTPORT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-ROUTER-HAIRPIN - [0:0]
:KUBE-SEP-Z6JCHCWTSDXQNTW1 - [0:0]
:KUBE-SVC-FOREIGN - [0:0]
-A POSTROUTING -j KUBE-ROUTER-HAIRPIN
-A CNI-HOSTPORT -s 10.0.0.0/8 -j RETURN
COMMIT
`, e.ipt.Dump())
	diff(t, "iptables v6", "", e6.ipt.Dump())

	// Idempotent.
	if err := Cleanup(ctx, k, exclude); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
}

// TestCleanupReportsWhatItCannotRemove: a failure names the object and the rest is
// still removed.
func TestCleanupReportsWhatItCannotRemove(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "a", clusterIP("10.96.0.1"), port("p", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "a", "a-1", tcp("p", 80), endpoint("10.244.1.2")))
	e.ipvs.InjectError(ipvs.OpDelVS, errInjected)
	err := Cleanup(ctx, CleanupKernel{IPVS: e.ipvs, IPSet: &referencedIPSet{Fake: e.ipset, ipt: e.ipt}, IPTables: []iptables.Interface{e.ipt}, Netlink: e.nl}, nil)
	if err == nil || !strings.Contains(err.Error(), "10.96.0.1:80") {
		t.Fatalf("Cleanup error = %v, want one naming the virtual server", err)
	}
	all, _ := e.ipset.SaveAll(ctx)
	for name := range all {
		if strings.HasPrefix(name, "KUBE-") {
			t.Errorf("set %s left although only IPVS failed", name)
		}
	}
}

var errInjected = &injectedError{}

type injectedError struct{}

func (*injectedError) Error() string { return "injected" }

func mustCIDR(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, c, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
