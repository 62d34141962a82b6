package iptables

// Real-kernel tests: each runs in its own network namespace (netns.Run) against
// both the legacy and the nft backend.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/testing/netns"
	utilexec "k8s.io/utils/exec"
)

func mustRun(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// resetKernel empties both backends' filter and nat tables and creates the ipsets
// the scenarios reference.
func resetKernel(t *testing.T) {
	t.Helper()
	for _, mode := range []Mode{ModeLegacy, ModeNFT} {
		for _, bin := range []string{"iptables-", "ip6tables-"} {
			for _, table := range []string{"filter", "nat", "mangle"} {
				mustRun(t, bin+string(mode), "-t", table, "-F")
				mustRun(t, bin+string(mode), "-t", table, "-X")
			}
			mustRun(t, bin+string(mode), "-t", "filter", "-P", "FORWARD", "ACCEPT")
		}
	}
	exec.Command("ipset", "destroy").Run()
	mustRun(t, "ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port")
	mustRun(t, "ipset", "create", "KUBE-NODE-PORT-TCP", "bitmap:port", "range", "0-65535")
	mustRun(t, "ipset", "create", "KUBE-IPVS-IPS", "hash:ip")
}

func forEachMode(t *testing.T, f func(t *testing.T, mode Mode)) {
	for _, mode := range []Mode{ModeLegacy, ModeNFT} {
		t.Run(string(mode), func(t *testing.T) { f(t, mode) })
	}
}

func TestIntegrationRestoreConformance(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		forEachMode(t, func(t *testing.T, mode Mode) {
			runRestoreScenarios(t, func(t *testing.T) backend {
				resetKernel(t)
				return backend{ipt: New(utilexec.New(), ProtocolIPv4, mode), nft: mode == ModeNFT}
			})
		})
	})
}

func TestIntegrationCommands(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		forEachMode(t, func(t *testing.T, mode Mode) {
			for _, proto := range []Protocol{ProtocolIPv4, ProtocolIPv6} {
				t.Run(string(proto), func(t *testing.T) {
					resetKernel(t)
					runCommandScenario(t, New(utilexec.New(), proto, mode))
				})
			}
		})
	})
}

// TestIntegrationHostileComment checks with the real binaries that a hostile
// Service name written through Builder comes back from iptables-save exactly as
// written and does not add rules.
func TestIntegrationHostileComment(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		names := []string{
			hostileName,
			`"`, `\`, `\"`, `'`, "#", "", " ", "a\x00b", "\xff\xfe", "ns/a b:c",
			strings.Repeat("é", 200), "COMMIT", "-A INPUT -j DROP", "\r\nCOMMIT\n*filter\n-F\n",
		}
		forEachMode(t, func(t *testing.T, mode Mode) {
			resetKernel(t)
			for _, proto := range []Protocol{ProtocolIPv4, ProtocolIPv6} {
				ipt := New(utilexec.New(), proto, mode)
				var b Builder
				b.Table(TableFilter)
				b.Chain("KUBE-T", "-")
				var want []string
				for _, n := range names {
					b.Line("-A", "KUBE-T", "-m", "comment", "--comment", n, "-j", "RETURN")
					want = append(want, JoinWords("-A", "KUBE-T", "-m", "comment", "--comment", n, "-j", "RETURN"))
				}
				b.Commit()
				if err := ipt.RestoreAll(context.Background(), b.Bytes(), NoFlushTables, NoRestoreCount); err != nil {
					t.Fatalf("%s: %v\n%s", proto, err, b.String())
				}
				var buf bytes.Buffer
				if err := ipt.SaveInto(context.Background(), TableFilter, &buf); err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, l := range strings.Split(buf.String(), "\n") {
					if strings.HasPrefix(l, "-A ") {
						got = append(got, l)
					}
				}
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s: rules read back differ:\ngot:\n%s\nwant:\n%s", proto, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	})
}

// TestIntegrationDetectMode fills one backend with rules and checks the heuristic
// and the override.
func TestIntegrationDetectMode(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		ctx := context.Background()
		resetKernel(t)
		check := func(want Mode) {
			t.Helper()
			got, err := DetectMode(ctx, utilexec.New())
			if err != nil || got != want {
				t.Errorf("DetectMode = %q, %v; want %q", got, err, want)
			}
		}
		t.Setenv(EnvMode, "")
		check(ModeNFT) // empty: tie
		mustRun(t, "iptables-legacy", "-A", "INPUT", "-j", "ACCEPT")
		check(ModeLegacy) // more rules in legacy
		mustRun(t, "iptables-nft", "-N", "KUBE-FOO")
		mustRun(t, "iptables-nft", "-A", "KUBE-FOO", "-j", "RETURN")
		check(ModeNFT) // more kube rules in nft
		mustRun(t, "iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT")
		check(ModeLegacy) // kubelet's hint
		t.Setenv(EnvMode, "nft")
		check(ModeNFT)
		t.Setenv(EnvMode, "bogus")
		if _, err := DetectMode(ctx, utilexec.New()); err == nil {
			t.Error("DetectMode accepted a bogus override")
		}
	})
}

// tenKRules builds a nat table with n rules spread over 100 chains.
func tenKRules(n int) []byte {
	var b Builder
	b.Table(TableNAT)
	for c := 0; c < 100; c++ {
		b.Chain(Chain(fmt.Sprintf("KUBE-SVC-%03d", c)), "-")
	}
	for i := 0; i < n; i++ {
		b.Line("-A", fmt.Sprintf("KUBE-SVC-%03d", i%100), "-d", fmt.Sprintf("10.%d.%d.%d/32", i>>16&255, i>>8&255, i&255),
			"-p", "tcp", "-m", "comment", "--comment", fmt.Sprintf("ns%d/svc%d:http", i%7, i), "-m", "tcp", "--dport", "80", "-j", "MARK", "--set-xmark", "0x4000/0x4000")
	}
	b.Commit()
	return b.Bytes()
}

// BenchmarkIntegrationRestore10k measures one iptables-restore of 10k rules.
func BenchmarkIntegrationRestore10k(b *testing.B) {
	netns.RunBenchmark(b, func(b *testing.B) {
		data := tenKRules(10000)
		for _, mode := range []Mode{ModeLegacy, ModeNFT} {
			b.Run(string(mode), func(b *testing.B) {
				ipt := New(utilexec.New(), ProtocolIPv4, mode)
				for i := 0; i < b.N; i++ {
					if err := ipt.RestoreAll(context.Background(), data, NoFlushTables, NoRestoreCount); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
}

// TestIntegrationRestore10k applies 10k rules once per backend and reads them back.
func TestIntegrationRestore10k(t *testing.T) {
	netns.Run(t, func(t *testing.T) {
		data := tenKRules(10000)
		forEachMode(t, func(t *testing.T, mode Mode) {
			ipt := New(utilexec.New(), ProtocolIPv4, mode)
			start := time.Now()
			if err := ipt.RestoreAll(context.Background(), data, NoFlushTables, NoRestoreCount); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: restored 10000 rules in %v", mode, time.Since(start))
			var buf bytes.Buffer
			if err := ipt.SaveInto(context.Background(), TableNAT, &buf); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(buf.String(), "\n-A KUBE-SVC-"); n != 10000 {
				t.Errorf("%d rules read back, want 10000", n)
			}
		})
	})
}
