package framework

import (
	"os/exec"
	"strings"
	"testing"
)

// A listing as nft prints it: elements over several lines, a concatenation
// with a CIDR, an empty set.
const nftSetListing = `table inet kube-proxy-ipvs {
	set ip-cluster-ip {
		type ipv4_addr . inet_proto . inet_service
		comment "cluster IP, protocol and port"
		elements = { 10.96.0.1 . tcp . 443, 10.96.0.10 . udp . 53,
			     10.96.0.10 . tcp . 53 }
	}
}
`

func runAwk(t *testing.T, proto, in string) string {
	t.Helper()
	cmd := exec.Command("awk", "-v", "proto="+proto, nftMembersAwk)
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("awk: %v", err)
	}
	return string(out)
}

func TestNFTMembersAwk(t *testing.T) {
	if got, want := runAwk(t, "", nftSetListing), "10.96.0.1,tcp:443\n10.96.0.10,udp:53\n10.96.0.10,tcp:53\n"; got != want {
		t.Errorf("cluster-ip members:\n%s\nwant:\n%s", got, want)
	}
	ports := strings.NewReplacer("ip-cluster-ip", "ip-node-port").Replace(`table inet kube-proxy-ipvs {
	set ip-cluster-ip {
		type inet_proto . inet_service
		elements = { tcp . 30080, udp . 30053, tcp . 31000 }
	}
}`)
	if got, want := runAwk(t, "tcp", ports), "30080\n31000\n"; got != want {
		t.Errorf("tcp node ports %q, want %q", got, want)
	}
	src := `		elements = { 10.0.2.61 . tcp . 80 . 10.244.0.122,
			     fd00::1 . tcp . 80 . 10.0.0.0/8 }`
	if got, want := runAwk(t, "", src), "10.0.2.61,tcp:80,10.244.0.122\nfd00::1,tcp:80,10.0.0.0/8\n"; got != want {
		t.Errorf("source ranges %q, want %q", got, want)
	}
	if got := runAwk(t, "", "\tset ip-external-ip {\n\t\ttype ipv4_addr . inet_proto . inet_service\n\t}\n"); got != "" {
		t.Errorf("an empty set printed %q", got)
	}
}

func TestNFTSetFor(t *testing.T) {
	for name, want := range map[string][2]string{
		"KUBE-CLUSTER-IP":                 {"ip-cluster-ip", ""},
		"KUBE-6-CLUSTER-IP":               {"ip6-cluster-ip", ""},
		"KUBE-NODE-PORT-UDP":              {"ip-node-port", "udp"},
		"KUBE-6-LOAD-BALANCER-SOURCE-CID": {"ip6-load-balancer-source", ""},
		"KUBE-6-NODE-PORT-LOCAL-SCTP-HAS": {"ip6-node-port-local-sctp", ""},
		"KUBE-NODE-PORT-LOCAL-SCTP-HASH":  {"ip-node-port-local-sctp", ""},
	} {
		set, proto, err := NFTSetFor(name)
		if err != nil || set != want[0] || proto != want[1] {
			t.Errorf("NFTSetFor(%s) = %s %q %v, want %s %q", name, set, proto, err, want[0], want[1])
		}
	}
	if _, _, err := NFTSetFor("KUBE-NO-SUCH-SET"); err == nil {
		t.Error("an unknown ipset has a set")
	}
}
