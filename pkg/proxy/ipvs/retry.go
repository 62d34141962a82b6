package ipvs

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
)

// Reasons an object is held back (the reason label of kubeproxy_ipvs_held_back_objects
// and the debug endpoint's "reason").
const (
	heldBackInvalid  = "invalid_value"  // a value refused before it reached the kernel
	heldBackIPVS     = "ipvs_error"     // IPVS refused a virtual or real server
	heldBackIPSet    = "ipset_error"    // ipset refused a member
	heldBackAddress  = "address_error"  // kube-ipvs0 refused an address
	heldBackIPTables = "iptables_error" // iptables-restore refused a Service's rule
	heldBackNFTables = "nftables_error" // nftables refused a set element or a Service's rule
)

var heldBackReasons = []string{heldBackInvalid, heldBackIPVS, heldBackIPSet, heldBackAddress, heldBackIPTables, heldBackNFTables}

type retryKind uint8

const (
	retryVS retryKind = iota + 1
	retryEntry
	retryAddr
	retryOutRule
	// retryElement is an nftables element no member stands for (someone else's)
	// that could not be deleted: the next full sync deletes it again.
	retryElement
)

// retryKey names one kernel object whose write failed.
type retryKey struct {
	kind  retryKind
	vs    vsKey
	entry rules.Member
	out   rules.OutFilter
	text  string // the address, or the element someone else made
}

// retryState is the backoff of one failed object: retried after delay, which starts at
// one second and doubles up to the sync period while the kernel keeps refusing it.
type retryState struct {
	failure
	attempts int
	delay    time.Duration
	next     time.Time
	since    time.Time
}

// HeldBackObject is one object the proxier could not program, as the debug endpoint
// lists it.
type HeldBackObject struct {
	IPFamily  string    `json:"ipFamily"`
	Services  []string  `json:"services,omitempty"`
	Object    string    `json:"object"`
	Reason    string    `json:"reason"`
	Error     string    `json:"error"`
	Attempts  int       `json:"attempts,omitempty"`
	Since     time.Time `json:"since"`
	NextRetry time.Time `json:"nextRetry,omitzero"`
}

// heldBackView is the last sync's list, readable while a sync runs.
type heldBackView struct {
	mu   sync.Mutex
	objs []HeldBackObject
}

// HeldBack returns the objects the last sync could not program, sorted.
func (p *Proxier) HeldBack() []HeldBackObject {
	p.heldBackView.mu.Lock()
	defer p.heldBackView.mu.Unlock()
	return slices.Clone(p.heldBackView.objs)
}

// dueRetries adds to t the keys whose retry time has come (all of them on a full sync).
func (p *Proxier) dueRetries(now time.Time, t *touched) {
	for k, r := range p.retries {
		if !now.Before(r.next) {
			t.setRetryKey(k, true)
		}
	}
}

// withoutRetries takes out of t every key a refusal holds back.
func (f *failureMemory) withoutRetries(t *touched) {
	for k := range f.retries {
		t.setRetryKey(k, false)
	}
}

// setRetryKey puts the object of k in t (in) or takes it out; out-filter rules are
// not keys of t (heldOutRules keeps them out of the text instead).
func (t *touched) setRetryKey(k retryKey, in bool) {
	switch {
	case k.kind == retryVS && in:
		t.vs.Insert(k.vs)
	case k.kind == retryVS:
		t.vs.Delete(k.vs)
	case k.kind == retryEntry && in:
		t.entries.Insert(k.entry)
	case k.kind == retryEntry:
		t.entries.Delete(k.entry)
	case k.kind == retryAddr && in:
		t.addrs.Insert(k.text)
	case k.kind == retryAddr:
		t.addrs.Delete(k.text)
	}
}

// heldOutRules returns the out-filter rules whose retry is not due: they stay out of
// the iptables text until then, so a refused rule does not cost a bisection per sync.
func (f *failureMemory) heldOutRules(now time.Time) map[rules.OutFilter]bool {
	var held map[rules.OutFilter]bool
	for k, r := range f.retries {
		if k.kind == retryOutRule && now.Before(r.next) {
			if held == nil {
				held = map[rules.OutFilter]bool{}
			}
			held[k.out] = true
		}
	}
	return held
}

