package config

// Early delivery. An informer hands its handlers nothing of its first list until the
// whole list is in: client-go's reflector collects a streamed list (or the pages of
// a paginated one) in a store of its own and replaces its cache with it at the end.
// At tens of thousands of Services that wait is as long as programming them all, and
// the two ran one after the other.
//
// EarlyListWatch wraps the ListerWatcher of a Service or EndpointSlice informer so
// that every object of the first list is also handed, as it arrives, to the config
// the informer feeds (EarlyFrom), which passes it to its handlers as an add. When the
// informer delivers the list, an object already handed over with the same
// resourceVersion is not delivered again (another one is an update), and an object
// handed over that the list does not hold (a streamed list that was retried after
// the object was deleted) is delivered as a delete before the handlers are told the
// config has synced. The handlers so see what the informer sees, in the same order
// for each object, only sooner; and whatever an early object wrongly makes them do
// is undone before they are synced. A proxier that acts on objects before it is
// synced must still act as if more may come (pkg/proxy/ipvs/warm.go).

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
)

// EarlyListWatch is a ListerWatcher that hands the objects of the first list on as
// they arrive (see above).
type EarlyListWatch struct {
	inner cache.ListerWatcherWithContext
	// noStreaming: the client cannot stream lists (a fake clientset); the
	// reflector then lists in pages.
	noStreaming bool
	mu          sync.Mutex
	sink        func(runtime.Object)
	off         atomic.Bool
}

var _ cache.ListerWatcher = &EarlyListWatch{}
var _ cache.ListerWatcherWithContext = &EarlyListWatch{}

// NewEarlyListWatch wraps lw, which lists and watches through client;
// nothing is handed on until a config takes it (EarlyFrom).
func NewEarlyListWatch(lw cache.ListerWatcherWithContext, client any) *EarlyListWatch {
	return &EarlyListWatch{inner: lw, noStreaming: watchlist.DoesClientNotSupportWatchListSemantics(client)}
}

// IsWatchListSemanticsUnSupported tells the reflector whether the client can
// stream lists, as client-go's own ListerWatchers do.
func (e *EarlyListWatch) IsWatchListSemanticsUnSupported() bool { return e.noStreaming }

// ListWithContext lists a page, handing its items on.
func (e *EarlyListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := e.inner.ListWithContext(ctx, opts)
	if err != nil || e.off.Load() {
		return list, err
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		e.hand(o)
		return nil
	})
	return list, nil
}

// WatchWithContext opens a watch; one that streams the initial list hands the
// objects of that list on.
func (e *EarlyListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := e.inner.WatchWithContext(ctx, opts)
	if err != nil || e.off.Load() || opts.SendInitialEvents == nil || !*opts.SendInitialEvents {
		return w, err
	}
	return newEarlyWatch(w, e.hand), nil
}

// List and Watch are the ListerWatcher without a context.
func (e *EarlyListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return e.ListWithContext(context.Background(), opts)
}

func (e *EarlyListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return e.WatchWithContext(context.Background(), opts)
}

func (e *EarlyListWatch) hand(o runtime.Object) {
	if e.off.Load() {
		return
	}
	e.mu.Lock()
	sink := e.sink
	e.mu.Unlock()
	if sink != nil {
		sink(o)
	}
}

func (e *EarlyListWatch) setSink(sink func(runtime.Object)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sink = sink
}

// stop ends the handing on: the first list is in.
func (e *EarlyListWatch) stop() {
	e.off.Store(true)
	e.setSink(nil)
}

// earlyWatch passes a watch's events on, handing each object added before the
// initial-events-end bookmark to hand first.
type earlyWatch struct {
	inner watch.Interface
	out   chan watch.Event
	done  chan struct{}
	once  sync.Once
}

func newEarlyWatch(w watch.Interface, hand func(runtime.Object)) *earlyWatch {
	ew := &earlyWatch{inner: w, out: make(chan watch.Event), done: make(chan struct{})}
	go ew.run(hand)
	return ew
}

func (w *earlyWatch) run(hand func(runtime.Object)) {
	defer close(w.out)
	initial := true
	for ev := range w.inner.ResultChan() {
		if initial {
			switch ev.Type {
			case watch.Added:
				hand(ev.Object)
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					initial = false
				}
			}
		}
		select {
		case w.out <- ev:
		case <-w.done:
			return
		}
	}
}

func (w *earlyWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.inner.Stop()
	})
}

func (w *earlyWatch) ResultChan() <-chan watch.Event { return w.out }

// earlyObjects are the objects a config handed its handlers before its informer
// delivered them (or holds until Run, pending).
type earlyObjects[T any] struct {
	mu      sync.Mutex
	lw      *EarlyListWatch
	live    bool // Run has begun: hand objects to the handlers at once
	done    bool
	pending map[string]T
	handed  map[string]T
}

// EarlyFrom makes lw, the ListerWatcher of the config's informer, hand the config
// the objects of the informer's first list as they arrive. Call it before the
// informer starts.
func (c *objectConfig[T, H]) EarlyFrom(lw *EarlyListWatch) {
	if c.meta == nil {
		return
	}
	c.early = &earlyObjects[T]{lw: lw, pending: map[string]T{}, handed: map[string]T{}}
	lw.setSink(c.takeEarly)
}

func (c *objectConfig[T, H]) key(o T) (string, *proxy.RecordMeta) {
	m := c.meta(o)
	return m.Namespace + "/" + m.Name, m
}

// takeEarly takes one object of the first list as it arrives.
func (c *objectConfig[T, H]) takeEarly(obj runtime.Object) {
	o, ok := c.object(obj)
	if !ok {
		return
	}
	e := c.early
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return
	}
	key, m := c.key(o)
	if !e.live {
		e.pending[key] = o
		return
	}
	old, had := e.handed[key]
	e.handed[key] = o
	switch {
	case !had:
		c.handlers.each(func(h H) { c.add(h, o) })
	case c.meta(old).ResourceVersion != m.ResourceVersion:
		c.handlers.each(func(h H) { c.update(h, old, o) })
	}
}

// beginEarly hands the handlers what arrived before Run.
func (c *objectConfig[T, H]) beginEarly() {
	e := c.early
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.live = true
	for key, o := range e.pending {
		e.handed[key] = o
		c.handlers.each(func(h H) { c.add(h, o) })
	}
	e.pending = nil
}

// confirmEarly is the informer delivering o as an add: it reports whether o was
// handed over early, and tells the handlers of any difference.
func (c *objectConfig[T, H]) confirmEarly(o T) bool {
	e := c.early
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	key, m := c.key(o)
	old, had := e.handed[key]
	if !had {
		return false
	}
	delete(e.handed, key)
	if c.meta(old).ResourceVersion != m.ResourceVersion {
		c.handlers.each(func(h H) { c.update(h, old, o) })
	}
	return true
}

// endEarly ends early delivery once the informer has delivered its first list:
// what was handed over and is not in it is deleted.
func (c *objectConfig[T, H]) endEarly() {
	e := c.early
	if e == nil {
		return
	}
	e.lw.stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done = true
	for key, o := range e.handed {
		c.logger.V(2).Info("An object of the first list is gone", "key", key)
		c.handlers.each(func(h H) { c.remove(h, o) })
	}
	e.handed, e.pending = nil, nil
}
