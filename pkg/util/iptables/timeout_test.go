package iptables

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/boundedexec"
)

// hungTools puts fake iptables-nft, iptables-nft-save and iptables-nft-restore
// first in $PATH that never finish, and returns a runner with short deadlines.
func hungTools(t *testing.T) *runner {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"iptables-nft", "iptables-nft-save", "iptables-nft-restore"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := New(utilexec.New(), ProtocolIPv4, ModeNFT).(*runner)
	r.commandTimeout, r.restoreTimeout = 200*time.Millisecond, 200*time.Millisecond
	return r
}

// TestHungIPTablesIsKilledAndReported: each kind of call over a hung binary
// returns a timeout error at its deadline; a killed command is not mistaken for
// iptables' "exit 1" answers (chain exists, rule missing).
func TestHungIPTablesIsKilledAndReported(t *testing.T) {
	r := hungTools(t)
	ctx := context.Background()
	calls := []struct {
		name string
		bin  string
		call func() error
	}{
		{"RestoreAll", "iptables-nft-restore", func() error {
			return r.RestoreAll(ctx, []byte("*nat\nCOMMIT\n"), NoFlushTables, NoRestoreCount)
		}},
		{"SaveInto", "iptables-nft-save", func() error { return r.SaveInto(ctx, TableNAT, &bytes.Buffer{}) }},
		{"EnsureChain", "iptables-nft", func() error { _, err := r.EnsureChain(ctx, TableNAT, "KUBE-X"); return err }},
		{"ChainExists", "iptables-nft", func() error { _, err := r.ChainExists(ctx, TableNAT, "KUBE-X"); return err }},
		{"EnsureRule", "iptables-nft", func() error {
			_, err := r.EnsureRule(ctx, Append, TableNAT, "KUBE-X", "-j", "RETURN")
			return err
		}},
		{"DeleteRule", "iptables-nft", func() error { return r.DeleteRule(ctx, TableNAT, "KUBE-X", "-j", "RETURN") }},
	}
	for _, c := range calls {
		start := time.Now()
		err := c.call()
		took := time.Since(start)
		var te *boundedexec.TimeoutError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &te) {
			t.Errorf("%s: err = %v, want a timeout", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.bin+" timed out after 200ms") {
			t.Errorf("%s: message %q does not name the hung binary", c.name, err)
		}
		var ierr *Error
		if !errors.As(err, &ierr) || ierr.ExitCode != -1 || !errors.Is(err, ErrFailed) {
			t.Errorf("%s: %#v, want an *Error with exit code -1 and ErrFailed", c.name, err)
		}
		if took > 200*time.Millisecond+boundedexec.KillGrace {
			t.Errorf("%s returned after %s", c.name, took)
		}
	}
}

// TestDetectModeSurvivesHungSave: a hung iptables-save of one backend counts as
// an empty backend after detectTimeout instead of blocking start-up.
func TestDetectModeSurvivesHungSave(t *testing.T) {
	if testing.Short() {
		t.Skip("waits detectTimeout")
	}
	t.Setenv(EnvMode, "")
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("iptables-nft-save", "exec sleep 30")
	write("ip6tables-nft-save", "exit 0")
	write("iptables-legacy-save", "echo '*nat'; echo ':KUBE-KUBELET-CANARY - [0:0]'; echo COMMIT")
	write("ip6tables-legacy-save", "exit 0")
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	start := time.Now()
	mode, err := DetectMode(context.Background(), utilexec.New())
	if err != nil || mode != ModeLegacy {
		t.Fatalf("DetectMode = %q, %v; want legacy (the hung nft backend counts as empty)", mode, err)
	}
	if took := time.Since(start); took > detectTimeout+boundedexec.KillGrace+time.Second {
		t.Errorf("DetectMode took %s", took)
	}
}
