package ipvs

import (
	"net"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/netlink"
)

// Binding ahead. A start-up on a fresh node binds one address per Service to
// kube-ipvs0, and the kernel's address insert walks the device's address list:
// binding N addresses costs O(N^2), 3.4 s of the first sync at 10,000 Services
// and 75 s at 50,000 in the test VM, while the Service and EndpointSlice lists
// before that sync take 4 s and 22 s and keep the kernel idle. With
// Options.BindAhead the proxier binds the ClusterIPs of the Services that arrive
// with the first list (the configs hand them over as they arrive:
// pkg/proxy/config/early.go) while the lists still come in, and the first full
// sync, which stops the binding before it reads the kernel, finds them bound.
//
// Only adding, only ClusterIPs of this proxier's family, and only until the
// lists are complete: the first full sync removes, as it always does, any
// address on kube-ipvs0 no Service wants (a Service deleted while the list
// came in, or one whose ClusterIP the sync refuses). Nothing is written to
// IPVS or the rules before the lists are complete, as upstream. Addresses
// already bound (a restarted daemon) are read first and not bound again: a
// refused duplicate costs the kernel the same list walk.

// bindAhead is the binding ahead of one proxier, a goroutine fed by the
// Service handler until the first full sync ends it.
type bindAhead struct {
	mu     sync.Mutex
	queue  []net.IP
	queued map[string]bool
	wake   chan struct{} // one pending wake-up
	quit   chan struct{}
	done   chan struct{}
	// Written by the goroutine, read after done.
	bound, refused int
	took           time.Duration
	err            error
}

// startBindAhead starts the binding ahead (NewProxier, with Options.BindAhead and
// without Options.WarmStart, whose warm syncs bind the addresses themselves).
func (p *Proxier) startBindAhead() {
	b := &bindAhead{queued: map[string]bool{}, wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	p.ahead.Store(b)
	go p.runBindAhead(b)
}

// bindAheadOf queues the ClusterIPs of svc that this proxier's first sync will
// bind (called by the Service handler before the lists are complete).
func (p *Proxier) bindAheadOf(svc *proxy.ServiceRecord) {
	b := p.ahead.Load()
	if b == nil || svc == nil || svc.Type() == v1.ServiceTypeExternalName || !svc.HasPorts() {
		return
	}
	var add []net.IP
	for _, s := range svc.ClusterIPs() {
		ip := net.ParseIP(s)
		if ip == nil || !p.ourFamily(ip) || !ip.IsGlobalUnicast() || p.excluded(ip) {
			continue
		}
		add = append(add, ip)
	}
	if len(add) == 0 {
		return
	}
	b.mu.Lock()
	for _, ip := range add {
		if k := ip.String(); !b.queued[k] {
			b.queued[k] = true
			b.queue = append(b.queue, ip)
		}
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take removes and returns up to n queued addresses.
func (b *bindAhead) take(n int) []net.IP {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, len(b.queue))
	out := b.queue[:n:n]
	b.queue = b.queue[n:]
	return out
}

func (b *bindAhead) stopping() bool {
	select {
	case <-b.quit:
		return true
	default:
		return false
	}
}

// runBindAhead binds what is queued, bindChunk addresses at a time, until it is
// told to stop; it stops at once on an error it cannot bind past (no device).
func (p *Proxier) runBindAhead(b *bindAhead) {
	defer close(b.done)
	var have map[string]bool // what kube-ipvs0 holds, read at the first wake-up
	var spent time.Duration
	defer func() { b.took = spent }()
	ctx := p.ctx
	for {
		select {
		case <-b.quit:
			return
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		start := p.clock.Now()
		if have == nil {
			if _, err := p.kernel.Netlink.EnsureDummyDevice(ctx, netlink.DefaultDummyDevice); err != nil {
				b.err = err
				return
			}
			addrs, err := p.kernel.Netlink.ListBindAddress(ctx, netlink.DefaultDummyDevice, p.family())
			if err != nil {
				b.err = err
				return
			}
			have = make(map[string]bool, len(addrs))
			for _, a := range addrs {
				have[a.String()] = true
			}
		}
		for !b.stopping() {
			chunk := b.take(bindChunk)
			if len(chunk) == 0 {
				break
			}
			ips := chunk[:0:0]
			for _, ip := range chunk {
				if !have[ip.String()] {
					ips = append(ips, ip)
				}
			}
			for _, err := range p.kernel.Netlink.BindAddresses(ctx, ips, netlink.DefaultDummyDevice) {
				if err != nil {
					b.refused++ // the first full sync binds it, or says why it cannot
				} else {
					b.bound++
				}
			}
		}
		spent += p.clock.Since(start)
	}
}

// endBindAhead stops the binding ahead, if it runs, and waits for it: the
// first full sync reads the addresses after it.
func (p *Proxier) endBindAhead() {
	b := p.ahead.Swap(nil)
	if b == nil {
		return
	}
	close(b.quit)
	<-b.done
	b.mu.Lock()
	left := len(b.queue)
	b.mu.Unlock()
	if b.err != nil {
		p.logger.Error(b.err, "Binding ClusterIPs ahead of the first sync stopped; the sync binds them")
	}
	p.logger.Info("Bound ClusterIPs ahead of the first sync",
		"bound", b.bound, "refused", b.refused, "left", left, "took", b.took)
}
