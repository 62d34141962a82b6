// Package async holds BoundedFrequencyRunner, the rate-limited trigger behind a
// proxier's sync loop.
package async

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// BoundedFrequencyRunner runs a function on demand, but never more often than a token
// bucket allows (one token per minInterval, at most burstRuns saved up) and never less
// often than once per maxInterval. Requests made while the function cannot run are
// coalesced into one run at the earliest allowed time.
//
// The function only ever runs on the goroutine that called Loop, so it needs no
// locking against itself.
type BoundedFrequencyRunner struct {
	name        string
	fn          func()
	minInterval time.Duration
	maxInterval time.Duration
	clock       clock.Clock

	// run holds at most one pending Run request; further requests coalesce into it.
	run chan struct{}
	// retry wakes Loop up to look at retryAt.
	retry chan struct{}

	mu sync.Mutex
	// retryAt is the earliest retry asked for through RetryAfter and not yet
	// handed to Loop; zero when there is none.
	retryAt time.Time

	// Owned by the Loop goroutine.
	timer    clock.Timer
	deadline time.Time // when timer fires
	bucket   tokenBucket

	// iterated, when set (tests only), receives a value after each event Loop handles.
	iterated chan<- struct{}
}

// NewBoundedFrequencyRunner returns a runner for fn that uses the real clock. See
// NewBoundedFrequencyRunnerWithClock.
func NewBoundedFrequencyRunner(name string, fn func(), minInterval, maxInterval time.Duration, burstRuns int) *BoundedFrequencyRunner {
	return NewBoundedFrequencyRunnerWithClock(name, fn, minInterval, maxInterval, burstRuns, clock.RealClock{})
}

// NewBoundedFrequencyRunnerWithClock returns a runner for fn. fn runs at most burstRuns
// times back to back, then at most once per minInterval (minInterval 0 means no limit),
// and at least once per maxInterval. The runner does nothing until Loop is called.
//
// It panics if maxInterval < minInterval or maxInterval <= 0: those are programming
// errors, not runtime conditions.
func NewBoundedFrequencyRunnerWithClock(name string, fn func(), minInterval, maxInterval time.Duration, burstRuns int, clk clock.Clock) *BoundedFrequencyRunner {
	if maxInterval <= 0 || maxInterval < minInterval {
		panic(fmt.Sprintf("%s: maxInterval (%v) must be > 0 and >= minInterval (%v)", name, maxInterval, minInterval))
	}
	if minInterval < 0 {
		minInterval = 0
	}
	if burstRuns < 1 {
		burstRuns = 1
	}
	return &BoundedFrequencyRunner{
		name:        name,
		fn:          fn,
		minInterval: minInterval,
		maxInterval: maxInterval,
		clock:       clk,
		run:         make(chan struct{}, 1),
		retry:       make(chan struct{}, 1),
		bucket:      newTokenBucket(minInterval, burstRuns, clk.Now()),
	}
}

// Loop runs the function whenever it is requested or due, until stop is closed. Call
// it once, on its own goroutine.
func (bfr *BoundedFrequencyRunner) Loop(stop <-chan struct{}) {
	bfr.timer = bfr.clock.NewTimer(bfr.maxInterval)
	bfr.deadline = bfr.clock.Now().Add(bfr.maxInterval)
	defer bfr.timer.Stop()

	for {
		select {
		case <-stop:
			return
		case <-bfr.timer.C():
			bfr.tryRun()
		case <-bfr.run:
			bfr.tryRun()
		case <-bfr.retry:
			bfr.applyRetry()
		}
		if bfr.iterated != nil {
			bfr.iterated <- struct{}{}
		}
	}
}

// Run asks for the function to run as soon as the rate limit allows. It never blocks;
// requests made before the function gets to run are merged into one run.
func (bfr *BoundedFrequencyRunner) Run() {
	select {
	case bfr.run <- struct{}{}:
	default:
	}
}

// RetryAfter schedules a run no later than d from now (still subject to the rate
// limit). Used after a failed run; a run that happens earlier for any other reason
// satisfies the retry.
func (bfr *BoundedFrequencyRunner) RetryAfter(d time.Duration) {
	at := bfr.clock.Now().Add(d)

	bfr.mu.Lock()
	if bfr.retryAt.IsZero() || at.Before(bfr.retryAt) {
		bfr.retryAt = at
	}
	bfr.mu.Unlock()

	select {
	case bfr.retry <- struct{}{}:
	default:
	}
}

// tryRun runs the function if the token bucket allows it now; otherwise it makes sure
// the timer fires no later than when the next token is available.
func (bfr *BoundedFrequencyRunner) tryRun() {
	now := bfr.clock.Now()
	if bfr.bucket.take(now) {
		bfr.fn()
		bfr.resetTimer(bfr.maxInterval)
		return
	}
	wait := bfr.bucket.wait(now)
	if remaining := bfr.deadline.Sub(now); remaining > 0 && remaining < wait {
		wait = remaining
	}
	bfr.resetTimer(wait)
}

// applyRetry moves the timer earlier if a requested retry is due before it.
func (bfr *BoundedFrequencyRunner) applyRetry() {
	bfr.mu.Lock()
	at := bfr.retryAt
	bfr.retryAt = time.Time{}
	bfr.mu.Unlock()

	if at.IsZero() || !at.Before(bfr.deadline) {
		return
	}
	wait := at.Sub(bfr.clock.Now())
	if wait <= 0 {
		// A timer set in the past would fire at once on the real clock but only on
		// the next Step of a fake one; run the check now so both behave the same.
		bfr.tryRun()
		return
	}
	bfr.resetTimer(wait)
}

// resetTimer makes the timer fire d from now and nothing earlier.
func (bfr *BoundedFrequencyRunner) resetTimer(d time.Duration) {
	if !bfr.timer.Stop() {
		// Drop a tick that fired but was not received, so it cannot cause an extra
		// run later.
		select {
		case <-bfr.timer.C():
		default:
		}
	}
	bfr.timer.Reset(d)
	bfr.deadline = bfr.clock.Now().Add(d)
}

// tokenBucket counts credit in nanoseconds so that the fake clock's exact steps give
// exact answers (a token is one interval's worth of credit).
type tokenBucket struct {
	interval time.Duration // 0: unlimited
	capacity time.Duration // interval * burst
	credit   time.Duration
	last     time.Time
}

func newTokenBucket(interval time.Duration, burst int, now time.Time) tokenBucket {
	capacity := interval * time.Duration(burst)
	return tokenBucket{interval: interval, capacity: capacity, credit: capacity, last: now}
}

func (b *tokenBucket) refill(now time.Time) {
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.credit += elapsed
		if b.credit > b.capacity {
			b.credit = b.capacity
		}
	}
	b.last = now
}

// take consumes a token if one is available at now.
func (b *tokenBucket) take(now time.Time) bool {
	if b.interval == 0 {
		return true
	}
	b.refill(now)
	if b.credit < b.interval {
		return false
	}
	b.credit -= b.interval
	return true
}

// wait is how long after now the next token becomes available (0 if one is).
func (b *tokenBucket) wait(now time.Time) time.Duration {
	if b.interval == 0 {
		return 0
	}
	b.refill(now)
	if b.credit >= b.interval {
		return 0
	}
	return b.interval - b.credit
}
