package conntrack

import (
	"context"
	"fmt"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/fakeops"
	"net"
	"sort"
	"strings"
	"sync"
)

// Operation names counted by Fake.Ops and accepted by Fake.InjectError.
const (
	OpList   = "List"
	OpDelete = "Delete"
)

// Fake is an in-memory conntrack table of one family. Entries are unique by
// original tuple, as in the kernel; tests add them with AddFlow.
type Fake struct {
	mu               sync.Mutex
	flows            map[string]Flow // by original tuple
	fakeops.Recorder                 // Ops, ResetOps, InjectError
}

var _ Interface = &Fake{}

// NewFake returns an empty table.
func NewFake() *Fake {
	return &Fake{flows: map[string]Flow{}}
}

func copyFlow(f Flow) Flow {
	f.OrigSrc = normalizeIP(append(net.IP(nil), f.OrigSrc...))
	f.OrigDst = normalizeIP(append(net.IP(nil), f.OrigDst...))
	f.ReplySrc = normalizeIP(append(net.IP(nil), f.ReplySrc...))
	return f
}

func flowKey(f Flow) string {
	return origKey(f.Protocol, f.OrigSrc, f.OrigDst, f.OrigSrcPort, f.OrigDstPort)
}

// AddFlow adds an entry, replacing one with the same original tuple.
func (f *Fake) AddFlow(fl Flow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flows[flowKey(fl)] = copyFlow(fl)
}

func (f *Fake) ListFlows(ctx context.Context, protocol uint8) ([]Flow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.Recorder.Begin(ctx, OpList); err != nil {
		return nil, fmt.Errorf("listing conntrack entries: %w", err)
	}
	var out []Flow
	for _, fl := range f.sorted() {
		if fl.Protocol == protocol {
			out = append(out, copyFlow(fl))
		}
	}
	return out, nil
}

func (f *Fake) DeleteFlows(ctx context.Context, flows []Flow) (int, error) {
	if len(flows) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.Recorder.Begin(ctx, OpDelete); err != nil {
		return 0, fmt.Errorf("deleting %d conntrack flows (0 deleted): %w", len(flows), err)
	}
	n := 0
	for _, fl := range flows {
		k := flowKey(fl)
		if _, ok := f.flows[k]; ok {
			delete(f.flows, k)
			n++
		}
	}
	return n, nil
}

// sorted returns the flows ordered as Dump prints them.
func (f *Fake) sorted() []Flow {
	out := make([]Flow, 0, len(f.flows))
	for _, fl := range f.flows {
		out = append(out, fl)
	}
	sort.Slice(out, func(i, j int) bool { return dumpLine(out[i]) < dumpLine(out[j]) })
	return out
}

var protocolNames = map[uint8]string{ProtocolTCP: "tcp", ProtocolUDP: "udp", ProtocolSCTP: "sctp"}

func dumpLine(fl Flow) string {
	name, ok := protocolNames[fl.Protocol]
	if !ok {
		name = fmt.Sprint(fl.Protocol)
	}
	return fmt.Sprintf("%s src=%s dst=%s sport=%d dport=%d reply-src=%s reply-sport=%d",
		name, fl.OrigSrc, fl.OrigDst, fl.OrigSrcPort, fl.OrigDstPort, fl.ReplySrc, fl.ReplySrcPort)
}

// Dump prints one entry per line, sorted, in the style of `conntrack -L`:
//
//	udp src=10.0.0.5 dst=10.96.0.10 sport=40000 dport=53 reply-src=10.1.0.3 reply-sport=53
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, fl := range f.sorted() {
		b.WriteString(dumpLine(fl) + "\n")
	}
	return b.String()
}
