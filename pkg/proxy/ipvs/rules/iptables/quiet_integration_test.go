package iptables

import (
	"bytes"
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	utiliptables "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// TestIntegrationQuietRules: with the real iptables (both backends, both families) the
// rules that hold back refusals during a scheduler change are accepted by
// iptables-restore, really drop the ICMP port unreachable the kernel sends from the
// quieted address (the one IPVS sends in a scheduler swap takes the same OUTPUT path as
// this UDP one), and are removed again by their "-D" text.
func TestIntegrationQuietRules(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		for _, mode := range []utiliptables.Mode{utiliptables.ModeLegacy, utiliptables.ModeNFT} {
			for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
				t.Run(string(mode)+"/"+string(family), func(t *testing.T) {
					proto, addr := utiliptables.ProtocolIPv4, "127.0.0.1"
					if family == v1.IPv6Protocol {
						proto, addr = utiliptables.ProtocolIPv6, "::1"
					}
					ipt := utiliptables.New(utilexec.New(), proto, mode)
					jump := []string{"-j", string(chainIPVSOutFilter)}
					if _, err := ipt.EnsureChain(ctx, utiliptables.TableFilter, chainIPVSOutFilter); err != nil {
						t.Fatal(err)
					}
					if _, err := ipt.EnsureRule(ctx, utiliptables.Prepend, utiliptables.TableFilter, utiliptables.ChainOutput, jump...); err != nil {
						t.Fatal(err)
					}
					defer func() {
						_ = ipt.DeleteRule(ctx, utiliptables.TableFilter, utiliptables.ChainOutput, jump...)
						_ = ipt.FlushChain(ctx, utiliptables.TableFilter, chainIPVSOutFilter)
						_ = ipt.DeleteChain(ctx, utiliptables.TableFilter, chainIPVSOutFilter)
					}()
					saved := func() string {
						var buf bytes.Buffer
						if err := ipt.SaveInto(ctx, utiliptables.TableFilter, &buf); err != nil {
							t.Fatal(err)
						}
						return buf.String()
					}

					if !netns.RefusedUDP(t, addr) {
						t.Fatalf("no refusal from %s before the rule: the test cannot see what the rule hides", addr)
					}
					if err := ipt.RestoreAll(ctx, quietRules(family, "-I", []string{addr}), utiliptables.NoFlushTables, utiliptables.NoRestoreCount); err != nil {
						t.Fatalf("inserting the rules: %v", err)
					}
					if s := saved(); !strings.Contains(s, rules.QuietComment) || !strings.Contains(s, "-j DROP") {
						t.Fatalf("the rule is not in the table:\n%s", s)
					}
					if netns.RefusedUDP(t, addr) {
						t.Errorf("the ICMP port unreachable from %s still reached the client", addr)
					}
					if err := ipt.RestoreAll(ctx, quietRules(family, "-D", []string{addr}), utiliptables.NoFlushTables, utiliptables.NoRestoreCount); err != nil {
						t.Fatalf("deleting the rules: %v", err)
					}
					if s := saved(); strings.Contains(s, rules.QuietComment) {
						t.Errorf("the rule is still there:\n%s", s)
					}
					if !netns.RefusedUDP(t, addr) {
						t.Errorf("no refusal from %s after the rule went", addr)
					}
				})
			}
		}
	})
}
