package nftables

// Test addresses: 10.0.0.0/8, 192.168.0.0/16 and fd00::/8; they only ever exist
// inside the test's own network namespace.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	testingclock "k8s.io/utils/clock/testing"
)

var conformanceTable = Table{Family: FamilyInet, Name: "kpi-conformance"}

// cstep is one transaction and the errno it must fail with (nil: it succeeds).
type cstep struct {
	build func(tx *Transaction)
	want  error
	// since is the first kernel release known to behave as want says (the Fake
	// always does). On an older kernel the step is left out for both when before
	// is nil (the kernel accepts it, which would make the two differ), and when
	// before is set the kernel must fail with it instead.
	since  string
	before error
	// wait passes before the step: the Fake's clock is stepped, the test sleeps
	// for the kernel.
	wait time.Duration
}

// knownRelease is the host kernel the steps marked with it were written against;
// the VM's 6.1 behaves otherwise, and no release in between was tried.
const knownRelease = "6.18"

// cscenario runs the same steps against the Fake and the kernel; after every step
// both must print the same canonical dump, and after the last it must be want
// (empty: the table does not exist).
type cscenario struct {
	name  string
	steps []cstep
	want  string
}

var (
	setSvc  = Set{Name: "svc", Key: []KeyType{KeyIPv4Addr, KeyInetProto, KeyInetService}, Comment: "service ports"}
	setSvc6 = Set{Name: "svc6", Key: []KeyType{KeyIPv6Addr, KeyInetProto, KeyInetService}}
	setSrc  = Set{Name: "src", Key: []KeyType{KeyIPv4Addr, KeyInetProto, KeyInetService, KeyIPv4Addr}, Interval: true}
	setHC   = Set{Name: "hc", Key: []KeyType{KeyInetService}}
	// setAlive holds network protocols whose elements lapse: a rule looking the
	// packet's protocol up there is on while its element lives.
	setAlive = Set{Name: "alive", Key: []KeyType{KeyNFProto}, Timeout: true, Comment: "alive"}

	chainPre  = Chain{Name: "pre", Type: ChainTypeNAT, Hook: HookPrerouting, Priority: -100}
	chainPost = Chain{Name: "post", Type: ChainTypeNAT, Hook: HookPostrouting, Priority: 100}
	chainIn   = Chain{Name: "in", Type: ChainTypeFilter, Hook: HookInput, Priority: -1}
	chainOut  = Chain{Name: "out", Type: ChainTypeFilter, Hook: HookOutput, Priority: -110}
	chainSvc  = Chain{Name: "services"}
)

func svcKey(ip, proto, port string) []string { return []string{ip, proto, port} }

func base(tx *Transaction) {
	tx.AddTable()
	tx.AddSet(setSvc)
	tx.AddChain(chainPre)
	tx.AddChain(chainSvc)
}

