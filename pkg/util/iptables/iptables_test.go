package iptables

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	utilexec "k8s.io/utils/exec"
)

func TestQuoteComment(t *testing.T) {
	for in, want := range map[string]string{
		"simple":                 "simple",
		"with-dash_1":            "with-dash_1",
		"ns/svc:http":            `"ns/svc:http"`,
		"a b":                    `"a b"`,
		"":                       `""`,
		`q"uote`:                 `"q\"uote"`,
		`back\slash`:             `"back\\slash"`,
		"it's":                   `"it\'s"`,
		"line\nbreak\ttab\x7f":   `"line break tab "`,
		"bad\xffutf8":            `"bad utf8"`,
		strings.Repeat("a", 300): strings.Repeat("a", 255),
	} {
		if got := QuoteComment(in); got != want {
			t.Errorf("QuoteComment(%q) = %q, want %q", in, got, want)
		}
	}
	// Cut on a character boundary: 127 two-byte characters fit in 255 bytes.
	if got := SanitizeComment(strings.Repeat("é", 200)); len(got) != 254 || got != strings.Repeat("é", 127) {
		t.Errorf("SanitizeComment cut at %d bytes", len(got))
	}
}

func TestSplitWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{`-A X -j RETURN`, []string{"-A", "X", "-j", "RETURN"}, true},
		{"-A  X\t-j  RETURN ", []string{"-A", "X", "-j", "RETURN"}, true},
		{`--comment "a b" -j X`, []string{"--comment", "a b", "-j", "X"}, true},
		{`--comment "a\"b\\c\'d"`, []string{"--comment", `a"b\c'd`}, true},
		{`--comment ""`, []string{"--comment", ""}, true},
		{`--comment "open`, nil, false},
		{`trailing\`, nil, false},
	} {
		got, ok := splitWords(c.in)
		if ok != c.ok || !cmp.Equal(got, c.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestJoinWordsQuotesOnlyWhatNeedsIt(t *testing.T) {
	got := JoinWords("-A", "KUBE-X", "-d", "10.0.0.1/32", "-m", "comment", "--comment", "default/kubernetes:https", "-m", "set", "--match-set", "KUBE-CLUSTER-IP", "dst,dst", "-j", "ACCEPT", "#x", "a b", "")
	want := `-A KUBE-X -d 10.0.0.1/32 -m comment --comment "default/kubernetes:https" -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT "#x" "a b" ""`
	if got != want {
		t.Errorf("JoinWords:\n got %s\nwant %s", got, want)
	}
}

func FuzzJoinSplit(f *testing.F) {
	f.Add("-A", "ns/svc\" -j DROP", "x\\")
	f.Fuzz(func(t *testing.T, a, comment, b string) {
		line := JoinWords(a, "--comment", comment, b)
		if strings.ContainsAny(line, "\n\r") {
			t.Fatalf("line %q contains a line break", line)
		}
		words, ok := splitWords(line)
		if !ok || len(words) != 4 {
			t.Fatalf("JoinWords(%q, --comment, %q, %q) = %q splits into %q, %v", a, comment, b, line, words, ok)
		}
		if words[2] != SanitizeComment(comment) {
			t.Fatalf("comment %q read back as %q", comment, words[2])
		}
		// The canonical form is a fixed point.
		if again := JoinWords(words...); again != line {
			t.Fatalf("not stable: %q -> %q", line, again)
		}
	})
}

func TestFailingLine(t *testing.T) {
	for in, want := range map[string]int{
		"iptables-restore v1.8.9 (legacy): Couldn't load target `X':No such file or directory\n\nError occurred at line: 3\nTry `iptables-restore -h'": 3,
		"iptables-restore: line 14 failed\n": 14,
		"iptables-nft-restore: line 4 failed: Bad rule (does a matching rule exist in that chain?).":             4,
		"iptables-nft-restore v1.8.9 (nf_tables): \nline 2: CHAIN_DEL failed (Device or resource busy): chain Y": 2,
		"Another app is currently holding the xtables lock.":                                                     0,
		"the headline 12 failed": 0,
	} {
		if got := failingLine(in); got != want {
			t.Errorf("failingLine(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestChooseMode(t *testing.T) {
	save := func(lines ...string) saveStats { return statsOf([]byte(strings.Join(lines, "\n") + "\n")) }
	empty := save("*filter", ":INPUT ACCEPT [0:0]", "COMMIT")
	installed := func(s saveStats) saveStats { s.present = true; return s }
	for _, c := range []struct {
		name        string
		legacy, nft saveStats
		want        Mode
	}{
		{"empty node: nft", empty, empty, ModeNFT},
		{"more rules in legacy", save("-A INPUT -j ACCEPT"), empty, ModeLegacy},
		{"more rules in nft", empty, save("-A INPUT -j ACCEPT"), ModeNFT},
		{"equal rules: nft", save("-A INPUT -j ACCEPT"), save("-A INPUT -j DROP"), ModeNFT},
		{"kube rules beat rule count", save("-A KUBE-X -j RETURN"), save("-A INPUT -j A", "-A INPUT -j B"), ModeLegacy},
		{"lower-case kube counts", empty, save("-A INPUT -m comment --comment \"kubernetes firewall\" -j X"), ModeNFT},
		{"kubelet hint in legacy", save(":KUBE-IPTABLES-HINT - [0:0]"), save("-A KUBE-X -j RETURN", "-A KUBE-Y -j RETURN"), ModeLegacy},
		{"kubelet hint in nft wins over legacy hint", save(":KUBE-KUBELET-CANARY - [0:0]"), save(":KUBE-IPTABLES-HINT - [0:0]"), ModeNFT},
		{"warnings are not rules", save("# Warning: iptables-legacy tables present"), empty, ModeNFT},
		{"only legacy installed", installed(empty), empty, ModeLegacy},
		{"only nft installed", empty, installed(empty), ModeNFT},
		{"both installed: usual rules", installed(empty), installed(save("-A INPUT -j ACCEPT")), ModeNFT},
	} {
		if got := chooseMode(c.legacy, c.nft); got != c.want {
			t.Errorf("%s: chooseMode = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestDetectModeOverride(t *testing.T) {
	t.Setenv(EnvMode, "legacy")
	if m, err := DetectMode(context.Background(), nil); err != nil || m != ModeLegacy {
		t.Errorf("DetectMode = %v, %v", m, err)
	}
	t.Setenv(EnvMode, "iptables")
	if _, err := DetectMode(context.Background(), nil); err == nil {
		t.Error("bad override accepted")
	}
}

// TestDetectModeRunsSavesAtOnce: the four saves run concurrently (each takes 1 s
// here, so one after the other would take 4 s), and their outputs still count
// per backend: legacy's kube rules are in ip6tables-legacy-save only, and
// iptables-nft-save is missing (the nft backend counts as not installed, which
// alone would choose legacy; the kube rules make it certain).
func TestDetectModeRunsSavesAtOnce(t *testing.T) {
	dir := t.TempDir()
	for name, out := range map[string]string{
		"iptables-legacy-save":  "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT",
		"ip6tables-legacy-save": "*nat\n-A KUBE-SERVICES -j RETURN\n-A KUBE-X -j RETURN\nCOMMIT",
		"ip6tables-nft-save":    "*filter\n-A INPUT -j ACCEPT\n-A INPUT -j DROP\n-A INPUT -j LOG\nCOMMIT",
	} {
		script := "#!/bin/sh\n/bin/sleep 1\nprintf '%s\\n' '" + strings.ReplaceAll(out, "\n", "' '") + "'\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	t.Setenv(EnvMode, "")
	start := time.Now()
	mode, err := DetectMode(context.Background(), utilexec.New())
	took := time.Since(start)
	if err != nil || mode != ModeLegacy {
		t.Errorf("DetectMode = %v, %v; want legacy", mode, err)
	}
	if took > 3*time.Second {
		t.Errorf("DetectMode took %s: the saves ran one after the other", took)
	}
}

func TestFakeCountersAndSetRefs(t *testing.T) {
	ctx := context.Background()
	f := NewFake(ProtocolIPv6)
	var b Builder
	b.Table(TableNAT)
	b.Chain("KUBE-SERVICES", "-")
	b.Chain("KUBE-MARK-MASQ", "-")
	b.Line("-A", "KUBE-SERVICES", "-m", "set", "--match-set", "KUBE-6-CLUSTER-IP", "dst,dst", "-j", "KUBE-MARK-MASQ")
	b.Line("-A", "KUBE-SERVICES", "-m", "set", "--match-set", "KUBE-6-CLUSTER-IP", "src,dst", "-j", "ACCEPT")
	b.Line("-A", "KUBE-MARK-MASQ", "-j", "MARK", "--or-mark", "0x4000")
	b.Commit()
	b.Table(TableFilter)
	b.Line("-A", "INPUT", "-j", "KUBE-NOPE")
	b.Commit()
	err := f.RestoreAll(ctx, b.Bytes(), NoFlushTables, NoRestoreCount)
	var ierr *Error
	if !errors.As(err, &ierr) || ierr.Line != 9 || ierr.Table != TableFilter || !IsInvalid(err) {
		t.Fatalf("RestoreAll = %v, want invalid at line 9 of filter", err)
	}
	want := FakeCounters{Restores: 1, RulesAdded: 3, ChainsCreated: 2}
	if diff := cmp.Diff(want, f.Counters()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"KUBE-6-CLUSTER-IP": 2}, f.MatchSetRefs()); diff != "" {
		t.Errorf("set refs (-want +got):\n%s", diff)
	}
	if f.Protocol() != ProtocolIPv6 {
		t.Error("wrong protocol")
	}
	// Malformed input.
	for _, bad := range []string{
		"-A INPUT -j ACCEPT\n",
		"*nat\n-A KUBE-UNDECLARED -j RETURN\nCOMMIT\n",
		"*nat\n:KUBE-X - [0:0]\n",
		"*nat\n*filter\nCOMMIT\n",
		"*nosuch\nCOMMIT\n",
		"*nat\n:PREROUTING - [0:0]\nCOMMIT\n",
		"*nat\n:KUBE-X ACCEPT [0:0]\nCOMMIT\n",
		"*nat\n-A OUTPUT -m comment --comment \"open\nCOMMIT\n",
		"*nat\n-R OUTPUT 1 -j ACCEPT\nCOMMIT\n",
	} {
		before := f.Dump()
		if err := f.RestoreAll(ctx, []byte(bad), NoFlushTables, NoRestoreCount); err == nil {
			t.Errorf("RestoreAll(%q) succeeded", bad)
		}
		if f.Dump() != before {
			t.Errorf("RestoreAll(%q) changed the state", bad)
		}
	}
}

func TestFakeInjectedRestoreError(t *testing.T) {
	f := NewFake(ProtocolIPv4)
	boom := errors.New("boom")
	f.InjectRestoreError = func([]byte) error { return boom }
	if err := f.RestoreAll(context.Background(), []byte("*nat\n:KUBE-X - [0:0]\nCOMMIT\n"), NoFlushTables, NoRestoreCount); !errors.Is(err, boom) {
		t.Fatalf("RestoreAll = %v", err)
	}
	if f.Dump() != "" {
		t.Errorf("state changed:\n%s", f.Dump())
	}
}

func FuzzFakeRestore(f *testing.F) {
	f.Add("*nat\n:KUBE-X - [0:0]\n-A KUBE-X -j RETURN\nCOMMIT\n")
	f.Add("*filter\n-X\n-F\nCOMMIT\n*nat\n-D OUTPUT 1\nCOMMIT\n")
	f.Fuzz(func(t *testing.T, in string) {
		fk := NewFake(ProtocolIPv4)
		if err := fk.RestoreAll(context.Background(), []byte(in), NoFlushTables, NoRestoreCount); err != nil {
			return
		}
		// Whatever was accepted must dump to input that loads to the same state.
		dump := fk.Dump()
		again := NewFake(ProtocolIPv4)
		if err := again.RestoreAll(context.Background(), []byte(dump), FlushTables, NoRestoreCount); err != nil {
			t.Fatalf("dump does not load: %v\n%s", err, dump)
		}
		if again.Dump() != dump {
			t.Fatalf("dump not stable:\n%s\n---\n%s", dump, again.Dump())
		}
	})
}
