package ipvs

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	nftrules "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules/nftables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationNFTBackend runs both families' proxiers with the nftables backend
// against the kernel's nftables, in a fresh namespace, and the same proxiers over
// the Fake beside them: after the start, a new Service, tampering repaired by a
// full sync and the IPv4 family switched back to iptables, the kernel's table is
// what the Fake's is.
func TestIntegrationNFTBackend(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		real, err := nft.NewNetlink(nftrules.Table(), utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		rulesets := []nft.Ruleset{real, nft.NewFakeRuleset(nftrules.Table())}
		// Someone else's writes go through a socket of their own, as nft's would.
		other, err := nft.NewNetlink(nftrules.Table(), utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		tamperers := []nft.Ruleset{other, rulesets[1]}
		type envs struct{ v4, v6 *testEnv }
		var all []envs
		for _, rs := range rulesets {
			v4 := newNFTEnv(t, v1.IPv4Protocol, rs)
			v6 := newNFTEnv(t, v1.IPv6Protocol, rs)
			all = append(all, envs{v4, v6})
		}
		same := func(step string) string {
			t.Helper()
			k, f := nftDump(t, rulesets[0]), nftDump(t, rulesets[1])
			if diff := cmp.Diff(k, f); diff != "" {
				t.Fatalf("%s: the kernel's table differs from the Fake's (-kernel +fake):\n%s", step, diff)
			}
			return k
		}
		for _, e := range all {
			e.v4.start(nftServices()...)
			e.v6.start(makeService("ns", "web6", clusterIP("fd00:96::10"), port("http", v1.ProtocolTCP, 80, 30080)),
				makeSlice("ns", "web6", "web6-1", tcp("http", 8080), endpoint("fd00:244::15")))
		}
		started := same("start")
		if started == "" {
			t.Fatal("nothing written")
		}

		for _, e := range all {
			e.v4.add(makeService("ns", "new", clusterIP("10.96.0.20"), port("p", v1.ProtocolSCTP, 80, 30080)))
			e.v4.mustSync()
		}
		want := same("a new Service")

		ctx := context.Background()
		for _, rs := range tamperers {
			for _, build := range []func(tx *nft.Transaction){
				func(tx *nft.Transaction) { tx.DeleteElements("ip-cluster-ip", []string{"10.96.0.10", "tcp", "80"}) },
				func(tx *nft.Transaction) { tx.AddElements("ip6-cluster-ip", []string{"fd00:96::99", "udp", "53"}) },
				func(tx *nft.Transaction) { tx.FlushChain("ip-services") },
				func(tx *nft.Transaction) { tx.FlushChain("ip6-nat-output"); tx.DeleteChain("ip6-nat-output") },
			} {
				tx := nft.NewTransaction()
				build(tx)
				if err := rs.Run(ctx, tx); err != nil {
					t.Fatalf("tampering: %v", err)
				}
			}
		}
		same("tampered")
		for _, e := range all {
			for _, p := range []*testEnv{e.v4, e.v6} {
				p.clock.Step(31 * time.Second)
				if st := p.mustSync(); !st.Full {
					t.Fatal("expected a full sync")
				}
			}
		}
		if got := same("repaired"); got != want {
			t.Errorf("not repaired (-want +got):\n%s", cmp.Diff(want, got))
		}

		// A set made again with another type: every IPv4 object is replaced in
		// one transaction, and the elements written again.
		for _, rs := range tamperers {
			for _, build := range []func(tx *nft.Transaction){
				func(tx *nft.Transaction) { tx.FlushChain("ip-node-port") },
				func(tx *nft.Transaction) { tx.DeleteSet("ip-node-port-local") },
				func(tx *nft.Transaction) {
					tx.AddSet(nft.Set{Name: "ip-node-port-local", Key: []nft.KeyType{nft.KeyInetService}})
					tx.AddElements("ip-node-port-local", []string{"30053"})
				},
			} {
				tx := nft.NewTransaction()
				build(tx)
				if err := rs.Run(ctx, tx); err != nil {
					t.Fatalf("tampering: %v", err)
				}
			}
		}
		same("a set of another type")
		for _, e := range all {
			e.v4.clock.Step(31 * time.Second)
			e.v4.mustSync()
		}
		if got := same("replaced"); got != want {
			t.Errorf("not replaced (-want +got):\n%s", cmp.Diff(want, got))
		}

		for _, e := range all {
			e.v4.useRulesBackend(RulesBackendIPTables, rulesetOf(e.v4), false)
			e.v4.start(nftServices()...)
		}
		if got := same("IPv4 switched to iptables"); got == "" || got == want {
			t.Errorf("the IPv6 objects should remain, alone:\n%s", got)
		}
	})
}

func rulesetOf(e *testEnv) nft.Ruleset { return e.p.kernel.NFTRules }
