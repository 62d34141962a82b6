package ipset

import (
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

// hungIPSet puts a fake ipset first in $PATH that never finishes (it records its
// arguments and stdin, then sleeps), and returns a runner with short deadlines.
func hungIPSet(t *testing.T) (*runner, string) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"$*\" > " + dir + "/args\ncat > " + dir + "/stdin\nexec sleep 30\n"
	if err := os.WriteFile(filepath.Join(dir, "ipset"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := New(utilexec.New()).(*runner)
	r.readTimeout, r.restoreTimeout, r.restorePerLine = 200*time.Millisecond, 200*time.Millisecond, 0
	return r, dir
}

func wantTimeout(t *testing.T, what string, err error, start time.Time) {
	t.Helper()
	var te *boundedexec.TimeoutError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &te) {
		t.Fatalf("%s: err = %v, want a timeout", what, err)
	}
	if !strings.Contains(err.Error(), "ipset timed out after 200ms") {
		t.Errorf("%s: message %q does not say the tool timed out", what, err)
	}
	if took := time.Since(start); took > 200*time.Millisecond+boundedexec.KillGrace {
		t.Errorf("%s returned after %s", what, took)
	}
}

// TestHungIPSetIsKilledAndReported: every runner call over a hung ipset returns
// a timeout error at its deadline instead of blocking the sync loop.
func TestHungIPSetIsKilledAndReported(t *testing.T) {
	r, dir := hungIPSet(t)
	ctx := context.Background()
	tx := &Transaction{}
	tx.Create(&Set{Name: "A", Type: HashIP})
	start := time.Now()
	wantTimeout(t, "Apply", r.Apply(ctx, tx), start)
	if b, _ := os.ReadFile(filepath.Join(dir, "args")); strings.TrimSpace(string(b)) != "restore -exist" {
		t.Errorf("fake ipset ran with %q", b)
	}
	start = time.Now()
	_, err := r.SaveAll(ctx)
	wantTimeout(t, "SaveAll", err, start)
	start = time.Now()
	_, err = r.ListSets(ctx)
	wantTimeout(t, "ListSets", err, start)
	start = time.Now()
	_, err = r.ListEntries(ctx, "A")
	wantTimeout(t, "ListEntries", err, start)
}

// TestRestoreDeadlineGrowsWithTheBatch: a batch gets RestoreTimeout plus
// RestoreTimeoutPerLine per line, so a big first sync is not cut short.
func TestRestoreDeadlineGrowsWithTheBatch(t *testing.T) {
	r, _ := hungIPSet(t)
	r.restoreTimeout, r.restorePerLine = 100*time.Millisecond, 100*time.Millisecond
	tx := &Transaction{}
	tx.Create(&Set{Name: "A", Type: HashIP})
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"} {
		tx.Add("A", ip)
	}
	start := time.Now()
	err := r.Apply(context.Background(), tx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	// 6 lines: 100ms + 6 x 100ms.
	if took < 700*time.Millisecond {
		t.Errorf("timed out after %s, want at least 700ms for 6 lines", took)
	}
}