var cscenarios = []cscenario{
	{
		name: "every statement prints as nft lists it",
		steps: []cstep{{build: func(tx *Transaction) {
			base(tx)
			tx.AddSet(setSvc6)
			tx.AddSet(setSrc)
			tx.AddSet(setHC)
			tx.AddChain(chainPost)
			tx.AddChain(chainIn)
			tx.AddChain(chainOut)
			tx.AddRule("pre", Rule{Stmts: []Stmt{AddrIn{Field: IPSaddr, Prefix: netip.MustParsePrefix("127.0.0.0/8")}, ReturnVerdict}})
			tx.AddRule("pre", Rule{Stmts: []Stmt{FibLocal{}, JumpTo("services")}, Comment: "to the node"})
			tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IPDaddr, L4Proto, THDport}, Set: "svc"}, MarkSet{Bits: 0x4000}}, Comment: "mark it"})
			tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IPDaddr, L4Proto, THDport, IPSaddr}, Set: "src"}, ReturnVerdict}})
			tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IP6Daddr, L4Proto, THDport}, Set: "svc6"}, AcceptVerdict}})
			tx.AddRule("services", Rule{Stmts: []Stmt{AddrIn{Field: IP6Daddr, Prefix: netip.MustParsePrefix("::1/128"), Negate: true}, AddrIn{Field: IP6Saddr, Prefix: netip.MustParsePrefix("fd00::/8")}, DropVerdict}})
			tx.AddRule("services", Rule{Stmts: []Stmt{AddrIn{Field: IPDaddr, Prefix: netip.MustParsePrefix("10.1.2.0/23"), Negate: true}, FibLocal{Source: true, Negate: true}, AcceptVerdict}})
			tx.AddRule("post", Rule{Stmts: []Stmt{MarkHas{Mask: 0x4000, Negate: true}, ReturnVerdict}})
			tx.AddRule("post", Rule{Stmts: []Stmt{MarkSet{Bits: 0x4000, Xor: true}}})
			tx.AddRule("post", Rule{Stmts: []Stmt{Masquerade{FullyRandom: true}}, Comment: "kubernetes service traffic requiring SNAT"})
			tx.AddRule("in", Rule{Stmts: []Stmt{CTState{States: []string{"related", "established"}}, AcceptVerdict}})
			tx.AddRule("in", Rule{Stmts: []Stmt{MarkHas{Mask: 0x4000}, IifName{Name: "eth0"}, AcceptVerdict}})
			tx.AddRule("in", Rule{Stmts: []Stmt{InSet{Fields: []Field{THDport}, Set: "hc"}, AcceptVerdict}})
			tx.AddRule("in", Rule{Stmts: []Stmt{CTState{States: []string{"new"}}, InSet{Fields: []Field{IPDaddr, L4Proto, THDport}, Set: "svc", Negate: true}, Reject{}}})
			tx.AddRule("out", Rule{Stmts: []Stmt{IifName{Name: "kube-ipvs0", Negate: true}, Reject{}}})
			tx.AddElements("svc", svcKey("10.96.0.1", "tcp", "443"), svcKey("10.96.0.10", "udp", "53"), svcKey("10.96.0.10", "sctp", "9"))
			tx.AddElements("svc6", svcKey("fd00::1", "tcp", "80"))
			tx.AddElements("src", []string{"10.96.0.1", "tcp", "443", "10.0.0.0/8"}, []string{"10.96.0.1", "tcp", "443", "192.168.1.1"})
			tx.AddElements("hc", []string{"30000"}, []string{"31000"})
		}}},
		want: `table inet kpi-conformance
chain in type filter hook input priority filter - 1 policy accept
rule in ct state established,related accept
rule in meta mark & 0x00004000 == 0x00004000 iifname "eth0" accept
rule in th dport @hc accept
rule in ct state new ip daddr . meta l4proto . th dport != @svc reject with icmp port-unreachable
chain out type filter hook output priority -110 policy accept
rule out iifname != "kube-ipvs0" reject
chain post type nat hook postrouting priority srcnat policy accept
rule post meta mark & 0x00004000 != 0x00004000 return
rule post meta mark set meta mark ^ 0x00004000
rule post masquerade fully-random comment "kubernetes service traffic requiring SNAT"
chain pre type nat hook prerouting priority dstnat policy accept
rule pre ip saddr 127.0.0.0/8 return
rule pre fib daddr type local jump services comment "to the node"
chain services
rule services ip daddr . meta l4proto . th dport @svc meta mark set meta mark | 0x00004000 comment "mark it"
rule services ip daddr . meta l4proto . th dport . ip saddr @src return
rule services ip6 daddr . meta l4proto . th dport @svc6 accept
rule services ip6 daddr != ::1 ip6 saddr fd00::/8 drop
rule services ip daddr != 10.1.2.0/23 fib saddr type != local accept
set hc type inet_service
element hc 30000
element hc 31000
set src type ipv4_addr . inet_proto . inet_service . ipv4_addr flags interval
element src 10.96.0.1 . tcp . 443 . 10.0.0.0/8
element src 10.96.0.1 . tcp . 443 . 192.168.1.1
set svc type ipv4_addr . inet_proto . inet_service comment "service ports"
element svc 10.96.0.1 . tcp . 443
element svc 10.96.0.10 . sctp . 9
element svc 10.96.0.10 . udp . 53
set svc6 type ipv6_addr . inet_proto . inet_service
element svc6 fd00::1 . tcp . 80
`,
	},
	{
		name: "protocol, interface and conntrack matches",
		steps: []cstep{{build: func(tx *Transaction) {
			base(tx)
			tx.AddChain(chainOut)
			tx.AddRule("pre", Rule{Stmts: []Stmt{NFProto{}, JumpTo("services")}})
			tx.AddRule("pre", Rule{Stmts: []Stmt{NFProto{IPv6: true}, AcceptVerdict}})
			tx.AddRule("services", Rule{Stmts: []Stmt{IifKind{Kind: "bridge", Negate: true}, FibLocal{Source: true, Negate: true}, AcceptVerdict}})
			tx.AddRule("services", Rule{Stmts: []Stmt{IifName{Name: "cni*"}, ReturnVerdict}})
			tx.AddRule("services", Rule{Stmts: []Stmt{IifName{Name: "veth*", Negate: true}, ReturnVerdict}})
			tx.AddRule("out", Rule{Stmts: []Stmt{AddrIn{Field: IPSaddr, Prefix: netip.MustParsePrefix("10.0.0.1/32")}, L4ProtoIs{Proto: 6},
				CTOriginal{Daddr: netip.MustParseAddr("10.0.0.1"), Port: 80}, DropVerdict}})
			tx.AddRule("out", Rule{Stmts: []Stmt{AddrIn{Field: IP6Saddr, Prefix: netip.MustParsePrefix("fd00::1/128")}, L4ProtoIs{Proto: 17},
				CTOriginal{Daddr: netip.MustParseAddr("fd00::1"), Port: 53}, DropVerdict}})
			tx.AddRule("out", Rule{Stmts: []Stmt{AddrIn{Field: IPSaddr, Prefix: netip.MustParsePrefix("10.0.0.2/32")}, PortUnreachable{}, DropVerdict}, Comment: "quiet"})
			tx.AddRule("out", Rule{Stmts: []Stmt{AddrIn{Field: IP6Saddr, Prefix: netip.MustParsePrefix("fd00::2/128")}, PortUnreachable{IPv6: true}, DropVerdict}})
		}}},
		want: `table inet kpi-conformance
chain out type filter hook output priority -110 policy accept
rule out ip saddr 10.0.0.1 meta l4proto tcp ct original ip daddr 10.0.0.1 ct original proto-dst 80 drop
rule out ip6 saddr fd00::1 meta l4proto udp ct original ip6 daddr fd00::1 ct original proto-dst 53 drop
rule out ip saddr 10.0.0.2 icmp type destination-unreachable icmp code port-unreachable drop comment "quiet"
rule out ip6 saddr fd00::2 icmpv6 type destination-unreachable icmpv6 code port-unreachable drop
chain pre type nat hook prerouting priority dstnat policy accept
rule pre meta nfproto ipv4 jump services
rule pre meta nfproto ipv6 accept
chain services
rule services meta iifkind != "bridge" fib saddr type != local accept
rule services iifname "cni*" return
rule services iifname != "veth*" return
set svc type ipv4_addr . inet_proto . inet_service comment "service ports"
`,
	},
	{
		name: "a refused operation takes the whole transaction back",
		steps: []cstep{
			{build: func(tx *Transaction) {
				base(tx)
				tx.AddElements("svc", svcKey("10.96.0.1", "tcp", "443"))
				tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IPDaddr, L4Proto, THDport}, Set: "svc"}, AcceptVerdict}})
			}},
			{build: func(tx *Transaction) {
				tx.AddElements("svc", svcKey("10.96.0.2", "tcp", "443"))
				tx.FlushChain("services")
				tx.AddChain(Chain{Name: "extra"})
				tx.DeleteElements("svc", svcKey("10.96.0.3", "tcp", "443")) // missing
			}, want: unix.ENOENT},
			{build: func(tx *Transaction) {
				tx.AddElements("svc", svcKey("10.96.0.4", "udp", "53"))
				tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IPDaddr, L4Proto, THDport}, Set: "nosuch"}, AcceptVerdict}})
			}, want: unix.ENOENT},
		},
		want: `table inet kpi-conformance
chain pre type nat hook prerouting priority dstnat policy accept
chain services
rule services ip daddr . meta l4proto . th dport @svc accept
set svc type ipv4_addr . inet_proto . inet_service comment "service ports"
element svc 10.96.0.1 . tcp . 443
`,
	},
	{
		name: "sets: re-adding is harmless, another type is EEXIST, in use is EBUSY",
		steps: []cstep{
			{build: func(tx *Transaction) {
				base(tx)
				tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IPDaddr, L4Proto, THDport}, Set: "svc"}, AcceptVerdict}})
			}},
			{build: func(tx *Transaction) { tx.AddSet(Set{Name: "svc", Key: setSvc.Key, Comment: "another comment"}) }},
			{build: func(tx *Transaction) { tx.AddSet(Set{Name: "svc", Key: []KeyType{KeyIPv4Addr, KeyInetService}}) }, want: unix.EEXIST},
			{build: func(tx *Transaction) {
				tx.AddSet(Set{Name: "svc", Key: []KeyType{KeyIPv4Addr, KeyInetProto, KeyInetService}, Interval: true})
			}, want: unix.EEXIST},
			{build: func(tx *Transaction) { tx.DeleteSet("svc") }, want: unix.EBUSY},
			{build: func(tx *Transaction) { tx.DeleteSet("nosuch") }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.FlushSet("nosuch") }, want: unix.ENOENT},
			// Emptying the chain first frees the set within the same transaction.
			{build: func(tx *Transaction) { tx.FlushChain("services"); tx.DeleteSet("svc") }},
			{build: func(tx *Transaction) {
				tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IPDaddr, L4Proto}, Set: "svc"}, AcceptVerdict}})
			}, want: unix.ENOENT},
			{build: func(tx *Transaction) {
				tx.AddSet(setSvc)
				tx.AddRule("services", Rule{Stmts: []Stmt{InSet{Fields: []Field{IPDaddr, THDport}, Set: "svc"}, AcceptVerdict}})
			}, want: unix.EINVAL},
		},
		want: `table inet kpi-conformance
chain pre type nat hook prerouting priority dstnat policy accept
chain services
`,
	},
	{
		name: "elements: duplicates are harmless, a missing one is ENOENT, overlapping intervals EEXIST",
		steps: []cstep{
			{build: func(tx *Transaction) {
				base(tx)
				tx.AddSet(setSrc)
				tx.AddElements("svc", svcKey("10.96.0.1", "tcp", "443"))
				tx.AddElements("src", []string{"10.96.0.1", "tcp", "443", "10.0.0.0/8"})
			}},
			{build: func(tx *Transaction) { tx.AddElements("svc", svcKey("10.96.0.1", "tcp", "443")) }},
			{build: func(tx *Transaction) { tx.AddElements("src", []string{"10.96.0.1", "tcp", "443", "10.0.0.0/8"}) }},
			// 6.1 accepts both and keeps the overlapping elements.
			{build: func(tx *Transaction) { tx.AddElements("src", []string{"10.96.0.1", "tcp", "443", "10.1.0.0/16"}) }, want: unix.EEXIST, since: knownRelease},
			{build: func(tx *Transaction) { tx.AddElements("src", []string{"10.96.0.1", "tcp", "443", "10.0.0.0/7"}) }, want: unix.EEXIST, since: knownRelease},
			{build: func(tx *Transaction) { tx.AddElements("src", []string{"10.96.0.1", "udp", "443", "10.0.0.0/8"}) }},
			{build: func(tx *Transaction) { tx.DeleteElements("svc", svcKey("10.96.0.2", "tcp", "443")) }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.AddElements("nosuch", svcKey("10.96.0.1", "tcp", "443")) }, want: unix.ENOENT},
			// The kernel finds an interval element to delete by its first key: a
			// range inside an element deletes that element.
			{build: func(tx *Transaction) { tx.DeleteElements("src", []string{"10.96.0.1", "tcp", "443", "10.1.0.0/16"}) }},
			{build: func(tx *Transaction) { tx.DeleteElements("src", []string{"10.96.0.1", "tcp", "443", "10.0.0.0/8"}) }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.DeleteElements("src", []string{"10.96.0.1", "tcp", "443", "11.0.0.0/8"}) }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.FlushSet("svc") }},
		},
		want: `table inet kpi-conformance
chain pre type nat hook prerouting priority dstnat policy accept
chain services
set src type ipv4_addr . inet_proto . inet_service . ipv4_addr flags interval
element src 10.96.0.1 . udp . 443 . 10.0.0.0/8
set svc type ipv4_addr . inet_proto . inet_service comment "service ports"
`,
	},
	{
		name: "chains: re-adding is harmless, a jump target is EBUSY, hooks are checked",
		// Making a regular chain a base chain, or changing a base chain's hook or
		// priority, is EOPNOTSUPP; nat on forward is too.
		steps: []cstep{
			{build: func(tx *Transaction) {
				base(tx)
				tx.AddChain(chainPost)
				tx.AddRule("pre", Rule{Stmts: []Stmt{JumpTo("services")}})
			}},
			{build: func(tx *Transaction) { tx.AddChain(chainSvc); tx.AddChain(chainPre); tx.AddChain(Chain{Name: "pre"}) }},
			{build: func(tx *Transaction) { tx.AddChain(Chain{Name: "services", Type: ChainTypeFilter, Hook: HookInput}) }, want: unix.EOPNOTSUPP},
			{build: func(tx *Transaction) {
				tx.AddChain(Chain{Name: "pre", Type: ChainTypeNAT, Hook: HookPrerouting, Priority: -99})
			}, want: unix.EOPNOTSUPP, since: knownRelease, before: unix.EEXIST},
			{build: func(tx *Transaction) { tx.AddChain(Chain{Name: "fw", Type: ChainTypeNAT, Hook: HookForward}) }, want: unix.EOPNOTSUPP},
			{build: func(tx *Transaction) { tx.DeleteChain("services") }, want: unix.EBUSY},
			{build: func(tx *Transaction) { tx.DeleteChain("nosuch") }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.FlushChain("nosuch") }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.AddRule("nosuch", Rule{Stmts: []Stmt{AcceptVerdict}}) }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.AddRule("services", Rule{Stmts: []Stmt{JumpTo("nosuch")}}) }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.AddRule("services", Rule{Stmts: []Stmt{JumpTo("post")}}) }, want: unix.EOPNOTSUPP},
			// A masquerade is refused in prerouting, also when a jump leads there.
			{build: func(tx *Transaction) { tx.AddRule("services", Rule{Stmts: []Stmt{Masquerade{}}}) }, want: unix.EOPNOTSUPP},
			{build: func(tx *Transaction) { tx.AddRule("post", Rule{Stmts: []Stmt{Reject{}}}) }, want: unix.EOPNOTSUPP},
			{build: func(tx *Transaction) { tx.AddRule("post", Rule{Stmts: []Stmt{Masquerade{}}}) }},
			// Deleting a chain deletes its rules, and with them their jumps.
			{build: func(tx *Transaction) { tx.DeleteChain("pre"); tx.DeleteChain("services") }},
		},
		want: `table inet kpi-conformance
chain post type nat hook postrouting priority srcnat policy accept
rule post masquerade
set svc type ipv4_addr . inet_proto . inet_service comment "service ports"
`,
	},
	{
		name: "timeouts: elements lapse, a lapsed one is gone, delete and add renew one",
		steps: []cstep{
			{build: func(tx *Transaction) {
				base(tx)
				tx.AddSet(setAlive)
				tx.AddRule("pre", Rule{Stmts: []Stmt{InSet{Fields: []Field{MetaNFProto}, Set: "alive", Negate: true}, ReturnVerdict}, Comment: "on while alive"})
				tx.AddRule("pre", Rule{Stmts: []Stmt{InSet{Fields: []Field{MetaNFProto}, Set: "alive"}, InSet{Fields: []Field{IPDaddr, L4Proto, THDport}, Set: "svc"}, JumpTo("services")}})
				tx.AddElementsWithTimeout("alive", time.Hour, []string{"ipv4"})
				tx.AddElements("alive", []string{"ipv6"}) // no timeout: it stays
			}},
			// A timeout needs the set's flag; under a millisecond it would be none.
			{build: func(tx *Transaction) {
				tx.AddElementsWithTimeout("svc", time.Minute, svcKey("10.96.0.1", "tcp", "443"))
			}, want: unix.EINVAL},
			{build: func(tx *Transaction) {
				tx.FlushSet("alive")
				tx.AddElementsWithTimeout("alive", time.Millisecond/2, []string{"ipv4"})
			}, want: unix.EINVAL},
			{build: func(tx *Transaction) { tx.AddElementsWithTimeout("alive", -time.Second, []string{"ipv4"}) }, want: unix.EINVAL},
			// The flag is part of the set's type.
			{build: func(tx *Transaction) { tx.AddSet(Set{Name: "alive", Key: []KeyType{KeyNFProto}}) }, want: unix.EEXIST},
			{build: func(tx *Transaction) { tx.AddSet(Set{Name: "svc", Key: setSvc.Key, Timeout: true}) }, want: unix.EEXIST},
			// Deleting and adding in one transaction gives an element a new timeout.
			{build: func(tx *Transaction) {
				tx.DeleteElements("alive", []string{"ipv4"})
				tx.AddElementsWithTimeout("alive", 5*time.Second, []string{"ipv4"})
			}},
			// Lapsed: deleting it is ENOENT (and takes the transaction back), so
			// delete-and-add renews only an element that still lives.
			{build: func(tx *Transaction) {
				tx.DeleteElements("alive", []string{"ipv4"})
				tx.AddElementsWithTimeout("alive", time.Hour, []string{"ipv4"})
			}, want: unix.ENOENT, wait: 6 * time.Second},
			{build: func(tx *Transaction) { tx.AddElementsWithTimeout("alive", 90*time.Second, []string{"ipv4"}) }},
			// Flushing and adding gives it a new one whatever it was.
			{build: func(tx *Transaction) {
				tx.FlushSet("alive")
				tx.AddElementsWithTimeout("alive", 25*time.Hour+2*time.Minute+3*time.Second+500*time.Millisecond, []string{"ipv4"})
			}},
		},
		want: `table inet kpi-conformance
chain pre type nat hook prerouting priority dstnat policy accept
rule pre meta nfproto != @alive return comment "on while alive"
rule pre meta nfproto @alive ip daddr . meta l4proto . th dport @svc jump services
chain services
set alive type nf_proto flags timeout comment "alive"
element alive ipv4 timeout 1d1h2m3s500ms
set svc type ipv4_addr . inet_proto . inet_service comment "service ports"
`,
	},
	{
		name: "a missing table",
		steps: []cstep{
			{build: func(tx *Transaction) { tx.AddChain(chainSvc) }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.DeleteTable() }, want: unix.ENOENT},
			{build: func(tx *Transaction) { base(tx); tx.AddElements("svc", svcKey("10.96.0.1", "tcp", "443")) }},
			{build: func(tx *Transaction) { tx.DeleteTable(); tx.AddChain(chainSvc) }, want: unix.ENOENT},
			{build: func(tx *Transaction) { tx.DeleteTable(); tx.AddTable(); tx.AddSet(setHC) }},
		},
		want: `table inet kpi-conformance
set hc type inet_service
`,
	},
}

