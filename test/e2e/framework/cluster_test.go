package framework

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCountAnswers(t *testing.T) {
	got, errs := CountAnswers("a from=1.2.3.4:5\nb from=x\na from=y\nERROR dial tcp: refused\n\nSUMMARY ok=3 errors=1\n")
	if got["a"] != 2 || got["b"] != 1 || len(got) != 2 || errs != 1 {
		t.Fatalf("CountAnswers = %v, %d", got, errs)
	}
}

func TestEventually(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := Eventually(ctx, 5*time.Second, time.Millisecond, func(context.Context) error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Eventually = %v after %d calls", err, n)
	}
	boom := errors.New("boom")
	n = 0
	err := Eventually(ctx, 5*time.Second, time.Millisecond, func(context.Context) error {
		n++
		return StopTrying(boom)
	})
	if !errors.Is(err, boom) || n != 1 {
		t.Fatalf("StopTrying: err %v after %d calls, want boom after 1", err, n)
	}
	err = Eventually(ctx, 20*time.Millisecond, time.Millisecond, func(context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("timeout error %v does not wrap the last one", err)
	}
}

func TestDiscoveryEndpoint(t *testing.T) {
	ready := discoveryEndpoint("ns", Endpoint{PodName: "a", IP: "10.244.0.1"})
	if !*ready.Conditions.Ready || !*ready.Conditions.Serving || *ready.Conditions.Terminating || *ready.NodeName != NodeName || ready.Hints != nil || ready.Zone != nil {
		t.Fatalf("default endpoint = %+v", ready)
	}
	term := discoveryEndpoint("ns", Endpoint{IP: "10.244.0.2", Terminating: true, Node: "other", Zone: "z1", ZoneHints: []string{"z1", "z2"}})
	if *term.Conditions.Ready || !*term.Conditions.Serving || !*term.Conditions.Terminating || *term.NodeName != "other" || *term.Zone != "z1" || len(term.Hints.ForZones) != 2 || term.Hints.ForZones[1].Name != "z2" {
		t.Fatalf("terminating endpoint = %+v", term)
	}
	gone := discoveryEndpoint("ns", Endpoint{IP: "10.244.0.3", Terminating: true, NotServing: true})
	if *gone.Conditions.Ready || *gone.Conditions.Serving || !*gone.Conditions.Terminating {
		t.Fatalf("terminating, not serving endpoint = %+v", gone.Conditions)
	}
}
