package nftables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
)

// nftSampleEntries holds one ipset entry of every set, per family, in the text
// `ipset save` prints (what the proxier's desired state holds).
var nftSampleEntries = map[v1.IPFamily]map[rules.Set][]string{
	v1.IPv4Protocol: {
		rules.LoopBack:               {"10.244.0.5,tcp:8080,10.244.0.5"},
		rules.ClusterIP:              {"10.96.0.1,tcp:443", "10.96.0.10,udp:53"},
		rules.ExternalIP:             {"192.0.2.20,tcp:80"},
		rules.ExternalIPLocal:        {"192.0.2.21,tcp:80"},
		rules.LoadBalancer:           {"192.0.2.10,tcp:80"},
		rules.LoadBalancerFW:         {"192.0.2.10,tcp:80"},
		rules.LoadBalancerLocal:      {"192.0.2.11,sctp:80"},
		rules.LoadBalancerSourceIP:   {"192.0.2.10,tcp:80,192.0.2.10"},
		rules.LoadBalancerSourceCIDR: {"192.0.2.10,tcp:80,10.0.0.0/8"},
		rules.NodePortTCP:            {"30080"},
		rules.NodePortLocalTCP:       {"30081"},
		rules.NodePortUDP:            {"30053"},
		rules.NodePortLocalUDP:       {"30054"},
		rules.NodePortSCTP:           {"192.168.1.2,sctp:30132"},
		rules.NodePortLocalSCTP:      {"192.168.1.2,sctp:30133"},
		rules.HealthCheckNodePort:    {"31000"},
		rules.IPVSIPs:                {"10.96.0.1", "10.96.0.10"},
	},
	v1.IPv6Protocol: {
		rules.LoopBack:               {"fd00:10:244::5,tcp:8080,fd00:10:244::5"},
		rules.ClusterIP:              {"fd00:10:96::1,tcp:443"},
		rules.LoadBalancerSourceCIDR: {"fd00:192::10,tcp:80,fd00::/8"},
		rules.NodePortSCTP:           {"fd00:168::2,sctp:30132"},
		rules.IPVSIPs:                {"fd00:10:96::1"},
	},
}

// nftProgrammeInputs are the rule inputs a test loads: both families, and each way
// the cluster-IP masquerade is decided.
func nftProgrammeInputs() []*programmeInput {
	return []*programmeInput{
		{cfg: rules.Config{Family: v1.IPv4Protocol, MasqueradeMark: "0x004000", LocalDetectorArgs: []string{"!", "-s", "10.244.0.0/16"}},
			out: []rules.OutFilter{outFilter("192.0.2.10", rules.TCP, 80)}},
		{cfg: rules.Config{Family: v1.IPv6Protocol, MasqueradeMark: "0x004000", LocalDetectorArgs: []string{"!", "-i", "cni+"}}},
	}
}

// loadNFTProgramme writes the programme of every input and every sample element
// into r in one transaction per family.
func loadNFTProgramme(t *testing.T, r nft.Ruleset) {
	t.Helper()
	for _, in := range nftProgrammeInputs() {
		p, err := buildNFTProgramme(in)
		if err != nil {
			t.Fatal(err)
		}
		tx := nft.NewTransaction()
		p.writeAll(tx)
		f := newNFTFamily(in.cfg.Family)
		f.writeAlive(tx, minNFTLiveness)
		for base, entries := range nftSampleEntries[in.cfg.Family] {
			for _, e := range entries {
				set, fields, err := nftElement(member(base, e))
				if err != nil {
					t.Fatal(err)
				}
				tx.AddElements(f.name(set), fields)
			}
		}
		if err := r.Run(context.Background(), tx); err != nil {
			t.Fatalf("%s programme: %v", in.cfg.Family, err)
		}
	}
}