// runConformance runs every scenario on a fresh Ruleset from newReal (nil: the
// Fake alone) and a fresh Fake, and checks both against the scenario. kernel is
// the real kernel's release (uname -r).
func runConformance(t *testing.T, kernel string, newReal func(t *testing.T) Ruleset) {
	ctx := context.Background()
	for _, sc := range cscenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			fake := NewFakeRuleset(conformanceTable)
			fakeClock := testingclock.NewFakeClock(time.Now())
			fake.SetClock(fakeClock)
			impls := []Ruleset{fake}
			names := []string{"fake"}
			if newReal != nil {
				impls = append(impls, newReal(t))
				names = append(names, "kernel")
			}
			for j, r := range impls {
				if c, s, err := r.List(ctx); err != nil || c != nil || s != nil {
					t.Fatalf("%s: List before the table exists: %q %q %v, want nothing", names[j], c, s, err)
				}
			}
			for i, st := range sc.steps {
				tx := NewTransaction()
				st.build(tx)
				old := newReal != nil && st.since != "" && !releaseAtLeast(kernel, st.since)
				if old && st.before == nil {
					t.Logf("step %d NOT RUN on kernel %s: it describes %s and later", i, kernel, st.since)
					continue
				}
				if st.wait > 0 {
					fakeClock.Step(st.wait)
					if newReal != nil {
						time.Sleep(st.wait)
					}
				}
				var dumps []string
				for j, r := range impls {
					err := r.Run(ctx, tx)
					if old && names[j] == "kernel" {
						if !errors.Is(err, st.before) {
							t.Fatalf("kernel %s, step %d: got %v, want %v (kernels before %s)", kernel, i, err, st.before, st.since)
						}
						err = st.want // what the Fake must have returned
					}
					switch {
					case st.want == nil && err != nil:
						t.Fatalf("%s, step %d: %v", names[j], i, err)
					case st.want != nil && !errors.Is(err, st.want):
						t.Fatalf("%s, step %d: got %v, want %v", names[j], i, err, st.want)
					}
					d, err := r.Dump(ctx)
					if err != nil {
						t.Fatalf("%s, step %d: dump: %v", names[j], i, err)
					}
					dumps = append(dumps, d)
				}
				if len(dumps) == 2 {
					if diff := cmp.Diff(dumps[1], dumps[0]); diff != "" {
						t.Fatalf("step %d (%s): the fake differs from the kernel (-kernel +fake):\n%s", i, strings.TrimSpace(tx.String()), diff)
					}
				}
			}
			for j, r := range impls {
				got, _ := r.Dump(ctx)
				if diff := cmp.Diff(sc.want, got); diff != "" {
					t.Errorf("%s: final table (-want +got):\n%s", names[j], diff)
				}
			}
			// ListElements reads what Dump shows, set by set.
			for j, r := range impls {
				got, _ := r.Dump(ctx)
				for _, line := range strings.Split(got, "\n") {
					f := strings.Fields(line)
					if len(f) < 2 || f[0] != "set" {
						continue
					}
					elems, err := r.ListElements(ctx, f[1])
					if err != nil {
						t.Fatalf("%s: ListElements(%s): %v", names[j], f[1], err)
					}
					var want, have []string
					for _, l := range strings.Split(got, "\n") {
						if p := "element " + f[1] + " "; strings.HasPrefix(l, p) {
							// A listing's elements are their keys, without a timeout.
							e, _, _ := strings.Cut(strings.TrimPrefix(l, p), " timeout ")
							want = append(want, e)
						}
					}
					for _, e := range elems {
						have = append(have, strings.Join(e, " . "))
					}
					if diff := cmp.Diff(want, have); diff != "" {
						t.Errorf("%s: ListElements(%s) differs from the dump (-dump +list):\n%s", names[j], f[1], diff)
					}
				}
				// List names what Dump shows.
				var wantChains, wantSets []string
				for _, l := range strings.Split(got, "\n") {
					switch f := strings.Fields(l); {
					case len(f) >= 2 && f[0] == "chain":
						wantChains = append(wantChains, f[1])
					case len(f) >= 2 && f[0] == "set":
						wantSets = append(wantSets, f[1])
					}
				}
				chains, sets, err := r.List(ctx)
				if err != nil {
					t.Fatalf("%s: List: %v", names[j], err)
				}
				if diff := cmp.Diff([2][]string{wantChains, wantSets}, [2][]string{chains, sets}); diff != "" {
					t.Errorf("%s: List differs from the dump (-dump +list):\n%s", names[j], diff)
				}
				if _, err := r.ListElements(ctx, "nosuch"); !IsNotFound(err) {
					t.Errorf("%s: ListElements of a missing set: %v, want ENOENT", names[j], err)
				}
			}
		})
	}
}