// recordOutcome updates the retry states after a sync: failed keys back off, keys that
// were written this time are done, keys nobody wants any more are dropped. It returns
// the wait until the earliest retry (0: none).
func (p *Proxier) recordOutcome(now time.Time, t *touched, out *outcome) time.Duration {
	failed := make(map[retryKey]bool, len(out.failures))
	for _, f := range out.failures {
		failed[f.key] = true
		r := p.retries[f.key]
		if r == nil {
			r = &retryState{since: now}
			p.retries[f.key] = r
			p.logger.Error(f.err, "Kernel refused an object; holding it back and retrying", "object", f.what,
				"services", f.owners, "reason", f.layer)
		} else {
			p.logger.V(4).Info("Kernel refused an object again", "object", f.what, "attempts", r.attempts+1, "err", f.err)
		}
		r.failure = f
		r.attempts++
		switch {
		case r.delay < minRetryInterval:
			r.delay = minRetryInterval
		case r.delay < p.opts.SyncPeriod:
			r.delay = min(2*r.delay, p.opts.SyncPeriod)
		}
		r.next = now.Add(r.delay)
	}
	written := map[rules.OutFilter]bool{}
	for _, r := range out.writtenRules {
		written[r] = true
	}
	for k := range p.retries {
		if failed[k] {
			continue
		}
		done := false
		switch k.kind {
		case retryVS:
			done = t.vs.Has(k.vs)
		case retryEntry:
			done = t.entries.Has(k.entry)
		case retryAddr:
			done = t.addrs.Has(k.text)
		case retryOutRule:
			done = written[k.out] || p.index.outRefs[k.out] == 0
		case retryElement:
			done = !now.Before(p.retries[k].next)
		}
		if done {
			if r := p.retries[k]; r.attempts > 0 {
				p.logger.V(2).Info("Held-back object programmed", "object", r.what, "attempts", r.attempts)
			}
			delete(p.retries, k)
		}
	}
	var wait time.Duration
	for _, r := range p.retries {
		if d := r.next.Sub(now); wait == 0 || d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	return wait
}

// publishHeldBack refreshes the debug list and the held-back gauge.
func (p *Proxier) publishHeldBack() {
	if len(p.retries) == 0 && len(p.refusals) == 0 && p.heldBackPublishedEmpty {
		return // the usual sync: nothing held back, nothing to refresh
	}
	p.heldBackPublishedEmpty = len(p.retries) == 0 && len(p.refusals) == 0
	fam := string(p.opts.IPFamily)
	counts := map[string]int{}
	objs := make([]HeldBackObject, 0, len(p.retries))
	for _, r := range p.retries {
		counts[r.layer]++
		objs = append(objs, HeldBackObject{IPFamily: fam, Services: names(r.owners), Object: boundText(r.what), Reason: r.layer,
			Error: boundText(r.err.Error()), Attempts: r.attempts, Since: r.since, NextRetry: r.next})
	}
	for name, refs := range p.refusals {
		for _, rf := range refs {
			counts[heldBackInvalid]++
			objs = append(objs, HeldBackObject{IPFamily: fam, Services: []string{name.String()}, Object: boundText(rf.field + " " + rf.value),
				Reason: heldBackInvalid, Error: boundText(rf.reason), Since: rf.since})
		}
	}
	sort.Slice(objs, func(i, j int) bool {
		if objs[i].Reason != objs[j].Reason {
			return objs[i].Reason < objs[j].Reason
		}
		return objs[i].Object < objs[j].Object
	})
	observeHeldBack(p.opts.IPFamily, counts)
	p.heldBackView.mu.Lock()
	p.heldBackView.objs = objs
	p.heldBackView.mu.Unlock()
}

// maxHeldBackText bounds each text of the held-back list (an object's value comes from
// an API object and may be as long as the API allows), and maxHeldBackServices the
// Services one object names.
const (
	maxHeldBackText     = 512
	maxHeldBackServices = 16
)

// boundText cuts s to maxHeldBackText bytes (at a character boundary) and says so.
func boundText(s string) string {
	if len(s) <= maxHeldBackText {
		return s
	}
	cut := maxHeldBackText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...[truncated: %d bytes in all]", s[:cut], len(s))
}

func names(ns []types.NamespacedName) []string {
	if len(ns) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(ns), maxHeldBackServices+1))
	for i, n := range ns {
		if i == maxHeldBackServices {
			out = append(out, fmt.Sprintf("...[truncated: %d Services in all]", len(ns)))
			break
		}
		out = append(out, n.String())
	}
	return out
}
