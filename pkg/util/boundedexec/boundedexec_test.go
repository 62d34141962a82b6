package boundedexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"
)

// FakeTool writes an executable shell script called name into a fresh directory,
// puts that directory first in $PATH for the test, and returns the directory.
// Scripts use only /bin/sh and coreutils; no root needed.
func fakeTool(t *testing.T, name, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

// readPID waits for the script to write a PID into file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if s := strings.TrimSpace(string(b)); err == nil && s != "" {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool {
	// Signal 0 checks existence; a reaped process is gone (ESRCH).
	return syscall.Kill(pid, 0) == nil
}

func TestRunPassesStdinAndOutput(t *testing.T) {
	fakeTool(t, "kpi-tool", `cat; echo "args: $*"; echo warn >&2`)
	out, errOut, err := Run(context.Background(), utilexec.New(), time.Minute, "kpi-tool", []byte("in\n"), "-a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "in\nargs: -a b\n" || string(errOut) != "warn\n" {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
}

func TestRunExitStatus(t *testing.T) {
	fakeTool(t, "kpi-tool", `echo "it broke" >&2; exit 3`)
	_, errOut, err := Run(context.Background(), utilexec.New(), time.Minute, "kpi-tool", nil)
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Fatalf("err = %v, want exit status 3", err)
	}
	var te *TimeoutError
	if errors.As(err, &te) {
		t.Errorf("a plain failure reported as a timeout: %v", err)
	}
	if string(errOut) != "it broke\n" {
		t.Errorf("stderr %q", errOut)
	}
}

// TestRunKillsHungTool: a tool that never finishes is killed at the deadline and
// reported as a timeout.
func TestRunKillsHungTool(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	fakeTool(t, "kpi-tool", `echo $$ > `+pidFile+`; exec sleep 30`)
	start := time.Now()
	_, _, err := Run(context.Background(), utilexec.New(), 200*time.Millisecond, "kpi-tool", nil)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	var te *TimeoutError
	if !errors.As(err, &te) || te.Command != "kpi-tool" || te.Timeout != 200*time.Millisecond {
		t.Errorf("err = %#v, want a *TimeoutError naming the tool and its timeout", err)
	}
	if !strings.Contains(err.Error(), "kpi-tool timed out after 200ms") {
		t.Errorf("message %q", err)
	}
	if took > 200*time.Millisecond+KillGrace {
		t.Errorf("returned after %s", took)
	}
	if pid := readPID(t, pidFile); alive(pid) {
		t.Errorf("hung tool (pid %d) still running after Run returned", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestRunReturnsWhenAChildHoldsThePipes: the killed tool left a child that keeps
// stdout open; Run still returns, KillGrace after the deadline.
func TestRunReturnsWhenAChildHoldsThePipes(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	fakeTool(t, "kpi-tool", `sleep 20 & echo $! > `+pidFile+`; wait`)
	t.Cleanup(func() {
		// The orphaned sleep is ours: end it by its PID.
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	start := time.Now()
	_, _, err := Run(context.Background(), utilexec.New(), 200*time.Millisecond, "kpi-tool", nil)
	took := time.Since(start)
	if !errors.Is(err, ErrNotReaped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotReaped and a deadline error", err)
	}
	if took < KillGrace || took > 200*time.Millisecond+KillGrace+3*time.Second {
		t.Errorf("returned after %s, want about %s", took, 200*time.Millisecond+KillGrace)
	}
}

func TestRunCallerCancel(t *testing.T) {
	fakeTool(t, "kpi-tool", `exec sleep 30`)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, _, err := Run(ctx, utilexec.New(), time.Minute, "kpi-tool", nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !strings.Contains(err.Error(), "kpi-tool stopped") {
		t.Errorf("message %q", err)
	}
}

func TestRunMissingTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, _, err := Run(context.Background(), utilexec.New(), time.Minute, "kpi-no-such-tool", nil)
	if err == nil || !strings.Contains(err.Error(), "kpi-no-such-tool") {
		t.Fatalf("err = %v, want an error naming the tool", err)
	}
}
