package ipvs

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
	nft "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/nftables"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
)

// refusedUDP sends one datagram to a closed port of addr and reports whether the
// kernel's ICMP port unreachable came back (the socket reads ECONNREFUSED).
func refusedUDP(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("udp", net.JoinHostPort(addr, "9"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return true
	case errors.Is(err, syscall.EAGAIN) || isTimeout(err):
		return false
	}
	t.Fatalf("reading from %s: %v", addr, err)
	return false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestIntegrationQuietRules: with the real iptables (both backends, both families) the
// rules that hold back refusals during a scheduler change are accepted by
// iptables-restore, really drop the ICMP port unreachable the kernel sends from the
// quieted address (the one IPVS sends in a scheduler swap takes the same OUTPUT path as
// this UDP one), and are removed again by their "-D" text.
func TestIntegrationQuietRules(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		for _, mode := range []iptables.Mode{iptables.ModeLegacy, iptables.ModeNFT} {
			for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
				t.Run(string(mode)+"/"+string(family), func(t *testing.T) {
					proto, addr := iptables.ProtocolIPv4, "127.0.0.1"
					if family == v1.IPv6Protocol {
						proto, addr = iptables.ProtocolIPv6, "::1"
					}
					ipt := iptables.New(utilexec.New(), proto, mode)
					jump := []string{"-j", string(chainIPVSOutFilter)}
					if _, err := ipt.EnsureChain(ctx, iptables.TableFilter, chainIPVSOutFilter); err != nil {
						t.Fatal(err)
					}
					if _, err := ipt.EnsureRule(ctx, iptables.Prepend, iptables.TableFilter, iptables.ChainOutput, jump...); err != nil {
						t.Fatal(err)
					}
					defer func() {
						_ = ipt.DeleteRule(ctx, iptables.TableFilter, iptables.ChainOutput, jump...)
						_ = ipt.FlushChain(ctx, iptables.TableFilter, chainIPVSOutFilter)
						_ = ipt.DeleteChain(ctx, iptables.TableFilter, chainIPVSOutFilter)
					}()
					saved := func() string {
						var buf bytes.Buffer
						if err := ipt.SaveInto(ctx, iptables.TableFilter, &buf); err != nil {
							t.Fatal(err)
						}
						return buf.String()
					}

					if !refusedUDP(t, addr) {
						t.Fatalf("no refusal from %s before the rule: the test cannot see what the rule hides", addr)
					}
					if err := ipt.RestoreAll(ctx, quietRules(family, "-I", []string{addr}), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
						t.Fatalf("inserting the rules: %v", err)
					}
					if s := saved(); !strings.Contains(s, quietComment) || !strings.Contains(s, "-j DROP") {
						t.Fatalf("the rule is not in the table:\n%s", s)
					}
					if refusedUDP(t, addr) {
						t.Errorf("the ICMP port unreachable from %s still reached the client", addr)
					}
					if err := ipt.RestoreAll(ctx, quietRules(family, "-D", []string{addr}), iptables.NoFlushTables, iptables.NoRestoreCount); err != nil {
						t.Fatalf("deleting the rules: %v", err)
					}
					if s := saved(); strings.Contains(s, quietComment) {
						t.Errorf("the rule is still there:\n%s", s)
					}
					if !refusedUDP(t, addr) {
						t.Errorf("no refusal from %s after the rule went", addr)
					}
				})
			}
		}
	})
}

// TestIntegrationNFTQuiet: the nftables backend's form of the same, in the kernel's
// nftables: an address in the family's quiet set has its ICMP port unreachables
// dropped by the filter-output rule, also for nftQuietLinger after the quiet ended, and
// taken out of the set it has them back.
func TestIntegrationNFTQuiet(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		rs, err := nft.NewNetlink(nftTable, utilexec.New())
		if err != nil {
			t.Fatal(err)
		}
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			t.Run(string(family), func(t *testing.T) {
				addr := "127.0.0.1"
				if family == v1.IPv6Protocol {
					addr = "::1"
				}
				e := newNFTEnv(t, family, rs)
				e.start()
				if !refusedUDP(t, addr) {
					t.Fatalf("no refusal from %s before: the test cannot see what the set hides", addr)
				}
				loud := e.p.rules.quiet(context.Background(), []string{addr}, &SyncStats{})
				if refusedUDP(t, addr) {
					t.Errorf("the ICMP port unreachable from %s still reached the client", addr)
				}
				loud()
				if refusedUDP(t, addr) {
					t.Errorf("the refusal from %s came back at once: the quiet must linger %v after the edits", addr, nftQuietLinger)
				}
				e.clock.Step(nftQuietLinger)
				if !waitFor(5*time.Second, func() bool { return refusedUDP(t, addr) }) {
					t.Errorf("no refusal from %s after the address left the set", addr)
				}
			})
		}
	})
}
