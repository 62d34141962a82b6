//go:build e2e

package e2e

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/framework"
)

// pauseOurKubeProxy stops our kube-proxy if it runs and, when the test ends,
// starts it again (same config, ready within 90 s), so that a scenario that
// needs the node to itself leaves the suite as it found it.
func pauseOurKubeProxy(t *testing.T, ctx context.Context) {
	t.Helper()
	if !node.KubeProxyRunning(ctx) {
		return
	}
	if err := node.StopKubeProxy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if node.KubeProxyRunning(ctx) {
			return
		}
		if err := node.StartKubeProxy(ctx, cp, framework.KubeProxyConfig("")); err != nil {
			t.Errorf("restarting our kube-proxy after the scenario: %v", err)
			return
		}
		if err := node.WaitKubeProxyReady(ctx, 90*time.Second); err != nil {
			t.Errorf("our kube-proxy after the scenario: %v", err)
		}
	})
}

// sortedLines returns the non-empty lines of s, sorted.
func sortedLines(s string) []string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	return lines
}

// TestCleanupKeepsForeignKUBEState: a node that upstream's iptables and
// nftables modes programmed, also running kube-router (whose chains and ipsets
// are KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*, KUBE-SRC-*, KUBE-DST-*):
// `kube-proxy --cleanup` removes exactly upstream's chains (by name, and the
// per-Service KUBE-SVC-/SEP-/EXT-/SVL-/FW- hash chains), their jump rules and
// the "ip/ip6 kube-proxy" nftables tables, and the virtual servers of upstream's
// ipvs mode (on kube-ipvs0, a node port on the node's address); every foreign chain,
// rule, set, set member and nftables table survives, Calico's cali-* chains and a
// keepalived virtual server on one of the node ports (its VIP held elsewhere)
// included.
func TestCleanupKeepsForeignKUBEState(t *testing.T) {
	defaultBackendOnly(t)
	dumpOnFailure(t)
	ctx := context.Background()
	pauseOurKubeProxy(t, ctx)
	runCleanup(t, ctx) // start from a node without kube-proxy state
	if r, err := vm.Exec(ctx, "bash", "-x", "/kpi/scripts/foreign-kube-state.sh"); err != nil || r.ExitCode != 0 {
		t.Fatalf("foreign-kube-state.sh: %v, exit %d:\n%s%s", err, r.ExitCode, r.Stdout, r.Stderr)
	}
	before := guest(t, ctx, "iptables-save | grep -c '^:KUBE-'; ipset list -n | grep -c '^KUBE-'; nft list tables | grep -c kube-proxy")
	t.Logf("before --cleanup (KUBE chains, KUBE ipsets, kube-proxy nftables tables): %s", strings.Join(strings.Fields(before), " "))

	runCleanup(t, ctx)

	chains := guest(t, ctx, `for t in nat filter mangle; do iptables-save -t $t | awk -v t=$t '/^:KUBE-/ {print t, substr($1, 2)}'; done`)
	wantChains := []string{
		"filter KUBE-NWPLCY-LBFODUCDZ4KNAEPD",
		"filter KUBE-POD-FW-XY3QPEMSFBYW4NXR",
		"filter KUBE-ROUTER-FORWARD",
		"filter KUBE-ROUTER-INPUT",
		"nat KUBE-ROUTER-HAIRPIN",
		"nat KUBE-SVC-ROUTERLOOKALIKE",
	}
	if diff := cmp.Diff(wantChains, sortedLines(chains)); diff != "" {
		t.Errorf("KUBE- chains after --cleanup (-want +got):\n%s", diff)
	}
	jumps := guest(t, ctx, `for t in nat filter mangle; do iptables-save -t $t | grep -E '^-A (PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) .*-j KUBE-' | sed "s/^/$t /"; done`)
	wantJumps := []string{
		`filter -A FORWARD -m comment --comment "kube-router netpol" -j KUBE-ROUTER-FORWARD`,
		`filter -A INPUT -m comment --comment "kube-router netpol" -j KUBE-ROUTER-INPUT`,
		`nat -A POSTROUTING -m comment --comment "kube-router hairpin" -j KUBE-ROUTER-HAIRPIN`,
	}
	if diff := cmp.Diff(wantJumps, sortedLines(jumps)); diff != "" {
		t.Errorf("jumps from built-in chains after --cleanup (-want +got):\n%s", diff)
	}
	policy := guest(t, ctx, "iptables -S KUBE-NWPLCY-LBFODUCDZ4KNAEPD; iptables -S KUBE-POD-FW-XY3QPEMSFBYW4NXR")
	for _, want := range []string{"--match-set KUBE-SRC-QHFSCNLEDHCOY6AN src -m set --match-set KUBE-DST-VXGMXAR5CU2IZTVI dst -j ACCEPT", "-A KUBE-POD-FW-XY3QPEMSFBYW4NXR -j KUBE-NWPLCY-LBFODUCDZ4KNAEPD"} {
		if !strings.Contains(policy, want) {
			t.Errorf("kube-router's rule %q is gone:\n%s", want, policy)
		}
	}
	sets := guest(t, ctx, "ipset list -n | grep '^KUBE-' || true")
	if diff := cmp.Diff([]string{"KUBE-DST-VXGMXAR5CU2IZTVI", "KUBE-ROUTER-LOCAL-IPS", "KUBE-SRC-QHFSCNLEDHCOY6AN"}, sortedLines(sets)); diff != "" {
		t.Errorf("KUBE- ipsets after --cleanup (-want +got):\n%s", diff)
	}
	if members := guest(t, ctx, "ipset list KUBE-DST-VXGMXAR5CU2IZTVI | sed -n '/^Members:/,$p' | tail -n +2"); strings.TrimSpace(members) != "10.244.0.252" {
		t.Errorf("members of kube-router's KUBE-DST-VXGMXAR5CU2IZTVI after --cleanup: %q, want 10.244.0.252", members)
	}
	tables := guest(t, ctx, "nft list tables")
	if strings.Contains(tables, "kube-proxy") || !strings.Contains(tables, "table ip e2e-foreign") {
		t.Errorf("nftables tables after --cleanup: want no kube-proxy table and \"ip e2e-foreign\" kept:\n%s", tables)
	}
	// IPVS: ours (on kube-ipvs0, and a node port on the node's address) gone; the
	// keepalived virtual server on the same node port, whose VIP is not this node's, kept.
	vss := guest(t, ctx, "ipvsadm -Sn")
	wantVS := []string{"-A -t 192.0.2.80:30123 -s wrr", "-a -t 192.0.2.80:30123 -r 10.244.0.250:8080 -m -w 2"}
	if diff := cmp.Diff(wantVS, sortedLines(vss)); diff != "" {
		t.Errorf("IPVS after --cleanup (-want +got):\n%s", diff)
	}
	// Calico's chains, jumps and set.
	cali := guest(t, ctx, "iptables-save -t filter | grep cali; iptables-save -t nat | grep cali; ipset list -n | grep cali")
	for _, want := range []string{
		":cali-INPUT", ":cali-FORWARD", ":cali-fw-cali1234567890a", ":cali-nat-outgoing",
		`-A INPUT -m comment --comment "cali:Cz_u1IQiXIMmKD4c" -j cali-INPUT`,
		`-A FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD`,
		`-A POSTROUTING -m comment --comment "cali:O3lYWMrLQYEMJtB5" -j cali-nat-outgoing`,
		"-A cali-fw-cali1234567890a -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"--match-set cali40all-ipam-pools src",
		"cali40all-ipam-pools\n",
	} {
		if !strings.Contains(cali+"\n", want) {
			t.Errorf("Calico's %q is gone after --cleanup:\n%s", want, cali)
		}
	}
	// Leave the node without the foreign state for the next scenarios.
	guest(t, ctx, `iptables -D INPUT -m comment --comment "kube-router netpol" -j KUBE-ROUTER-INPUT
iptables -D FORWARD -m comment --comment "kube-router netpol" -j KUBE-ROUTER-FORWARD
iptables -t nat -D POSTROUTING -m comment --comment "kube-router hairpin" -j KUBE-ROUTER-HAIRPIN
for c in KUBE-ROUTER-INPUT KUBE-ROUTER-FORWARD KUBE-POD-FW-XY3QPEMSFBYW4NXR KUBE-NWPLCY-LBFODUCDZ4KNAEPD; do iptables -F $c; done
for c in KUBE-ROUTER-INPUT KUBE-ROUTER-FORWARD KUBE-POD-FW-XY3QPEMSFBYW4NXR KUBE-NWPLCY-LBFODUCDZ4KNAEPD; do iptables -X $c; done
iptables -t nat -F KUBE-ROUTER-HAIRPIN; iptables -t nat -X KUBE-ROUTER-HAIRPIN
iptables -t nat -F KUBE-SVC-ROUTERLOOKALIKE; iptables -t nat -X KUBE-SVC-ROUTERLOOKALIKE
for s in KUBE-SRC-QHFSCNLEDHCOY6AN KUBE-DST-VXGMXAR5CU2IZTVI KUBE-ROUTER-LOCAL-IPS; do ipset destroy $s; done
nft delete table ip e2e-foreign
ipvsadm -D -t 192.0.2.80:30123
iptables -D INPUT -m comment --comment "cali:Cz_u1IQiXIMmKD4c" -j cali-INPUT
iptables -D FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
iptables -t nat -D POSTROUTING -m comment --comment "cali:O3lYWMrLQYEMJtB5" -j cali-nat-outgoing
for c in cali-INPUT cali-FORWARD cali-fw-cali1234567890a; do iptables -F $c; done
for c in cali-INPUT cali-FORWARD cali-fw-cali1234567890a; do iptables -X $c; done
iptables -t nat -F cali-nat-outgoing; iptables -t nat -X cali-nat-outgoing
ipset destroy cali40all-ipam-pools`)
}
