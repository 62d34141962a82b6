package iptables

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilexec "k8s.io/utils/exec"
	fakeexec "k8s.io/utils/exec/testing"
)

// reply is one scripted command result.
type reply struct {
	stdout, stderr string
	code           int
}

// scripted answers commands in order and records their argv and stdin.
func scripted(replies ...reply) (*fakeexec.FakeExec, *[][]string, *[]string) {
	var argvs [][]string
	var stdins []string
	fe := &fakeexec.FakeExec{}
	for _, r := range replies {
		fcmd := &fakeexec.FakeCmd{}
		fcmd.RunScript = []fakeexec.FakeAction{func() ([]byte, []byte, error) {
			in := ""
			if fcmd.Stdin != nil {
				b, _ := io.ReadAll(fcmd.Stdin)
				in = string(b)
			}
			stdins = append(stdins, in)
			var err error
			if r.code != 0 {
				err = &fakeexec.FakeExitError{Status: r.code}
			}
			return []byte(r.stdout), []byte(r.stderr), err
		}}
		fe.CommandScript = append(fe.CommandScript, func(cmd string, args ...string) utilexec.Cmd {
			argvs = append(argvs, append([]string{cmd}, args...))
			return fakeexec.InitFakeCmd(fcmd, cmd, args...)
		})
	}
	return fe, &argvs, &stdins
}

func TestRunnerRestoreArgsAndFailingLine(t *testing.T) {
	fe, argvs, stdins := scripted(reply{stderr: "iptables-restore v1.8.9 (legacy): Couldn't load target `KUBE-X':No such file or directory\n\nError occurred at line: 3\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n", code: 2})
	ipt := New(fe, ProtocolIPv6, ModeLegacy)
	data := "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-X\nCOMMIT\n"
	err := ipt.RestoreAll(context.Background(), []byte(data), NoFlushTables, RestoreCount)
	if diff := cmp.Diff([][]string{{"ip6tables-legacy-restore", "-w", "5", "--noflush", "--counters"}}, *argvs); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if (*stdins)[0] != data {
		t.Errorf("stdin = %q", (*stdins)[0])
	}
	var ierr *Error
	if !IsInvalid(err) || !errors.As(err, &ierr) || ierr.Line != 3 || ierr.Table != TableNAT || ierr.Text != "-A KUBE-A -j KUBE-X" || ierr.ExitCode != 2 {
		t.Fatalf("RestoreAll = %#v", err)
	}
	if ierr.Stderr != "iptables-restore v1.8.9 (legacy): Couldn't load target `KUBE-X':No such file or directory; Error occurred at line: 3" {
		t.Errorf("stderr kept as %q", ierr.Stderr)
	}
}

func TestRunnerEnsureRule(t *testing.T) {
	fe, argvs, _ := scripted(reply{code: 1}, reply{})
	existed, err := New(fe, ProtocolIPv4, ModeNFT).EnsureRule(context.Background(), Prepend, TableNAT, ChainOutput, "-m", "comment", "--comment", "a b", "-j", "KUBE-SERVICES")
	if err != nil || existed {
		t.Fatalf("EnsureRule = %v, %v", existed, err)
	}
	want := [][]string{
		{"iptables-nft", "-w", "5", "-t", "nat", "-C", "OUTPUT", "-m", "comment", "--comment", "a b", "-j", "KUBE-SERVICES"},
		{"iptables-nft", "-w", "5", "-t", "nat", "-I", "OUTPUT", "-m", "comment", "--comment", "a b", "-j", "KUBE-SERVICES"},
	}
	if diff := cmp.Diff(want, *argvs); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

func TestRunnerDeleteChainKinds(t *testing.T) {
	// legacy: -X exits 1; the chain exists, so it is in use.
	fe, _, _ := scripted(reply{stderr: "iptables: Too many links.", code: 1}, reply{})
	if err := New(fe, ProtocolIPv4, ModeLegacy).DeleteChain(context.Background(), TableNAT, "KUBE-X"); !IsInUse(err) {
		t.Errorf("legacy referenced: %v", err)
	}
	// legacy: -X exits 1 and the chain does not exist.
	fe, _, _ = scripted(reply{code: 1}, reply{code: 1})
	if err := New(fe, ProtocolIPv4, ModeLegacy).DeleteChain(context.Background(), TableNAT, "KUBE-X"); !IsNotFound(err) {
		t.Errorf("legacy missing: %v", err)
	}
	// nft: EBUSY is exit 4.
	fe, _, _ = scripted(reply{code: 4})
	if err := New(fe, ProtocolIPv4, ModeNFT).DeleteChain(context.Background(), TableNAT, "KUBE-X"); !IsInUse(err) {
		t.Errorf("nft referenced: %v", err)
	}
}

func TestRunnerSaveInto(t *testing.T) {
	fe, argvs, _ := scripted(reply{stdout: "*nat\nCOMMIT\n"})
	var buf bytes.Buffer
	if err := New(fe, ProtocolIPv4, ModeNFT).SaveInto(context.Background(), TableNAT, &buf); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "*nat\nCOMMIT\n" || (*argvs)[0][0] != "iptables-nft-save" {
		t.Errorf("SaveInto: %q via %v", buf.String(), *argvs)
	}
}
