package iptables

// Test addresses: 10.0.0.0/8 and fd00::/8, inside the test's own network namespace.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hostileName is a Service name trying to end the comment, add a rule and comment
// out the rest of the line.
const hostileName = "ns/svc\" -j DROP\n-A INPUT -j ACCEPT #'x\\ \t\x7f end"

type restoreStep struct {
	data      string
	flush     FlushFlag
	wantErr   bool
	wantKind  error // checked when set
	wantLine  int   // legacy and Fake
	nftLine   int   // the nft backend reports some errors at the COMMIT line
	wantTable Table
}

type restoreScenario struct {
	name  string
	steps []restoreStep
	want  string // Fake.Dump format of filter and nat
}

func roundTripInput() string {
	var b Builder
	b.Table(TableNAT)
	for _, c := range []Chain{"KUBE-SERVICES", "KUBE-MARK-MASQ", "KUBE-POSTROUTING", "KUBE-NODE-PORT"} {
		b.Chain(c, "-")
	}
	b.Line("-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
	b.Line("-A", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
	b.Line("-A", "POSTROUTING", "-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "KUBE-POSTROUTING")
	b.Line("-A", "KUBE-MARK-MASQ", "-j", "MARK", "--set-xmark", "0x4000/0x4000")
	b.Line("-A", "KUBE-POSTROUTING", "-m", "mark", "!", "--mark", "0x4000/0x4000", "-j", "RETURN")
	b.Line("-A", "KUBE-POSTROUTING", "-j", "MARK", "--set-xmark", "0x4000/0x0")
	b.Line("-A", "KUBE-POSTROUTING", "-m", "comment", "--comment", "kubernetes service traffic requiring SNAT", "-j", "MASQUERADE", "--random-fully")
	b.Line("-A", "KUBE-SERVICES", "-m", "comment", "--comment", hostileName, "-m", "set", "--match-set", "KUBE-CLUSTER-IP", "dst,dst", "-j", "KUBE-MARK-MASQ")
	b.Line("-A", "KUBE-SERVICES", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-NODE-PORT")
	b.Line("-A", "KUBE-NODE-PORT", "-p", "tcp", "-m", "comment", "--comment", "Kubernetes nodeport TCP port for masquerade purpose", "-m", "set", "--match-set", "KUBE-NODE-PORT-TCP", "dst", "-j", "KUBE-MARK-MASQ")
	b.Commit()
	b.Table(TableFilter)
	b.Chain("KUBE-FORWARD", "-")
	b.Chain("KUBE-IPVS-FILTER", "-")
	b.Line("-A", "INPUT", "-m", "comment", "--comment", "kubernetes ipvs access filter", "-j", "KUBE-IPVS-FILTER")
	b.Line("-A", "FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-FORWARD")
	b.Line("-A", "KUBE-FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "ACCEPT")
	b.Line("-A", "KUBE-FORWARD", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
	b.Line("-A", "KUBE-IPVS-FILTER", "-m", "set", "--match-set", "KUBE-IPVS-IPS", "dst", "-m", "conntrack", "--ctstate", "NEW", "-j", "REJECT", "--reject-with", "icmp-port-unreachable")
	b.Commit()
	return b.String()
}

var restoreScenarios = []restoreScenario{
	{
		name:  "round trip with jumps, marks, sets and a hostile comment",
		steps: []restoreStep{{data: roundTripInput(), flush: NoFlushTables}},
		want: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-IPVS-IPS dst -m conntrack --ctstate NEW -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES -m comment --comment "ns/svc\" -j DROP -A INPUT -j ACCEPT #\'x\\    end" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
COMMIT
`,
	},
	{
		name: "--noflush flushes declared user chains, keeps undeclared ones and built-in rules",
		steps: []restoreStep{
			{data: "*filter\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A INPUT -j KUBE-A\n-A KUBE-A -j RETURN\n-A KUBE-B -j DROP\nCOMMIT\n"},
			{data: "*filter\n:INPUT ACCEPT [0:0]\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\nCOMMIT\n"},
		},
		want: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-A - [0:0]
:KUBE-B - [0:0]
-A INPUT -j KUBE-A
-A KUBE-A -j ACCEPT
-A KUBE-B -j DROP
COMMIT
`,
	},
	{
		name: "without --noflush the table is replaced",
		steps: []restoreStep{
			{data: "*filter\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A INPUT -j KUBE-A\n-A KUBE-B -j DROP\nCOMMIT\n"},
			{data: "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-B - [0:0]\n-A KUBE-B -j ACCEPT\nCOMMIT\n", flush: FlushTables},
		},
		want: `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-B - [0:0]
-A KUBE-B -j ACCEPT
COMMIT
`,
	},
	{
		name: "a bad line rejects its whole table; earlier tables stay",
		steps: []restoreStep{
			{data: "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j RETURN\nCOMMIT\n"},
			{
				data:     "*nat\n:KUBE-N - [0:0]\n-A KUBE-N -j RETURN\nCOMMIT\n*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-A -j KUBE-MISSING\nCOMMIT\n",
				wantErr:  true,
				wantKind: ErrInvalid, wantLine: 8, nftLine: 9, wantTable: TableFilter,
			},
		},
		want: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-A - [0:0]
-A KUBE-A -j RETURN
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-N - [0:0]
-A KUBE-N -j RETURN
COMMIT
`,
	},
	{
		name: "deleting a missing rule or a referenced chain fails the table; declare+delete removes a chain",
		steps: []restoreStep{
			{data: "*filter\n:KUBE-A - [0:0]\n:KUBE-OLD - [0:0]\n-A INPUT -j KUBE-A\n-A KUBE-OLD -j DROP\nCOMMIT\n"},
			{data: "*filter\n:KUBE-C - [0:0]\n-D INPUT -j DROP\nCOMMIT\n", wantErr: true, wantLine: 3, nftLine: 3, wantTable: TableFilter},
			{data: "*filter\n:KUBE-C - [0:0]\n-X KUBE-A\nCOMMIT\n", wantErr: true, wantLine: 3, nftLine: 3, wantTable: TableFilter},
			{data: "*filter\n:KUBE-OLD - [0:0]\n-X KUBE-OLD\n-D INPUT -j KUBE-A\n-I INPUT 1 -j ACCEPT\nCOMMIT\n"},
		},
		want: `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-A - [0:0]
-A INPUT -j ACCEPT
COMMIT
`,
	},
}

// backend is what the scenarios run against.
type backend struct {
	ipt Interface
	nft bool
}

func runRestoreScenarios(t *testing.T, newBackend func(t *testing.T) backend) {
	for _, sc := range restoreScenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			be := newBackend(t)
			for i, st := range sc.steps {
				err := be.ipt.RestoreAll(ctx, []byte(st.data), st.flush, NoRestoreCount)
				if !st.wantErr {
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				var ierr *Error
				if !errors.As(err, &ierr) {
					t.Fatalf("step %d: error %v, want an *Error", i, err)
				}
				if st.wantKind != nil && !errors.Is(err, st.wantKind) {
					t.Errorf("step %d: error %v, want kind %v", i, err, st.wantKind)
				}
				wantLine := st.wantLine
				if be.nft {
					wantLine = st.nftLine
				}
				if ierr.Line != wantLine || ierr.Table != st.wantTable {
					t.Errorf("step %d: failing line %d table %q, want %d %q: %v", i, ierr.Line, ierr.Table, wantLine, st.wantTable, err)
				}
			}
			if diff := cmp.Diff(sc.want, normalizedDump(t, be.ipt)); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

// normalizedDump reads filter and nat through SaveInto and renders them like
// Fake.Dump, by loading the save output into a fresh Fake.
func normalizedDump(t *testing.T, ipt Interface) string {
	t.Helper()
	var all bytes.Buffer
	for _, table := range []Table{TableFilter, TableNAT} {
		var buf bytes.Buffer
		if err := ipt.SaveInto(context.Background(), table, &buf); err != nil {
			t.Fatal(err)
		}
		all.Write(buf.Bytes())
	}
	f := NewFake(ipt.Protocol())
	if err := f.RestoreAll(context.Background(), all.Bytes(), FlushTables, RestoreCount); err != nil {
		t.Fatalf("loading save output into a Fake: %v\n%s", err, all.String())
	}
	return f.Dump()
}

// runCommandScenario checks the single-command methods.
func runCommandScenario(t *testing.T, ipt Interface) {
	ctx := context.Background()
	existed, err := ipt.EnsureChain(ctx, TableNAT, "KUBE-X")
	if err != nil || existed {
		t.Fatalf("EnsureChain(new) = %v, %v", existed, err)
	}
	if existed, err = ipt.EnsureChain(ctx, TableNAT, "KUBE-X"); err != nil || !existed {
		t.Fatalf("EnsureChain(again) = %v, %v", existed, err)
	}
	if ok, err := ipt.ChainExists(ctx, TableNAT, "KUBE-X"); err != nil || !ok {
		t.Fatalf("ChainExists(KUBE-X) = %v, %v", ok, err)
	}
	if ok, err := ipt.ChainExists(ctx, TableNAT, "KUBE-NOPE"); err != nil || ok {
		t.Fatalf("ChainExists(KUBE-NOPE) = %v, %v", ok, err)
	}
	jump := []string{"-m", "comment", "--comment", SanitizeComment("kubernetes service portals"), "-j", "KUBE-X"}
	for i := 0; i < 2; i++ {
		existed, err := ipt.EnsureRule(ctx, Prepend, TableNAT, ChainOutput, jump...)
		if err != nil || existed != (i == 1) {
			t.Fatalf("EnsureRule #%d = %v, %v", i, existed, err)
		}
	}
	if _, err := ipt.EnsureRule(ctx, Append, TableNAT, "KUBE-NOPE", "-j", "RETURN"); !IsNotFound(err) {
		t.Errorf("EnsureRule in a missing chain = %v, want not found", err)
	}
	if _, err := ipt.EnsureRule(ctx, Append, TableNAT, ChainOutput, "-j", "KUBE-MISSING"); !IsInvalid(err) {
		t.Errorf("EnsureRule jumping to a missing chain = %v, want invalid", err)
	}
	if _, err := ipt.EnsureRule(ctx, Append, TableNAT, ChainOutput, "-m", "comment", "--comment", "a\nb", "-j", "RETURN"); !IsInvalid(err) {
		t.Errorf("EnsureRule with a newline = %v, want invalid", err)
	}
	if err := ipt.DeleteChain(ctx, TableNAT, "KUBE-X"); !IsInUse(err) {
		t.Errorf("DeleteChain(referenced) = %v, want in use", err)
	}
	if err := ipt.DeleteChain(ctx, TableNAT, "KUBE-NOPE"); !IsNotFound(err) {
		t.Errorf("DeleteChain(missing) = %v, want not found", err)
	}
	if err := ipt.FlushChain(ctx, TableNAT, "KUBE-NOPE"); !IsNotFound(err) {
		t.Errorf("FlushChain(missing) = %v, want not found", err)
	}
	if err := ipt.DeleteRule(ctx, TableNAT, ChainOutput, jump...); err != nil {
		t.Fatal(err)
	}
	if err := ipt.DeleteRule(ctx, TableNAT, ChainOutput, jump...); err != nil {
		t.Errorf("DeleteRule(missing) = %v, want nil", err)
	}
	if _, err := ipt.EnsureRule(ctx, Append, TableNAT, "KUBE-X", "-j", "RETURN"); err != nil {
		t.Fatal(err)
	}
	if err := ipt.DeleteChain(ctx, TableNAT, "KUBE-X"); !IsInUse(err) {
		t.Errorf("DeleteChain(non-empty) = %v, want in use", err)
	}
	if err := ipt.FlushChain(ctx, TableNAT, "KUBE-X"); err != nil {
		t.Fatal(err)
	}
	if err := ipt.DeleteChain(ctx, TableNAT, "KUBE-X"); err != nil {
		t.Fatal(err)
	}
	if got := normalizedDump(t, ipt); got != "" {
		t.Errorf("state after cleanup:\n%s", got)
	}
}

func TestFakeRestoreConformance(t *testing.T) {
	runRestoreScenarios(t, func(t *testing.T) backend { return backend{ipt: NewFake(ProtocolIPv4)} })
}

func TestFakeCommands(t *testing.T) {
	runCommandScenario(t, NewFake(ProtocolIPv4))
}

func TestHostileCommentStaysOneWord(t *testing.T) {
	line := JoinWords("-A", "KUBE-SERVICES", "-m", "comment", "--comment", hostileName, "-j", "RETURN")
	if strings.Count(line, "\n") != 0 {
		t.Fatalf("line has a newline: %q", line)
	}
	words, ok := splitWords(line)
	if !ok || len(words) != 8 {
		t.Fatalf("splitWords(%q) = %q, %v; want 8 words", line, words, ok)
	}
	if words[5] != SanitizeComment(hostileName) {
		t.Errorf("comment read back as %q, want %q", words[5], SanitizeComment(hostileName))
	}
}
