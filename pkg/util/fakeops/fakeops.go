// Package fakeops counts the calls a kernel Fake receives and injects errors into
// them; the Fakes of pkg/util embed a Recorder.
package fakeops

import (
	"context"
	"maps"
	"sync"
)

// Recorder counts operations by name and holds injected errors. Its zero value is
// ready to use and it is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	ops    map[string]int
	inject map[string]error
}

// Begin counts op and returns the context's error or the error injected for op.
func (r *Recorder) Begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ops == nil {
		r.ops = map[string]int{}
	}
	r.ops[op]++
	return r.inject[op]
}

// Ops returns how many calls of each operation were made, failed ones included.
func (r *Recorder) Ops() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := maps.Clone(r.ops)
	if out == nil {
		out = map[string]int{}
	}
	return out
}

// ResetOps zeroes the operation counters.
func (r *Recorder) ResetOps() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = nil
}

// InjectError makes every later call of opName fail with err (the Fake wraps it as
// the real error would be) without changing state; a nil err removes the injection.
func (r *Recorder) InjectError(opName string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.inject, opName)
		return
	}
	if r.inject == nil {
		r.inject = map[string]error{}
	}
	r.inject[opName] = err
}
