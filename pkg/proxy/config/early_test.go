package config

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// streamLW serves Services the way an API server does: a watch that asks for the
// initial events gets w (the test feeds it); a list gets list, or an error when
// noList.
type streamLW struct {
	mu      sync.Mutex
	watches []*watch.FakeWatcher
	list    []v1.Service
	refuse  bool // refuse streamed lists: the reflector falls back to a list
}

func (s *streamLW) ListWithContext(_ context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &v1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: s.list}, nil
}

func (s *streamLW) WatchWithContext(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse && opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		return nil, apierrors.NewBadRequest("no streaming lists here")
	}
	w := watch.NewFakeWithChanSize(100, false)
	s.watches = append(s.watches, w)
	return w, nil
}

// watch returns the n-th watch opened, waiting for it.
func (s *streamLW) watch(t *testing.T, n int) *watch.FakeWatcher {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		if len(s.watches) > n {
			w := s.watches[n]
			s.mu.Unlock()
			return w
		}
		s.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("watch %d was never opened", n)
	return nil
}

func versioned(name, clusterIP, rv string) *v1.Service {
	s := service(name, clusterIP)
	s.ResourceVersion = rv
	return s
}

func endOfInitialEvents(rv string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv,
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
}

// startEarly runs a ServiceConfig over lw with early delivery, as the daemon does.
func startEarly(t *testing.T, lw *streamLW) (*recorder, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	early := NewEarlyListWatch(lw, nil)
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	factory.InformerFor(&v1.Service{}, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(early, &v1.Service{}, 0, cache.Indexers{})
	})
	c := NewServiceConfig(ctx, factory.Core().V1().Services(), 0)
	c.EarlyFrom(early)
	r := newRecorder()
	c.RegisterEventHandler(r)
	factory.Start(ctx.Done())
	go c.Run(ctx.Done())
	return r, cancel
}

// TestEarlyDeliveryOfAStreamedList: the objects of a streamed first list reach the
// handlers as they arrive, before the list is complete; the informer's delivery of
// the list then repeats none of them, and what follows is delivered as usual.
func TestEarlyDeliveryOfAStreamedList(t *testing.T) {
	lw := &streamLW{}
	r, _ := startEarly(t, lw)
	w := lw.watch(t, 0)
	w.Add(versioned("a", "10.0.0.1", "1"))
	w.Add(versioned("b", "10.0.0.2", "2"))
	want := []string{"add service ns/a", "add service ns/b"}
	if got := r.waitFor(t, 2); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("before the list is complete: %q, want %q", got, want)
	}
	w.Action(watch.Bookmark, endOfInitialEvents("3"))
	want = append(want, "services synced")
	if got := r.waitFor(t, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("once the list is complete: %q, want %q", got, want)
	}
	w.Modify(versioned("b", "10.0.0.9", "4"))
	want = append(want, "update service ns/b 10.0.0.2->10.0.0.9")
	if got := r.waitFor(t, 4); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the list: %q, want %q", got, want)
	}
	time.Sleep(100 * time.Millisecond)
	if got := r.got(); len(got) != 4 {
		t.Errorf("events after the list: %q", got)
	}
}

// TestEarlyDeliveryUndoneByTheList: a streamed list that breaks off is retried;
// an object handed over early that the complete list no longer holds is deleted,
// and one that changed meanwhile updated, before the handlers are told the
// config has synced.
func TestEarlyDeliveryUndoneByTheList(t *testing.T) {
	lw := &streamLW{}
	r, _ := startEarly(t, lw)
	w := lw.watch(t, 0)
	w.Add(versioned("a", "10.0.0.1", "1"))
	w.Add(versioned("b", "10.0.0.2", "2"))
	r.waitFor(t, 2)
	w.Stop() // the stream breaks off before its end
	w = lw.watch(t, 1)
	w.Add(versioned("a", "10.0.0.5", "5"))
	w.Action(watch.Bookmark, endOfInitialEvents("6"))
	want := []string{"add service ns/a", "add service ns/b",
		"update service ns/a 10.0.0.1->10.0.0.5", "delete service ns/b", "services synced"}
	if got := r.waitFor(t, 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events: %q, want %q", got, want)
	}
}

// TestEarlyDeliveryOfAListedPage: where the API server cannot stream lists the
// reflector lists in pages: their objects are handed over once, not again by the
// informer.
func TestEarlyDeliveryOfAListedPage(t *testing.T) {
	lw := &streamLW{refuse: true, list: []v1.Service{*versioned("a", "10.0.0.1", "1"), *versioned("b", "10.0.0.2", "2")}}
	r, _ := startEarly(t, lw)
	want := []string{"add service ns/a", "add service ns/b", "services synced"}
	if got := r.waitFor(t, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events: %q, want %q", got, want)
	}
}
