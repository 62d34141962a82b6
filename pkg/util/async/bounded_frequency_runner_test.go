package async

import (
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// harness drives a runner on a fake clock. Every event Loop handles is acknowledged
// on iterated, so the test knows exactly when the loop has caught up.
type harness struct {
	t        *testing.T
	clock    *testingclock.FakeClock
	runner   *BoundedFrequencyRunner
	runs     atomic.Int32
	iterated chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

func newHarness(t *testing.T, minInterval, maxInterval time.Duration, burst int) *harness {
	t.Helper()
	h := &harness{
		t:        t,
		clock:    testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		iterated: make(chan struct{}, 100),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	h.runner = NewBoundedFrequencyRunnerWithClock("test", func() { h.runs.Add(1) }, minInterval, maxInterval, burst, h.clock)
	h.runner.iterated = h.iterated
	go func() {
		defer close(h.done)
		h.runner.Loop(h.stop)
	}()
	// Loop creates its timer first thing; wait for it so Steps are not lost.
	deadline := time.Now().Add(2 * time.Second)
	for !h.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("Loop never created its timer")
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Cleanup(func() {
		close(h.stop)
		<-h.done
	})
	return h
}

// settle waits for n loop iterations.
func (h *harness) settle(n int) {
	h.t.Helper()
	for range n {
		select {
		case <-h.iterated:
		case <-time.After(2 * time.Second):
			h.t.Fatal("loop did not handle an expected event")
		}
	}
}

// quiet asserts that the loop handles no event for a few milliseconds.
func (h *harness) quiet() {
	h.t.Helper()
	select {
	case <-h.iterated:
		h.t.Fatal("loop handled an unexpected event")
	case <-time.After(5 * time.Millisecond):
	}
}

func (h *harness) run() {
	h.t.Helper()
	h.runner.Run()
	h.settle(1)
}

// step advances the fake clock; fires is whether the runner's timer is due.
func (h *harness) step(d time.Duration, fires bool) {
	h.t.Helper()
	h.clock.Step(d)
	if fires {
		h.settle(1)
	} else {
		h.quiet()
	}
}

func (h *harness) wantRuns(want int32) {
	h.t.Helper()
	if got := h.runs.Load(); got != want {
		h.t.Fatalf("runs = %d, want %d", got, want)
	}
}

func TestRunIsImmediateWhenAllowed(t *testing.T) {
	h := newHarness(t, time.Second, time.Minute, 1)
	h.wantRuns(0)
	h.run()
	h.wantRuns(1)
}

func TestMinIntervalLimitsRuns(t *testing.T) {
	h := newHarness(t, time.Second, time.Minute, 1)
	h.run()
	h.wantRuns(1)

	// Too soon: deferred, not dropped.
	h.step(500*time.Millisecond, false)
	h.run()
	h.wantRuns(1)

	// The deferred run happens exactly one minInterval after the first.
	h.step(499*time.Millisecond, false)
	h.wantRuns(1)
	h.step(time.Millisecond, true)
	h.wantRuns(2)

	// Nothing further was requested.
	h.step(10*time.Second, false)
	h.wantRuns(2)
}

func TestRunRequestsCoalesce(t *testing.T) {
	h := newHarness(t, time.Second, time.Minute, 1)
	h.run()
	for range 10 {
		h.run()
	}
	h.wantRuns(1)
	h.step(time.Second, true)
	h.wantRuns(2)
	h.step(5*time.Second, false)
	h.wantRuns(2)
}

func TestBurstRuns(t *testing.T) {
	h := newHarness(t, time.Second, time.Minute, 3)
	h.run()
	h.run()
	h.run()
	h.wantRuns(3)
	h.run() // bucket empty
	h.wantRuns(3)
	h.step(time.Second, true)
	h.wantRuns(4)

	// Tokens refill while idle, up to the burst size.
	h.step(10*time.Second, false)
	h.run()
	h.run()
	h.run()
	h.wantRuns(7)
	h.run()
	h.wantRuns(7)
}

func TestMaxIntervalForcesRun(t *testing.T) {
	h := newHarness(t, time.Second, 10*time.Second, 1)
	h.step(9*time.Second, false)
	h.wantRuns(0)
	h.step(time.Second, true)
	h.wantRuns(1)
	h.step(10*time.Second, true)
	h.wantRuns(2)

	// A requested run pushes the periodic run back to maxInterval after it.
	h.step(5*time.Second, false)
	h.run()
	h.wantRuns(3)
	h.step(9*time.Second, false)
	h.step(time.Second, true)
	h.wantRuns(4)
}

func TestZeroMinIntervalIsUnlimited(t *testing.T) {
	h := newHarness(t, 0, time.Minute, 1)
	for range 5 {
		h.run()
	}
	h.wantRuns(5)
}

func TestRetryAfterSchedulesRun(t *testing.T) {
	h := newHarness(t, time.Second, time.Minute, 1)
	h.runner.RetryAfter(5 * time.Second)
	h.settle(1)
	h.step(4*time.Second, false)
	h.wantRuns(0)
	h.step(time.Second, true)
	h.wantRuns(1)

	// The periodic schedule resumes from the retried run.
	h.step(59*time.Second, false)
	h.step(time.Second, true)
	h.wantRuns(2)
}

func TestRetryAfterKeepsEarliest(t *testing.T) {
	h := newHarness(t, time.Second, time.Minute, 1)
	h.runner.RetryAfter(3 * time.Second)
	h.settle(1)
	h.runner.RetryAfter(10 * time.Second) // later than the pending retry: ignored
	h.settle(1)
	h.step(3*time.Second, true)
	h.wantRuns(1)
	h.step(10*time.Second, false)
	h.wantRuns(1)
}

func TestRetryAfterBeyondMaxIntervalIsNoop(t *testing.T) {
	h := newHarness(t, time.Second, 10*time.Second, 1)
	h.runner.RetryAfter(30 * time.Second)
	h.settle(1)
	h.step(10*time.Second, true)
	h.wantRuns(1)
	h.step(9*time.Second, false)
	h.wantRuns(1)
}

func TestRetryAfterRespectsMinInterval(t *testing.T) {
	h := newHarness(t, 2*time.Second, time.Minute, 1)
	h.run()
	h.wantRuns(1)
	h.runner.RetryAfter(0) // due now, but the bucket is empty
	h.settle(1)
	h.wantRuns(1)
	h.step(time.Second, false)
	h.step(time.Second, true)
	h.wantRuns(2)
}

func TestRunQueuedBeforeLoopStarts(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	var runs atomic.Int32
	r := NewBoundedFrequencyRunnerWithClock("early", func() { runs.Add(1) }, time.Second, time.Minute, 1, clk)
	iterated := make(chan struct{}, 10)
	r.iterated = iterated
	r.Run()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); r.Loop(stop) }()
	select {
	case <-iterated:
	case <-time.After(2 * time.Second):
		t.Fatal("queued Run was not handled")
	}
	close(stop)
	<-done
	if runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
}

func TestLoopStops(t *testing.T) {
	r := NewBoundedFrequencyRunner("stop", func() {}, time.Millisecond, time.Second, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); r.Loop(stop) }()
	close(stop)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Loop did not return after stop was closed")
	}
}

func TestRealClockRuns(t *testing.T) {
	ran := make(chan struct{}, 1)
	r := NewBoundedFrequencyRunner("real", func() { ran <- struct{}{} }, time.Millisecond, time.Hour, 1)
	stop := make(chan struct{})
	defer close(stop)
	go r.Loop(stop)
	r.Run()
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("fn did not run on the real clock")
	}
}

func TestConstructorRejectsBadIntervals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		min, max time.Duration
	}{
		{"max below min", 2 * time.Second, time.Second},
		{"zero max", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("expected a panic")
				}
			}()
			NewBoundedFrequencyRunner("bad", func() {}, tc.min, tc.max, 1)
		})
	}
}