func TestNFTProgrammeLoads(t *testing.T) {
	fake := nft.NewFakeRuleset(nftTable)
	loadNFTProgramme(t, fake)
	// Writing it again changes nothing (a full resync rewrites the rules).
	before, _ := fake.Dump(context.Background())
	loadNFTProgramme(t, fake)
	after, _ := fake.Dump(context.Background())
	if before != after {
		t.Fatalf("rewriting the programme changed the table:\n%s\n---\n%s", before, after)
	}
	for _, want := range []string{
		"chain ip-nat-prerouting type nat hook prerouting priority dstnat policy accept",
		"rule ip-nat-prerouting meta nfproto != @ip-alive return comment \"nothing below applies unless kube-proxy-ipvs is running\"",
		"rule ip-nat-prerouting meta nfproto ipv4 jump ip-services",
		"rule ip6-filter-input meta nfproto != @ip6-alive return comment \"nothing below applies unless kube-proxy-ipvs is running\"",
		"rule ip6-filter-input meta nfproto ipv6 jump ip6-ipvs-filter",
		"set ip-alive type nf_proto flags timeout comment \"" + nftAliveComment + "\"",
		"element ip-alive ipv4 timeout 2m",
		"element ip6-alive ipv6 timeout 2m",
		"rule ip-services ip saddr != 10.244.0.0/16 ip daddr . meta l4proto . th dport @ip-cluster-ip jump ip-mark-masq",
		"rule ip6-services iifname != \"cni*\" ip6 daddr . meta l4proto . th dport @ip6-cluster-ip jump ip6-mark-masq",
		"rule ip-services ip daddr . meta l4proto . th dport @ip-external-ip meta iifkind != \"bridge\" fib saddr type != local accept",
		"rule ip-postrouting masquerade fully-random comment \"kubernetes service traffic requiring SNAT\"",
		"rule ip-ipvs-filter ct state new ip daddr @ip-ipvs-ips reject with icmp port-unreachable",
		"rule ip6-ipvs-filter ct state new ip6 daddr @ip6-ipvs-ips reject with icmpv6 port-unreachable",
		"rule ip-ipvs-out-filter ip saddr 192.0.2.10 meta l4proto tcp ct original ip daddr 192.0.2.10 ct original proto-dst 80 drop",
		"element ip-node-port tcp . 30080",
		"element ip-node-port udp . 30053",
		"element ip-load-balancer-source 192.0.2.10 . tcp . 80 . 10.0.0.0/8",
		"element ip-load-balancer-source 192.0.2.10 . tcp . 80 . 192.0.2.10",
		"element ip6-load-balancer-source fd00:192::10 . tcp . 80 . fd00::/8",
		"element ip-health-check-node-port tcp . 31000",
		"element ip6-loop-back fd00:10:244::5 . tcp . 8080 . fd00:10:244::5",
	} {
		if !strings.Contains(after, want+"\n") {
			t.Errorf("the table lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("table:\n%s", after)
	}
}

func TestNFTElementRefusesMalformedEntries(t *testing.T) {
	if _, _, err := nftElement(rules.Member{Set: 99, Port: 1}); err == nil {
		t.Errorf("a member of no set was accepted")
	}
	v6 := rules.Addr16(netip.MustParseAddr("fd00::1"))
	if _, err := nftOutFilterRule(newNFTFamily(v1.IPv4Protocol), rules.OutFilter{Source: v6, VAddr: v6, Proto: rules.TCP, Port: 80}); err == nil {
		t.Errorf("an IPv6 out-filter rule was accepted for IPv4")
	}
	if _, err := nftLocalDetector(newNFTFamily(v1.IPv6Protocol), []string{"!", "-s", "10.0.0.0/8"}); err == nil {
		t.Errorf("an IPv4 detector CIDR was accepted for IPv6")
	}
}

func TestNFTSourceRangesKeepTheWidest(t *testing.T) {
	in := [][]string{
		{"192.0.2.10", "tcp", "80", "10.0.0.0/8"},
		{"192.0.2.10", "tcp", "80", "10.1.0.0/16"}, // inside 10.0.0.0/8
		{"192.0.2.10", "tcp", "80", "10.2.3.4"},    // the LB address case: inside too
		{"192.0.2.10", "tcp", "80", "192.168.0.0/24"},
		{"192.0.2.10", "tcp", "80", "192.168.0.0/24"}, // twice
		{"192.0.2.10", "udp", "80", "10.1.0.0/16"},    // another port keeps its own
		{"192.0.2.10", "tcp", "80", "192.168.0.7/32"},
	}
	got, err := nftSourceRanges(in)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"192.0.2.10", "tcp", "80", "10.0.0.0/8"},
		{"192.0.2.10", "tcp", "80", "192.168.0.0/24"},
		{"192.0.2.10", "udp", "80", "10.1.0.0/16"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// What is left loads into an interval set that refuses overlaps.
	fake := nft.NewFakeRuleset(nftTable)
	p, err := buildNFTProgramme(nftProgrammeInputs()[0])
	if err != nil {
		t.Fatal(err)
	}
	tx := nft.NewTransaction()
	p.writeAll(tx)
	tx.AddElements("ip-load-balancer-source", got...)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	tx = nft.NewTransaction()
	tx.AddElements("ip-load-balancer-source", in...)
	if err := fake.Run(context.Background(), tx); err == nil {
		t.Fatalf("the overlapping ranges were accepted: the test proves nothing")
	}
	if _, err := nftSourceRanges([][]string{{"192.0.2.10", "tcp", "80", "not-a-range"}}); err == nil {
		t.Errorf("a bad range was accepted")
	}
}
