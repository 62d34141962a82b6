package ipvs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/ipvs"
)

func diff(t *testing.T, what, want, got string) {
	t.Helper()
	if d := cmp.Diff(strings.TrimSpace(want), strings.TrimSpace(got)); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func TestClusterIPGolden(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(
		makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "web-1", tcp("http", 8080),
			endpoint("10.244.1.5"), endpoint("10.244.2.7")),
	)
	diff(t, "ipvs", `
TCP  10.96.0.10:80 rr
  -> 10.244.1.5:8080 Masq 1 0 0
  -> 10.244.2.7:8080 Masq 1 0 0
`, e.ipvs.Dump())
	diff(t, "ipset members", `
KUBE-CLUSTER-IP 10.96.0.10,tcp:80
KUBE-IPVS-IPS 10.96.0.10
KUBE-LOOP-BACK 10.244.1.5,tcp:8080,10.244.1.5
`, e.setMembers())
	diff(t, "addresses", `
eth0: 192.168.0.10 fd00:1::10
eth1: 192.168.1.10
kube-ipvs0 (dummy): 10.96.0.10
lo: 127.0.0.1 ::1
`, e.nl.Dump())
	diff(t, "iptables", `
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
COMMIT
`, e.iptablesSave())
	// Every sysctl the ipvs mode needs is set.
	diff(t, "sysctls", `
net/ipv4/ip_forward = 1
net/ipv4/vs/conntrack = 1
net/ipv4/vs/expire_nodest_conn = 1
net/ipv4/vs/expire_quiescent_template = 1
`, e.sc.Dump())
}

func TestVirtualServerStats(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol)
	e.start(makeService("ns", "web", clusterIP("10.96.0.10"), port("http", v1.ProtocolTCP, 80, 0)),
		makeSlice("ns", "web", "web-1", tcp("http", 8080), endpoint("10.244.2.7")))
	vss, _ := e.ipvs.GetVirtualServers(t.Context())
	if err := e.ipvs.SetVirtualServerStats(vss[0], ipvs.Counters{Connections: 3, PacketsIn: 10, PacketsOut: 9, BytesIn: 1000, BytesOut: 900}); err != nil {
		t.Fatal(err)
	}
	got := e.p.VirtualServerStats()
	want := []metrics.VirtualServerStats{{Namespace: "ns", Service: "web", PortName: "http", Scheduler: "rr", Protocol: "TCP", Address: "10.96.0.10", Port: 80,
		Connections: 3, IncomingPackets: 10, OutgoingPackets: 9, IncomingBytes: 1000, OutgoingBytes: 900}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
}

// TestStrictARP (kubernetes#59976): with strictARP the node stops answering ARP for
// addresses on kube-ipvs0.
func TestStrictARP(t *testing.T) {
	e := newTestEnv(t, v1.IPv4Protocol, func(o *Options) { o.StrictARP = true })
	for name, want := range map[string]int{"net/ipv4/conf/all/arp_ignore": 1, "net/ipv4/conf/all/arp_announce": 2} {
		if got, err := e.sc.GetSysctl(name); err != nil || got != want {
			t.Errorf("%s = %d (%v), want %d", name, got, err, want)
		}
	}
	plain := newTestEnv(t, v1.IPv4Protocol)
	if got, _ := plain.sc.GetSysctl("net/ipv4/conf/all/arp_ignore"); got != 0 {
		t.Errorf("arp_ignore set without strictARP")
	}
}