func TestFakeConformance(t *testing.T) { runConformance(t, "", nil) }

// releaseAtLeast compares the major.minor of a kernel release ("6.1.0-57-amd64")
// with want ("6.18").
func releaseAtLeast(release, want string) bool {
	var major, minor, wantMajor, wantMinor int
	fmt.Sscanf(release, "%d.%d", &major, &minor)
	fmt.Sscanf(want, "%d.%d", &wantMajor, &wantMinor)
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}

func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		release, want string
		ok            bool
	}{{"6.1.0-57-amd64", "6.18", false}, {"6.18.0", "6.18", true}, {"7.0.1", "6.18", true}, {"6.2", "6.18", false}} {
		if got := releaseAtLeast(c.release, c.want); got != c.ok {
			t.Errorf("releaseAtLeast(%q, %q) = %v", c.release, c.want, got)
		}
	}
}

func TestParseListing(t *testing.T) {
	listing := `table inet kpi {
	set cip {
		type ipv4_addr . inet_proto . inet_service
		comment "cluster ips"
		elements = { 10.96.0.10 . udp . 53,
			     10.96.0.1 . tcp . 443 }
	}

	set hc {
		type inet_service
		elements = { 30000, 31000 }
	}

	set alive {
		type nf_proto
		flags timeout
		elements = { ipv4 timeout 2m expires 1m59s980ms,
			     ipv6 }
	}

	chain np {
	}

	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		masquerade fully-random
	}
}
`
	got, err := ParseListing(listing)
	if err != nil {
		t.Fatal(err)
	}
	want := `table inet kpi
chain np
chain post type nat hook postrouting priority srcnat policy accept
rule post masquerade fully-random
set alive type nf_proto flags timeout
element alive ipv4 timeout 2m
element alive ipv6
set cip type ipv4_addr . inet_proto . inet_service comment "cluster ips"
element cip 10.96.0.1 . tcp . 443
element cip 10.96.0.10 . udp . 53
set hc type inet_service
element hc 30000
element hc 31000
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := ParseListing("table inet x {\n\tflowtable f {\n\t}\n}\n"); err == nil {
		t.Errorf("a flowtable was accepted")
	}
}

func TestDurationString(t *testing.T) {
	for d, want := range map[time.Duration]string{
		2 * time.Minute: "2m", 90 * time.Second: "1m30s", 1500 * time.Millisecond: "1s500ms", 24 * time.Hour: "1d",
		100 * time.Millisecond: "100ms", 3723 * time.Second: "1h2m3s", 30 * time.Second: "30s",
	} {
		if got := DurationString(d); got != want {
			t.Errorf("DurationString(%v) = %q, want %q (as nft lists it)", d, got, want)
		}
	}
}

func TestElementText(t *testing.T) {
	for _, c := range []struct {
		set    Set
		fields []string
		want   string
		bad    bool
	}{
		{set: setSvc, fields: svcKey("10.96.0.1", "6", "443"), want: "10.96.0.1 . tcp . 443"},
		{set: setSvc, fields: svcKey("10.96.0.1", "47", "0"), want: "10.96.0.1 . 47 . 0"},
		{set: setSrc, fields: []string{"10.96.0.1", "tcp", "443", "10.0.0.1/32"}, want: "10.96.0.1 . tcp . 443 . 10.0.0.1"},
		{set: setSrc, fields: []string{"10.96.0.1", "tcp", "443", "0.0.0.0/0"}, want: "10.96.0.1 . tcp . 443 . 0.0.0.0/0"},
		{set: setSvc6, fields: svcKey("FD00::0:1", "udp", "53"), want: "fd00::1 . udp . 53"},
		{set: setSvc, fields: svcKey("10.96.0.0/24", "tcp", "443"), bad: true},
		{set: setSrc, fields: []string{"10.96.0.1", "tcp", "443", "10.0.0.1/8"}, bad: true},
		{set: setSvc, fields: svcKey("fd00::1", "tcp", "443"), bad: true},
		{set: setSvc, fields: svcKey("10.96.0.1", "tcp", "65536"), bad: true},
		{set: setSvc, fields: svcKey("10.96.0.1", "icmpx", "1"), bad: true},
		{set: setSvc, fields: []string{"10.96.0.1", "tcp"}, bad: true},
		{set: setAlive, fields: []string{"ipv6"}, want: "ipv6"},
		{set: setAlive, fields: []string{"inet"}, bad: true},
	} {
		got, _, err := canonicalElement(c.set, c.fields)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%v in %s: got %q, %v; want %q (error: %v)", c.fields, c.set.Name, got, err, c.want, c.bad)
		}
	}
}

func TestPriorityString(t *testing.T) {
	for _, c := range []struct {
		hook Hook
		p    int
		want string
	}{
		{HookPrerouting, -100, "dstnat"}, {HookPrerouting, -101, "dstnat - 1"}, {HookOutput, -100, "-100"},
		{HookPostrouting, 100, "srcnat"}, {HookInput, 100, "100"}, {HookInput, -10, "filter - 10"},
		{HookForward, 11, "11"}, {HookOutput, 50, "security"}, {HookPostrouting, 99, "srcnat - 1"},
		{HookInput, -300, "raw"}, {HookInput, -150, "mangle"},
	} {
		if got := priorityString(c.hook, c.p); got != c.want {
			t.Errorf("%s %d: got %q, want %q", c.hook, c.p, got, c.want)
		}
	}
}
