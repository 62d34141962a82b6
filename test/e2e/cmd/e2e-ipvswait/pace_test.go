package main

import (
	"testing"
	"time"
)

// TestSlowWaitsStretchWithTheirReads: a set read that takes D is not
// repeated sooner than paceFactor x D, however short the interval asked for,
// and the fast loop's wait follows the same rule.
func TestSlowWaitsStretchWithTheirReads(t *testing.T) {
	const readCost = 30 * time.Millisecond
	reads := 0
	w, err := newSlowWaits("KUBE-CLUSTER-IP=5", "", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	w.members = func(string) int {
		reads++
		time.Sleep(readCost)
		return 1
	}
	start := time.Now()
	if w.poll(start) {
		t.Fatal("complete with 1 of 5 members")
	}
	if reads != 1 || w.cost < readCost {
		t.Fatalf("first poll: %d reads, cost %s; want 1 read costing >= %s", reads, w.cost, readCost)
	}
	if w.wait < paceFactor*readCost {
		t.Fatalf("wait after a %s read is %s, want >= %s", w.cost, w.wait, paceFactor*readCost)
	}
	// Polled again at once (the fast loop runs every few ms): no read.
	time.Sleep(5 * time.Millisecond)
	w.poll(start)
	if reads != 1 || w.cost != 0 {
		t.Fatalf("poll %s after a %s read read again (%d reads, cost %s)", 5*time.Millisecond, readCost, reads, w.cost)
	}
	time.Sleep(w.wait)
	w.poll(start)
	if reads != 2 {
		t.Fatalf("no read after the stretched wait %s: %d reads", w.wait, reads)
	}
	w.members = func(string) int { return 5 }
	time.Sleep(w.wait)
	if !w.poll(start) {
		t.Fatal("not complete with 5 of 5 members")
	}
}

func TestPaceKeepsTheIntervalForCheapReads(t *testing.T) {
	for _, c := range []struct{ interval, cost, want time.Duration }{
		{200 * time.Millisecond, 10 * time.Millisecond, 200 * time.Millisecond},
		{200 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond},
		{5 * time.Millisecond, 0, 5 * time.Millisecond},
	} {
		if got := pace(c.interval, c.cost); got != c.want {
			t.Errorf("pace(%s, %s) = %s, want %s", c.interval, c.cost, got, c.want)
		}
	}
}
