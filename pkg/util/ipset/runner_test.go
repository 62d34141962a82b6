package ipset

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilexec "k8s.io/utils/exec"
	fakeexec "k8s.io/utils/exec/testing"
)

// scripted returns a FakeExec whose single command records its argv and stdin and
// answers with stdout, stderr and exit status code (0 = success).
func scripted(t *testing.T, stdout, stderr string, code int) (*fakeexec.FakeExec, *[]string, *string) {
	var argv []string
	var stdin string
	fcmd := &fakeexec.FakeCmd{}
	fcmd.RunScript = []fakeexec.FakeAction{func() ([]byte, []byte, error) {
		if fcmd.Stdin != nil {
			b, _ := io.ReadAll(fcmd.Stdin)
			stdin = string(b)
		}
		var err error
		if code != 0 {
			err = &fakeexec.FakeExitError{Status: code}
		}
		return []byte(stdout), []byte(stderr), err
	}}
	fe := &fakeexec.FakeExec{CommandScript: []fakeexec.FakeCommandAction{func(cmd string, args ...string) utilexec.Cmd {
		argv = append([]string{cmd}, args...)
		return fakeexec.InitFakeCmd(fcmd, cmd, args...)
	}}}
	return fe, &argv, &stdin
}

func TestRunnerApplyMapsFailingLine(t *testing.T) {
	fe, argv, stdin := scripted(t, "", "ipset v7.17: Error in line 2: The set with the given name does not exist\n", 1)
	tx := &Transaction{}
	tx.Create(&Set{Name: "A", Type: HashIP})
	tx.Add("B", "10.0.0.1")
	err := New(fe).Apply(context.Background(), tx)
	if diff := cmp.Diff([]string{"ipset", "restore", "-exist"}, *argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	wantScript := "create A hash:ip family inet hashsize 1024 maxelem 65536\nadd B 10.0.0.1\n"
	if *stdin != wantScript {
		t.Errorf("stdin = %q, want %q", *stdin, wantScript)
	}
	var ierr *Error
	if !IsNotFound(err) || !errors.As(err, &ierr) || ierr.Index != 1 || ierr.Line != "add B 10.0.0.1" {
		t.Fatalf("Apply = %v, want not found at op 1", err)
	}
	if !strings.Contains(err.Error(), `operation 1 "add B 10.0.0.1"`) {
		t.Errorf("message %q does not name the operation", err)
	}
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 1 {
		t.Errorf("exit error not reachable through %v", err)
	}
}

func TestRunnerEmptyTransactionRunsNothing(t *testing.T) {
	fe := &fakeexec.FakeExec{} // any command would panic
	if err := New(fe).Apply(context.Background(), &Transaction{}); err != nil {
		t.Fatal(err)
	}
}

func TestRunnerListSets(t *testing.T) {
	fe, argv, _ := scripted(t, "Name: A\nType: hash:ip\nRevision: 6\nHeader: family inet6 hashsize 64 maxelem 9 bucketsize 12 initval 0x1\nSize in memory: 1\nReferences: 0\nNumber of entries: 0\n", "", 0)
	sets, err := New(fe).ListSets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ipset", "list", "-t"}, *argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*Set{{Name: "A", Type: HashIP, Family: FamilyInet6, HashSize: 64, MaxElem: 9}}, sets); diff != "" {
		t.Errorf("sets (-want +got):\n%s", diff)
	}
}

// TestRunnerSaveSetsReadsNamesAgainOnce: a set destroyed between `list -n` and
// the `save` lines fails the restore; SaveSets reads the names again and asks only
// for the sets that exist, and never asks for a name nobody wanted.
func TestRunnerSaveSetsReadsNamesAgainOnce(t *testing.T) {
	type call struct{ argv, stdin string }
	var calls []call
	answers := []struct {
		stdout, stderr string
		code           int
	}{
		{"A\nB\nOTHER\n", "", 0},
		{"", "ipset v7.17: Error in line 2: The set with the given name does not exist\n", 1},
		{"A\nOTHER\n", "", 0},
		{"create A hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\nadd A 10.0.0.1\n", "", 0},
	}
	fe := &fakeexec.FakeExec{}
	for i := range answers {
		a := answers[i]
		fcmd := &fakeexec.FakeCmd{}
		fcmd.RunScript = []fakeexec.FakeAction{func() ([]byte, []byte, error) {
			in := ""
			if fcmd.Stdin != nil {
				b, _ := io.ReadAll(fcmd.Stdin)
				in = string(b)
			}
			calls[len(calls)-1].stdin = in
			if a.code != 0 {
				return []byte(a.stdout), []byte(a.stderr), &fakeexec.FakeExitError{Status: a.code}
			}
			return []byte(a.stdout), nil, nil
		}}
		fe.CommandScript = append(fe.CommandScript, func(cmd string, args ...string) utilexec.Cmd {
			calls = append(calls, call{argv: strings.Join(append([]string{cmd}, args...), " ")})
			return fakeexec.InitFakeCmd(fcmd, cmd, args...)
		})
	}
	got, err := New(fe).SaveSets(context.Background(), []string{"A", "B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	want := []call{
		{"ipset list -n", ""},
		{"ipset restore", "save A\nsave B\n"},
		{"ipset list -n", ""},
		{"ipset restore", "save A\n"},
	}
	if diff := cmp.Diff(want, calls, cmp.AllowUnexported(call{})); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	if len(got) != 1 || got["A"] == nil || strings.Join(got["A"].Entries, ",") != "10.0.0.1" {
		t.Errorf("SaveSets = %v, want A with 10.0.0.1", got)
	}
}
