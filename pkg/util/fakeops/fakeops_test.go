package fakeops

import (
	"context"
	"errors"
	"testing"
)

func TestRecorder(t *testing.T) {
	var r Recorder
	ctx := context.Background()
	boom := errors.New("boom")
	if err := r.Begin(ctx, "add"); err != nil {
		t.Fatal(err)
	}
	r.InjectError("add", boom)
	if err := r.Begin(ctx, "add"); !errors.Is(err, boom) {
		t.Fatalf("injected error not returned: %v", err)
	}
	if got := r.Ops()["add"]; got != 2 {
		t.Errorf("ops[add] = %d, want 2 (failed calls count)", got)
	}
	r.InjectError("add", nil)
	r.ResetOps()
	if err := r.Begin(ctx, "add"); err != nil || r.Ops()["add"] != 1 {
		t.Errorf("after reset: err %v, ops %v", err, r.Ops())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Begin(cctx, "del"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}
