//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// Pod addresses 10.244.0.231-233 and fd00:244::231-233. The node is dual-stack
// (node-setup.sh: cbr0 fd00:244::1/64, eth0 fd00:10::15/64; the apiserver
// allocates ClusterIPs from 10.96.0.0/16 and fd00:96::/112; clusterCIDR holds
// both pod ranges).

// addDualPods creates dual-stack pods prefix-a, prefix-b... at 10.244.0.<first+i>
// and fd00:244::<first+i>.
func addDualPods(t *testing.T, ctx context.Context, prefix string, first, n int) []*framework.Pod {
	t.Helper()
	return addPodsOf(t, ctx, prefix, first, n, true)
}

// TestDualStack: on a dual-stack node a RequireDualStack NodePort Service over two
// dual-stack pods gets a virtual server per family; its IPv6 ClusterIP and the
// node's IPv6 NodePort answer from the node and from a pod (the pod's own IPv6
// address reaches the endpoint: in-cluster traffic is not masqueraded), as do the
// IPv4 ones; the IPv6 state has upstream's shape: the KUBE-6-* sets (every IPv4
// set, a name over ipset's 31 characters cut to 31 as upstream cuts it), the same
// chains as IPv4, and the KUBE-6 sets in their rules.
func TestDualStack(t *testing.T) {
	ctx, ns := scenario(t, "e2e-dual")
	pods := addDualPods(t, ctx, "ds", 231, 2)
	client := addDualPods(t, ctx, "dsc", 233, 1)[0]
	svc := createServiceWith(t, ctx, ns, "web", corev1.ServiceTypeNodePort, func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}, endpoints(pods), framework.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	var eps6 []framework.Endpoint
	for _, p := range pods {
		eps6 = append(eps6, framework.Endpoint{PodName: p.Name, IP: p.IP6})
	}
	if _, err := framework.CreateEndpointSliceOf(ctx, cp.Client, svc, discoveryv1.AddressTypeIPv6, eps6...); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("the apiserver gave %v, want one ClusterIP per family", svc.Spec.ClusterIPs)
	}
	v4, v6, np := svc.Spec.ClusterIPs[0], svc.Spec.ClusterIPs[1], svc.Spec.Ports[0].NodePort

	var want6 []string
	for _, p := range pods {
		want6 = append(want6, "["+p.IP6+"]:8080 Masq")
	}
	waitRealServers(t, ctx, "TCP", "["+v6+"]:80", want6)
	waitRealServers(t, ctx, "TCP", fmt.Sprintf("[%s]:%d", framework.NodeIP6, np), want6)
	waitRealServers(t, ctx, "TCP", v4+":80", masq(pods))

	both := map[string]int{pods[0].Name: 2, pods[1].Name: 2}
	for _, addr := range []string{"[" + v6 + "]:80", fmt.Sprintf("[%s]:%d", framework.NodeIP6, np), v4 + ":80", fmt.Sprintf("%s:%d", framework.NodeIP, np)} {
		expectAnswers(t, ctx, "", "tcp", addr, 4, both)
		expectAnswers(t, ctx, client.Name, "tcp", addr, 4, both)
	}
	// From a pod to the IPv6 ClusterIP the endpoint sees the pod's own address.
	out, err := node.ClientFrom(ctx, client.Name, "tcp", "["+v6+"]:80", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, " from=["+client.IP6+"]:") {
			t.Errorf("pod -> [%s]:80 arrived as %q, want from=[%s]", v6, line, client.IP6)
		}
	}

	// The IPv6 state, as upstream shapes it (the nftables pass: the table's ip6- half).
	guest(t, ctx, "ip -6 addr show dev kube-ipvs0 | grep -q 'inet6 "+v6+"/128'")
	guest(t, ctx, framework.ServicesRuleUsesClusterIPs(true))
	if framework.NFTablesPass() {
		dualStackNFTables(t, ctx, v6, np, pods[0].IP6)
	} else {
		dualStackIPTables(t, ctx, v6, np, pods[0].IP6)
	}

	// Deleting the Service removes both families' state.
	if err := framework.DeleteService(ctx, cp.Client, svc); err != nil {
		t.Fatal(err)
	}
	err = framework.Eventually(ctx, 60*time.Second, time.Second, func(ctx context.Context) error {
		out, err := vm.Sh(ctx, "ipvsadm -Ln | grep -c -F -e '["+v6+"]:80' -e '"+v4+":80' || true")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "0" {
			return fmt.Errorf("%s virtual servers of the deleted Service remain", strings.TrimSpace(out))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// dualStackIPTables checks the iptables backend's IPv6 state: the KUBE-6-*
// sets hold the Service's members, every IPv4 set has its KUBE-6 counterpart,
// the IPv6 chains are the IPv4 ones, and every IPv6 rule has an IPv4 twin.
func dualStackIPTables(t *testing.T, ctx context.Context, v6 string, np int32, ip6 string) {
	t.Helper()
	guest(t, ctx, fmt.Sprintf(`ipset test KUBE-6-CLUSTER-IP %s,tcp:80 && ipset test KUBE-6-NODE-PORT-TCP %d && ipset test KUBE-6-LOOP-BACK %s,tcp:8080,%s`, v6, np, ip6, ip6))

	sets := func(family string) []string {
		out := guest(t, ctx, `ipset list -t | awk '/^Name:/ {n=$2} /^Header:/ {for (i=1;i<NF;i++) if ($i=="family") print n, $(i+1)}'`)
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[1] == family && strings.HasPrefix(f[0], "KUBE-") {
				names = append(names, f[0])
			}
		}
		slices.Sort(names)
		return names
	}
	var want []string
	for _, n := range sets("inet") {
		n6 := "KUBE-6-" + strings.TrimPrefix(n, "KUBE-")
		if len(n6) > 31 { // ipset's limit: upstream truncates the name to it
			n6 = n6[:31]
		}
		want = append(want, n6)
	}
	// Bitmap port sets have no family; compare the hash sets.
	if got := sets("inet6"); !slices.Equal(got, want) {
		t.Errorf("IPv6 sets %v, want the IPv4 ones under upstream's KUBE-6 names %v", got, want)
	}
	chains := func(save string) string {
		return guest(t, ctx, `for t in nat filter; do `+save+` -t $t | awk -v t=$t '/^:KUBE-/ {print t, substr($1, 2)}'; done | sort`)
	}
	if c4, c6 := chains("iptables-save"), chains("ip6tables-save"); c4 != c6 {
		t.Errorf("IPv6 chains differ from IPv4's:\n%s\nIPv6:\n%s", c4, c6)
	}
	refs := func(save, prefix string) string {
		return guest(t, ctx, save+` | grep -o -- '-A [A-Z0-9-]* .*--match-set [A-Z0-9-]*' | awk '{print $2, $NF}' | sed 's/ `+prefix+`/ KUBE-/' | sort -u`)
	}
	// A set's rules are written only while it has members, and IPv4 has Services
	// IPv6 has not: every IPv6 reference must be one IPv4 makes too, and this
	// Service's own must be there.
	r4, r6 := strings.Split(strings.TrimSpace(refs("iptables-save", "KUBE-")), "\n"), strings.Split(strings.TrimSpace(refs("ip6tables-save", "KUBE-6-")), "\n")
	for _, r := range r6 {
		if !slices.Contains(r4, r) {
			t.Errorf("IPv6 rule in %q (KUBE-6- read as KUBE-) has no IPv4 counterpart in:\n%s", r, strings.Join(r4, "\n"))
		}
	}
	for _, r := range []string{"KUBE-SERVICES KUBE-CLUSTER-IP", "KUBE-NODE-PORT KUBE-NODE-PORT-TCP", "KUBE-POSTROUTING KUBE-LOOP-BACK"} {
		if !slices.Contains(r6, r) {
			t.Errorf("no IPv6 rule %q (KUBE-6- read as KUBE-) in:\n%s", r, strings.Join(r6, "\n"))
		}
	}
}

// dualStackNFTables checks the nftables backend's IPv6 half of the table: its
// sets hold the Service's members, it has every chain, set and rule the IPv4
// half has (with the family's prefix, address type and match), and nothing
// else.
func dualStackNFTables(t *testing.T, ctx context.Context, v6 string, np int32, ip6 string) {
	t.Helper()
	guest(t, ctx, fmt.Sprintf("%s | grep -qx '%s,tcp:80' && %s | grep -qx '%d' && %s | grep -qx '%s,tcp:8080,%s'",
		framework.ListSet("KUBE-6-CLUSTER-IP"), v6, framework.ListSet("KUBE-6-NODE-PORT-TCP"), np, framework.ListSet("KUBE-6-LOOP-BACK"), ip6, ip6))
	canon, err := nftTable(ctx, vm.Sh)
	if err != nil {
		t.Fatal(err)
	}
	if m := nftIncomplete(canon, "ip-", "ip6-"); len(m) > 0 {
		t.Fatalf("the table lacks %s:\n%s", strings.Join(m, "; "), canon)
	}
	// The IPv6 half, read as IPv4: the same objects and rules. Elements and
	// the rules naming addresses (the cluster CIDR, loopback, node addresses)
	// differ by family and are left out.
	family := strings.NewReplacer(" ip6-", " ip-", "@ip6-", "@ip-", "ip6 saddr", "ip saddr", "ip6 daddr", "ip daddr",
		"ipv6_addr", "ipv4_addr", "nfproto ipv6", "nfproto ipv4", "icmpv6", "icmp")
	half := func(prefix string) []string {
		var out []string
		for _, l := range strings.Split(canon, "\n") {
			f := strings.Fields(l)
			if len(f) < 2 || f[0] == "element" || !strings.HasPrefix(f[1], prefix) || strings.ContainsAny(l, ":/") && f[0] == "rule" {
				continue
			}
			out = append(out, family.Replace(l))
		}
		slices.Sort(out)
		return out
	}
	if h4, h6 := half("ip-"), half("ip6-"); !slices.Equal(h4, h6) {
		t.Errorf("the table's IPv6 half (read as IPv4) differs from its IPv4 half:\nIPv4:\n%s\nIPv6:\n%s", strings.Join(h4, "\n"), strings.Join(h6, "\n"))
	}
}
